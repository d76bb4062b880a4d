"""`python benchmarks/house.py`: how the package is built, counted from its source.

Prints the lines per package, the modules over 400 lines and classes over 200 (`--sizes FOLDER`:
each module's lines and its classes' instead), the Protocols and the classes that implement each (matched by
the names a class defines), the properties that only forward to another object's attribute,
the functions that take more than eight parameters, the class names used twice and the reach-through
into the agent's `Session` from outside agent/session.py (`session.a.b` and `getattr(`, by file). Nothing
is imported: the source is parsed with `ast`, so the counts are the same on any machine.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_PARAMETERS = 8  # a function past this wants one value instead of a bundle of keywords
MAX_MODULE_LINES = 400  # the house's rule: a module past this is read in more than one sitting
MAX_CLASS_LINES = 200  # and a class past this has more than one job
COLLABORATORS = {"session", "frame", "model", "executor"}  # the session's parts, met duck-typed through getattr


@dataclass
class ClassInfo:
    name: str
    where: str
    protocol: bool
    members: set[str] = field(default_factory=set)
    methods: set[str] = field(default_factory=set)


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "labextension" not in p.parts)


def _defined_names(node: ast.ClassDef) -> set[str]:
    """What instances of the class have: its methods, class attributes, fields, and the
    attributes its methods assign on self."""
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(item.name)
            for sub in ast.walk(item):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self" \
                        and isinstance(sub.ctx, ast.Store):
                    names.add(sub.attr)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.Assign):
            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return names


def _methods(node: ast.ClassDef) -> set[str]:
    return {item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list)}


def _is_protocol(node: ast.ClassDef) -> bool:
    return any((isinstance(b, ast.Name) and b.id == "Protocol")
               or (isinstance(b, ast.Attribute) and b.attr == "Protocol") for b in node.bases)


def _protocol_members(node: ast.ClassDef) -> set[str]:
    names = _defined_names(node)
    return {n for n in names if not n.startswith("__")}


def classes(files: list[Path], root: Path) -> list[ClassInfo]:
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                protocol = _is_protocol(node)
                members = _protocol_members(node) if protocol else _defined_names(node)
                found.append(ClassInfo(node.name, f"{path.relative_to(root)}:{node.lineno}", protocol, members,
                                       _methods(node)))
    return found


def type_aliases(files: list[Path], root: Path) -> list[tuple[str, str]]:
    """Module-level names bound to a type (`Turn = dict[str, Any]`): a name a reader takes for a class."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id[:1].isupper() and not node.targets[0].id.isupper() \
                    and isinstance(node.value, ast.Subscript):
                found.append((node.targets[0].id, f"{path.relative_to(root)}:{node.lineno}"))
    return found


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if named and named[0] in ("self", "cls"):
        named = named[1:]
    return len(named) + (args.vararg is not None) + (args.kwarg is not None)


def _chain(node: ast.expr) -> list[str] | None:
    """`self.a.b` -> ['self', 'a', 'b']; anything else -> None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def forwarding_properties(files: list[Path], root: Path) -> list[str]:
    """Properties whose whole body returns another object's attribute (`return self.part.x`)."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for item in cls.body:
                if not isinstance(item, ast.FunctionDef):
                    continue
                if not any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list):
                    continue
                body = [s for s in item.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                    continue
                chain = _chain(body[0].value)
                if chain is not None and chain[0] == "self" and len(chain) >= 3:
                    found.append(f"{path.relative_to(root)}:{item.lineno} {cls.name}.{item.name} -> "
                                 f"{'.'.join(chain)}")
    return found


def reach_through(tree: ast.AST) -> tuple[int, int]:
    """(`session.a.b` chains, `getattr(` calls on a collaborator) in a module: a part reaching
    through the session to another part, and a seam left to duck typing. `self.session.a.b` counts too; a longer chain
    (`session.a.b.c`) counts once."""
    inner: set[int] = set()
    chains = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        chain = _chain(node)
        if chain is None:
            continue
        start = 1 if chain[0] == "session" else 2 if chain[:2] in (["self", "session"], ["self", "_session"]) else 0
        if start and len(chain) - start >= 2:
            chains += 1
            sub = node.value
            while isinstance(sub, ast.Attribute):
                inner.add(id(sub))
                sub = sub.value
    calls = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and node.args:
            chain = _chain(node.args[0]) or []
            calls += any(name in COLLABORATORS for name in chain)
    return chains, calls


def reach_table(files: list[Path], root: Path) -> None:
    """The reach-through into Session by file, outside the session's own module."""
    rows = []
    for path in files:
        rel = path.relative_to(root)
        if rel.as_posix().endswith("agent/session.py"):
            continue
        chains, calls = reach_through(ast.parse(path.read_text(encoding="utf-8")))
        if chains or calls:
            rows.append((str(rel), chains, calls))
    print(f"\n## Reach-through into Session: {sum(r[1] for r in rows)} `session.a.b`, "
          f"{sum(r[2] for r in rows)} `getattr(`\n")
    print("| module | session.a.b | getattr( |\n| --- | ---: | ---: |")
    for rel, chains, calls in rows:
        print(f"| {rel} | {chains} | {calls} |")


def line_kinds(source: str) -> Counter[str]:
    """A file's lines by kind: code, docstring, comment, blank."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    kinds: Counter[str] = Counter()
    for number, line in enumerate(source.splitlines(), 1):
        text = line.strip()
        kinds["blank" if not text else "docstring" if number in docstrings else
              "comment" if text.startswith("#") else "code"] += 1
    return kinds


def _class_sizes(tree: ast.AST) -> list[tuple[str, int]]:
    return [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, ast.ClassDef) and n.end_lineno is not None]


def sizes(files: list[Path], root: Path) -> None:
    """Each module's lines and its classes' lines."""
    print("| module | lines | classes (lines) |\n| --- | ---: | --- |")
    for path in files:
        source = path.read_text(encoding="utf-8")
        shown = ", ".join(f"{name} {count}" for name, count in _class_sizes(ast.parse(source)))
        print(f"| {path.relative_to(root)} | {len(source.splitlines()):,} | {shown} |")


def oversized(files: list[Path], root: Path) -> None:
    """The modules and classes past the house's sizes."""
    modules, big = [], []
    for path in files:
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > MAX_MODULE_LINES:
            modules.append(f"{path.relative_to(root)} {len(source.splitlines())}")
        big += [f"{path.relative_to(root)} {name} {count}" for name, count in _class_sizes(ast.parse(source))
                if count > MAX_CLASS_LINES]
    print(f"\n## Modules over {MAX_MODULE_LINES} lines: {len(modules)}\n")
    for line in modules:
        print(f"- {line}")
    print(f"\n## Classes over {MAX_CLASS_LINES} lines: {len(big)}\n")
    for line in big:
        print(f"- {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="ctx_magic", help="the package folder to count")
    parser.add_argument("--sizes", metavar="FOLDER", help="only the lines of each module under FOLDER and its classes")
    parser.add_argument("--seams", default="Model,Executor,ToolContext,Summarizer,TextModel",
                        help="Protocols that stand at a true seam, listed apart")
    options = parser.parse_args()
    root = Path(options.package).resolve().parent
    files = python_files(Path(options.package).resolve())
    if options.sizes:
        sizes(python_files(Path(options.sizes).resolve()), Path.cwd())
        return

    lines: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for path in files:
        rel = path.relative_to(root)
        folder = str(rel.parent) if len(rel.parts) > 2 else str(rel.parts[0])
        source = path.read_text(encoding="utf-8")
        lines[folder] += len(source.splitlines())
        kinds += line_kinds(source)
    print("## Lines\n\n| folder | lines |\n| --- | --- |")
    for folder, count in sorted(lines.items()):
        print(f"| {folder} | {count:,} |")
    print(f"| **total** | **{sum(lines.values()):,}** |\n")
    by_kind = ", ".join(f"{kind} {kinds[kind]:,}" for kind in ("code", "docstring", "comment", "blank"))
    print(f"By kind: {by_kind}\n")

    found = classes(files, root)
    concrete = [c for c in found if not c.protocol]
    seams = set(options.seams.split(","))
    print("## Protocols\n\n| protocol | where | implementers | seam |\n| --- | --- | --- | --- |")
    single = 0
    for proto in (c for c in found if c.protocol):
        # An implementer has every member, and the Protocol's methods as methods (not data fields).
        implementers = [c.name for c in concrete if proto.members and proto.members <= c.members
                        and proto.methods <= c.methods]
        seam = proto.name in seams
        single += len(implementers) <= 1 and not seam
        print(f"| {proto.name} | {proto.where} | {', '.join(implementers) or '-'} | {'yes' if seam else ''} |")
    print(f"\nProtocols with at most one implementation, seams aside: {single}\n")

    oversized(files, root)

    forwarding = forwarding_properties(files, root)
    print(f"## Forwarding-only properties: {len(forwarding)}\n")
    for line in forwarding:
        print(f"- {line}")

    wide = []
    for path in files:
        for fn in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            count = parameter_count(fn)
            if count > MAX_PARAMETERS:
                wide.append((count, f"{path.relative_to(root)}:{fn.lineno} {fn.name}"))
    print(f"\n## Functions over {MAX_PARAMETERS} parameters: {len(wide)}\n")
    for count, where in sorted(wide, reverse=True):
        print(f"- {count}: {where}")

    names: dict[str, list[str]] = defaultdict(list)
    for c in found:
        names[c.name].append(c.where)
    for name, where in type_aliases(files, root):
        names[name].append(where)
    twice = {n: w for n, w in names.items() if len(w) > 1}
    print(f"\n## Class names used twice: {len(twice)}\n")
    for name, where in sorted(twice.items()):
        print(f"- {name}: {', '.join(where)}")

    reach_table(files, root)


if __name__ == "__main__":
    main()
