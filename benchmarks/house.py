"""`python benchmarks/house.py`: how the package is built, counted from its source.

Prints the lines per package, the modules over 400 lines and classes over 200 (`--sizes FOLDER`:
each module's lines and its classes' instead), the Protocols and the classes that implement each (matched by
the names a class defines), the properties that only forward to another object's attribute,
the functions that take more than eight parameters, the class names used twice, the places a setting
is written with the `Settings` fields no part reads (`settings_places`), the attributes assigned outside
their class, and the reach-through into the agent's `Session` from outside agent/session.py (`session.a.b`
and `getattr(`, by file). Nothing
is imported: the source is parsed with `ast`, so the counts are the same on any machine.
"""

from __future__ import annotations

import argparse
import ast
import builtins
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


# -- attributes assigned outside their class ----------------------------------------------------------

_LIBRARY, _PACKAGE, _UNKNOWN = "library", "package", "unknown"


class _Origins:
    """Where the objects of one file come from, as far as its source says: a library (imported from
    outside the package) or the package (its own classes, or anything not known)."""

    def __init__(self, tree: ast.Module, package: str) -> None:
        self.modules: set[str] = set()
        """Names bound to a module by `import x` (`sys`): their attributes are the module's."""
        self.imported: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    self.modules.add(name)
                    self.imported[name] = _PACKAGE if alias.name.startswith(package) else _LIBRARY
            elif isinstance(node, ast.ImportFrom):
                ours = node.level > 0 or (node.module or "").startswith(package)
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = _PACKAGE if ours else _LIBRARY
        self.defined = {node.name for node in tree.body
                        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
        """The classes and functions of the file itself: what they make is the package's."""

    def of_type(self, node: ast.expr | None) -> str:
        """A call's or an annotation's origin, by the name it starts with (`widgets.HTML(...)`)."""
        while isinstance(node, (ast.Call, ast.Subscript, ast.Attribute, ast.BinOp)):
            node = node.func if isinstance(node, ast.Call) else node.left if isinstance(node, ast.BinOp) \
                else node.value  # `X | None` is an X
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            return self.of_type(ast.Name(node.value))  # a quoted annotation
        if isinstance(node, ast.Constant):  # a method of a literal (`"".join(...)`)
            return _LIBRARY
        if isinstance(node, ast.Name) and node.id in self.imported:
            return self.imported[node.id]
        if isinstance(node, ast.Name) and node.id in self.defined:
            return _PACKAGE
        if isinstance(node, ast.Name) and hasattr(builtins, node.id):
            return _LIBRARY  # dict(), open(), str
        return _UNKNOWN


def _local_origins(function: ast.FunctionDef | ast.AsyncFunctionDef, origins: _Origins) -> dict[str, str]:
    """What the names of a function hold: its parameters by their annotation, its locals by the
    call that made them, a name checked with `isinstance` against library classes only."""
    found: dict[str, str] = {}
    args = function.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
        if arg.annotation is not None:
            found[arg.arg] = origins.of_type(arg.annotation)
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, origins.of_type(node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2 and isinstance(node.args[0], ast.Name):
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if all(origins.of_type(kind) == _LIBRARY for kind in kinds) \
                    and found.get(node.args[0].id, _UNKNOWN) == _UNKNOWN:
                found[node.args[0].id] = _LIBRARY
    return found


def descriptors(files: list[Path], package: str = "ctx_magic") -> dict[str, set[str]]:
    """The names each class built on a library class binds in its body to a call (`model =
    Unicode(...)` in a traitlets Configurable): traits, whose assignment from outside is the
    library's interface (`%config` sets them the same way)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        origins = _Origins(tree, package)
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            if not any(origins.of_type(base) == _LIBRARY for base in cls.bases):
                continue
            for item in cls.body:
                if isinstance(item, ast.Assign) and isinstance(item.value, ast.Call):
                    found[cls.name].update(t.id for t in item.targets if isinstance(t, ast.Name))
    return found


def _library_based(files: list[Path], package: str = "ctx_magic") -> dict[str, set[str]]:
    """For each class built on a library class, the attributes it does not declare or set itself:
    what the library makes of it (traits made in a loop, a widget's `layout`)."""
    found: dict[str, set[str]] = {}
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        origins = _Origins(tree, package)
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            if any(origins.of_type(base) == _LIBRARY for base in cls.bases):
                found[cls.name] = _NotIn(_defined_names(cls))
    return found


class _NotIn(set[str]):
    """Every name but the ones given (`name in _NotIn(own)` is `name not in own`)."""

    def __contains__(self, name: object) -> bool:
        return not super().__contains__(name)


def _made_by(cls: ast.ClassDef) -> dict[str, str]:
    """The class each attribute of `cls` is made by, where a method sets it from a call (`self.x = X()`)."""
    made: dict[str, str] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            for target in node.targets:
                chain = _chain(target)
                if chain is not None and len(chain) == 2 and chain[0] == "self":
                    made.setdefault(chain[1], node.value.func.id)
    return made


def _member_origins(cls: ast.ClassDef, origins: _Origins) -> tuple[dict[str, str], bool]:
    """What a class's attributes hold (by the call or the annotated parameter they are set from),
    and whether it is built on a library class (what it does not set itself, it inherits)."""
    found: dict[str, str] = {}
    for function in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        params = _local_origins(function, origins)
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                chain = _chain(target)
                if chain is None or len(chain) != 2 or chain[0] != "self":
                    continue
                origin = origins.of_type(node.annotation) if isinstance(node, ast.AnnAssign) \
                    else origins.of_type(node.value) if isinstance(node.value, ast.Call) \
                    else params.get(node.value.id, _UNKNOWN) if isinstance(node.value, ast.Name) else _UNKNOWN
                if found.get(chain[1], _UNKNOWN) == _UNKNOWN:
                    found[chain[1]] = origin
    return found, any(origins.of_type(base) == _LIBRARY for base in cls.bases)


def _writes(tree: ast.Module) -> Iterator[tuple[ast.Attribute, ast.ClassDef | None,
                                                ast.FunctionDef | ast.AsyncFunctionDef | None]]:
    """Every `x.attr = ...` (plain, augmented, annotated, unpacked) with its class and function."""
    def visit(node: ast.AST, cls: ast.ClassDef | None, function: ast.FunctionDef | ast.AsyncFunctionDef | None
              ) -> Iterator[tuple[ast.Attribute, ast.ClassDef | None,
                                  ast.FunctionDef | ast.AsyncFunctionDef | None]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, child, None)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from visit(child, cls, child if function is None else function)
                continue
            targets = child.targets if isinstance(child, ast.Assign) else [child.target] \
                if isinstance(child, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for item in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                    if isinstance(item, ast.Attribute):
                        yield item, cls, function
            yield from visit(child, cls, function)
    yield from visit(tree, None, None)


def foreign_writes(files: list[Path], root: Path, package: str = "ctx_magic") -> list[str]:
    """Assignments to an attribute of another object than `self` or `cls` (`record.error = ...`,
    `self.frame.bound = ...`): only the class should write its fields. Left out, because there
    assignment is the library's interface: attributes of a module (`sys.stdin`), of an object a
    library made (a widget's `value`, a thread's `daemon`: known by the call or annotation it comes
    from, or an `isinstance` check against library classes), what a class built on a library class
    inherits (a widget's `layout`), the traits of a traitlets class of the package (`self.settings =
    CtxMagic(...)`, then `self.settings.model = ...`, as `%config` does: a name the class declares with a
    call, or one it neither declares nor sets), and dunders (`sys.__class__`).
    `setattr` is not counted (the output capture patches IPython's objects that way). An object of
    unknown origin counts."""
    found = []
    traits = descriptors(files, package)
    built_on_library = _library_based(files, package)
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        origins = _Origins(tree, package)
        members, made = {}, {}
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            members[cls], made[cls] = _member_origins(cls, origins), _made_by(cls)
        for target, cls, function in _writes(tree):
            obj = target.value
            if isinstance(obj, ast.Name) and obj.id in ("self", "cls") or target.attr.startswith("__"):
                continue
            chain = _chain(obj)
            maker = made[cls].get(chain[1], "") if cls is not None and chain is not None and len(chain) == 2 \
                and chain[0] == "self" else ""
            if target.attr in traits.get(maker, ()) or target.attr in built_on_library.get(maker, ()):
                continue
            names = _local_origins(function, origins) if function is not None else {}
            if _object_origin(obj, names, members.get(cls) if cls is not None else None, origins) == _LIBRARY:
                continue
            found.append(f"{path.relative_to(root)}:{target.lineno} {ast.unparse(target)}")
    return found


def _object_origin(obj: ast.expr, names: dict[str, str], member: tuple[dict[str, str], bool] | None,
                   origins: _Origins) -> str:
    """Where `obj` (the object whose attribute is assigned) comes from: the first library object
    along its chain makes it a library's."""
    chain = _chain(obj)
    if chain is None:
        return _UNKNOWN
    head, rest = chain[0], chain[1:]
    if head == "self" and rest and member is not None:
        held, library_base = member
        if held.get(rest[0], _LIBRARY if library_base else _UNKNOWN) == _LIBRARY:
            return _LIBRARY
        return _UNKNOWN
    if head in names:
        return names[head]
    if head in origins.modules or origins.imported.get(head) == _LIBRARY:
        return _LIBRARY
    return _UNKNOWN


HOLDERS = {"CtxMagic", "MemorySettings", "ContextSettings"}  # values that hold a setting without being `Settings`


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def _held_fields(files: list[Path]) -> set[tuple[str, str]]:
    """(class, attribute) for every class field or `self.x = ...` typed as one of HOLDERS."""
    held = set()
    for path in files:
        for cls in (n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)):
            typed = {a.arg for f in ast.walk(cls) if isinstance(f, ast.FunctionDef) for a in f.args.args
                     if a.annotation is not None and _names(a.annotation) & HOLDERS}
            for node in ast.walk(cls):
                if isinstance(node, ast.AnnAssign) and _names(node.annotation) & HOLDERS:
                    target = node.target
                    held.add((cls.name, target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")))
                elif isinstance(node, ast.Assign) and (_names(node.value) & (HOLDERS | typed)):
                    held.update((cls.name, t.attr) for t in node.targets if isinstance(t, ast.Attribute))
    return held


def _reads(tree: ast.AST, fields: set[str], held: set[tuple[str, str]]) -> set[str]:
    """The fields loaded from a `Settings`: on `settings.current`, or on a name or attribute called
    `*settings*` (or a local made from one: `wanted = config.to_settings()`) unless typed as one of HOLDERS, in the
    function (`settings: CtxMagic`) or in the class the attribute belongs to (`manager.settings`
    of a `MemoryManager`)."""
    found: set[str] = set()
    owners = {fn: cls.name for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for fn in ast.walk(cls)}

    def typed(chain: list[str], fn: ast.AST, other: set[str]) -> bool:
        """The value at the end of `chain` is one of HOLDERS."""
        owner = chain[-2].lstrip("_") if len(chain) > 1 else ""
        return chain[0] in other or (chain[0] == "self" and len(chain) == 2 and (owners.get(fn), chain[1]) in held) \
            or any(attr == chain[-1] and owner and _snake(cls).endswith(owner) for cls, attr in held)

    def current(chain: list[str]) -> bool:
        """`config.current`: the `Settings` a `CtxMagic` holds."""
        return len(chain) > 1 and chain[-1] == "current" and "settings" in chain[-2]

    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        other = {a.arg for a in (*fn.args.args, *fn.args.kwonlyargs)
                 if a.annotation is not None and _names(a.annotation) & HOLDERS}
        local = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else node.targets
                for target, value in zip(targets, values):
                    chain = _chain(value.func if isinstance(value, ast.Call) else value) or []
                    if isinstance(target, ast.Name) and chain and current(chain):
                        local.add(target.id)
                    if not isinstance(target, ast.Name) or not chain or "settings" not in chain[-1]:
                        continue
                    made = isinstance(value, ast.Call) and len(chain) > 1  # config.to_settings()
                    if made or not typed(chain, fn, other):
                        local.add(target.id)
                    else:
                        other.add(target.id)
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in fields):
                continue
            chain = _chain(node.value) or []
            if chain == [chain[0]] and chain[0] in local:
                found.add(node.attr)
            elif chain and (current(chain) or ("settings" in chain[-1] and not typed(chain, fn, other))):
                found.add(node.attr)
    return found


def _default_of(value: ast.expr) -> ast.expr:
    """A field's default: the value, or the first argument of `setting(...)` / `field(default=...)`."""
    if isinstance(value, ast.Call) and (_chain(value.func) or [""])[-1] in ("setting", "field"):
        given = [k.value for k in value.keywords if k.arg == "default"]
        return value.args[0] if value.args else given[0] if given else value
    return value


def _untagged(value: ast.expr) -> ast.Call:
    """The trait's own call: `Int(5, min=1)` of `Int(5, min=1).tag(config=True)`."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "tag":
        value = value.func.value
    return value if isinstance(value, ast.Call) else ast.Call(func=value, args=[], keywords=[])


def settings_places(package: Path) -> tuple[Counter[str], list[str]]:
    """Where a setting is written, and the fields of `Settings` no part reads.

    Written: a constant (a module-level name a field or a trait takes its default from), the
    field of `Settings`, a trait written out in `CtxMagic`'s class body, a copy (a constant of a
    default imported elsewhere, or a field handed to another settings value by keyword:
    `MemorySettings(author=settings.author)`)."""
    settings_tree = ast.parse((package / "settings.py").read_text(encoding="utf-8"))
    config_tree = ast.parse((package / "notebook" / "config.py").read_text(encoding="utf-8"))
    spec = next(n for n in settings_tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    fields = [n.target.id for n in spec.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    module_constants = {t.id for n in settings_tree.body if isinstance(n, ast.Assign)
                        for t in n.targets if isinstance(t, ast.Name)}
    magic = next(n for n in config_tree.body if isinstance(n, ast.ClassDef) and n.name == "CtxMagic")
    traits = [n for n in magic.body if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id in fields for t in n.targets)]
    defaults = [_default_of(n.value) for n in spec.body if isinstance(n, ast.AnnAssign) and n.value is not None]
    defaults += [arg for n in traits for arg in _untagged(n.value).args[:1]]
    constants = {n.id for d in defaults for n in ast.walk(d) if isinstance(n, ast.Name) and n.id in module_constants}
    places: Counter[str] = Counter(field=len(fields), trait=len(traits), constant=len(constants))
    files = python_files(package)
    held = _held_fields(files)
    read = {n.attr for n in ast.walk(spec) if isinstance(n, ast.Attribute) and _chain(n) == ["self", n.attr]}
    for path in files:
        if path in (package / "settings.py", package / "notebook" / "config.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        read |= _reads(tree, set(fields), held)
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "ctx_magic.settings"
                    for a in n.names} & constants
        places["copy"] += sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in imported)
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for call in (n for n in ast.walk(cls) if isinstance(n, ast.Call)):
                callee = (_chain(call.func) or [""])[-1]
                if callee.endswith("Settings") or (callee == "cls" and cls.name.endswith("Settings")):
                    places["copy"] += sum(1 for k in call.keywords if len(_chain(k.value) or []) > 1
                                          and (_chain(k.value) or [""])[-1] in fields)
    return places, [f for f in fields if f not in read]


def settings_report(package: Path) -> None:
    places, unread = settings_places(package)
    print(f"\n## Settings: places a setting is written: {sum(places.values())}\n")
    print(", ".join(f"{kind} {places[kind]}" for kind in ("constant", "field", "trait", "copy")))
    print(f"\nSettings fields never read: {len(unread)}{': ' if unread else ''}{', '.join(unread)}")


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
    settings_report(Path(options.package).resolve())

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

    writes = foreign_writes(files, root)
    by_file = Counter(line.split(":")[0] for line in writes)
    print(f"\n## Attributes assigned outside their class: {len(writes)}\n")
    for path, count in sorted(by_file.items()):
        print(f"- {path}: {count}")
    for line in writes:
        print(f"  - {line}")

    reach_table(files, root)


if __name__ == "__main__":
    main()
