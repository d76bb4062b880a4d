"""The kernel's live state after a compaction: the notebook's version of re-reading
recent files (rehydration).

A summary says what the code did; the kernel says what exists now. After every compaction the
agent gets a budgeted inventory of the user's namespace, read at that moment: variables with
their type, shape, dtype and columns (DataFrames, Series, arrays), length (built-in
containers), size, the functions and classes defined in the session, the modules imported.
Tables and arrays first, then containers and text, then scalars, each group largest first,
within a token budget.

Nothing here runs the user's code: no repr() or str() of a user object, no len() of anything but
the exact built-in containers, no attribute of an object whose type is not known to be cheap
(pandas and numpy objects are recognised by their exact classes, from modules the user already
imported). Every read is guarded; an object that resists is listed by its type name.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.context.tokens import count_text

HEADER = "The notebook kernel's live state now (read from the kernel at this compaction, not from the summary):"
MAX_COLUMNS = 30  # a wide table's first columns say what it is; the rest are counted
MAX_NAME_CHARS = 60  # a column label or a name cut to this
MAX_TAIL_CHARS = 600  # the functions, classes, modules and left-out lines: a few lines each at most
IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython", "open"})
SCALARS = (bool, int, float, complex)
CONTAINERS = (list, tuple, dict, set, frozenset)
SIZED_TEXT = (str, bytes, bytearray)
LABELS = (str, int, float, bool)  # column labels whose str() is the built-in one
_MISSING = object()


@dataclass(frozen=True)
class Item:
    name: str
    line: str
    size: int | None  # bytes, when known
    rank: int = 3
    """Listed first to last: tables and arrays, containers and text, scalars, other objects."""


def _cut(text: str, limit: int = MAX_NAME_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _type_name(obj: Any) -> str:
    cls = type(obj)
    try:
        module = type.__getattribute__(cls, "__module__")
        name = type.__getattribute__(cls, "__qualname__")
    except Exception:  # noqa: BLE001 - a type that resists naming
        return "object"
    return str(name) if module in ("builtins", "__main__") else f"{module}.{name}"


def _exact(kind: type, kinds: tuple[type, ...]) -> bool:
    """`kind` is one of `kinds` itself: by identity, since `in` would call a metaclass's __eq__."""
    return any(kind is k for k in kinds)


def _module(name: str, module: Any) -> str:
    try:
        real = types.ModuleType.__dict__["__dict__"].__get__(module)["__name__"]
    except Exception:  # noqa: BLE001 - a module object that resists: its name in the notebook
        return name
    return name if real == name else f"{name} ({real})"


def _label(value: Any) -> str:
    """A column label as text, only for labels whose str() is the built-in one."""
    if _exact(type(value), LABELS):
        return _cut(str(value))
    if type(value) is tuple and all(_exact(type(v), LABELS) for v in value):
        return _cut(" / ".join(map(str, value)))
    return f"<{_type_name(value)}>"


def _module_class(module: str, name: str) -> Any:
    """A class of a module the user already imported (never imported here)."""
    loaded = sys.modules.get(module)
    return getattr(loaded, name, _MISSING) if loaded is not None else _MISSING


def _dataframe(name: str, df: Any) -> Item:
    rows, cols = df.shape
    size = int(df.memory_usage(index=True, deep=False).sum())
    labels = list(df.columns[:MAX_COLUMNS])
    dtypes = [str(d) for d in df.dtypes.iloc[:MAX_COLUMNS]]
    columns = ", ".join(f"{_label(c)} ({d})" for c, d in zip(labels, dtypes))
    more = f", … {cols - MAX_COLUMNS} more" if cols > MAX_COLUMNS else ""
    return Item(name, f"- {name}: DataFrame {rows:,} rows × {cols:,} columns ({_bytes(size)}); "
                      f"columns: {columns}{more}", size, 0)


def _series(name: str, series: Any) -> Item:
    size = int(series.memory_usage(index=True, deep=False))
    label = f", name {_label(series.name)}" if series.name is not None else ""
    line = f"- {name}: Series {series.shape[0]:,} rows, dtype {series.dtype}{label} ({_bytes(size)})"
    return Item(name, line, size, 0)


def _ndarray(name: str, array: Any) -> Item:
    size = int(array.nbytes)
    shape = " × ".join(f"{n:,}" for n in array.shape) or "scalar"
    return Item(name, f"- {name}: ndarray {shape}, dtype {array.dtype} ({_bytes(size)})", size, 0)


def _builtin(name: str, value: Any) -> Item:
    kind = type(value)
    size = sys.getsizeof(value)  # the built-in __sizeof__ of an exact built-in type
    if _exact(kind, SCALARS):
        text = repr(value) if kind is not int or abs(value) < 10**18 else f"an int of {value.bit_length()} bits"
        return Item(name, f"- {name}: {kind.__name__} = {_cut(text)}", size, 2)
    if _exact(kind, SIZED_TEXT):
        unit = "characters" if kind is str else "bytes"
        return Item(name, f"- {name}: {kind.__name__}, {len(value):,} {unit}", size, 1)
    return Item(name, f"- {name}: {kind.__name__}, {len(value):,} items ({_bytes(size)} shallow)", size, 1)


def describe(name: str, value: Any) -> Item:
    """One variable, read without running its code; its type name alone if anything resists."""
    kind = type(value)
    try:
        if kind is _module_class("pandas", "DataFrame"):
            return _dataframe(name, value)
        if kind is _module_class("pandas", "Series"):
            return _series(name, value)
        if kind is _module_class("numpy", "ndarray"):
            return _ndarray(name, value)
        if _exact(kind, (*SCALARS, *CONTAINERS, *SIZED_TEXT)):
            return _builtin(name, value)
        if value is None:
            return Item(name, f"- {name}: None", 0, 2)
    except Exception:  # noqa: BLE001 - an object that resists: its type is still worth saying
        pass
    return Item(name, f"- {name}: {_type_name(value)}", None)


def _is_user_defined(value: Any) -> bool:
    """A function or class defined in the notebook itself (its module is the kernel's __main__)."""
    try:
        return getattr(value, "__module__", None) == "__main__"
    except Exception:  # noqa: BLE001 - a class whose metaclass resists
        return False


def _function(name: str, fn: types.FunctionType) -> str:
    """name(args) from the code object: no inspect.signature, which would read __wrapped__ and friends."""
    code = fn.__code__
    names = code.co_varnames
    end = code.co_argcount + code.co_kwonlyargcount
    args = list(names[: code.co_argcount])
    if code.co_flags & inspect.CO_VARARGS:
        args.append("*" + names[end])
        end += 1
    elif code.co_kwonlyargcount:
        args.append("*")
    args += names[code.co_argcount: code.co_argcount + code.co_kwonlyargcount]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        args.append("**" + names[end])
    return f"{name}({', '.join(args)})"


def user_names(namespace: Mapping[str, Any], hidden: Mapping[str, Any] | None = None) -> Iterator[tuple[str, Any]]:
    """The user's names, as IPython's %who sees them: not private, not IPython's own."""
    hidden = hidden or {}
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in IPYTHON_NAMES:
            continue
        if name in hidden and hidden[name] is value:
            continue
        yield name, value


def inventory(namespace: Mapping[str, Any], budget_tokens: int, hidden: Mapping[str, Any] | None = None) -> str:
    """The inventory text within `budget_tokens` ('' when there is nothing or no budget)."""
    if budget_tokens <= 0:
        return ""
    variables: list[Item] = []
    functions: list[str] = []
    classes: list[str] = []
    modules: list[str] = []
    for name, value in user_names(namespace, hidden):
        kind = type(value)  # never isinstance(): it may read a __class__ the user's class defines
        if issubclass(kind, types.ModuleType):
            modules.append(_module(name, value))
        elif kind is types.FunctionType and _is_user_defined(value):
            functions.append(_function(name, value))
        elif issubclass(kind, type) and _is_user_defined(value):
            classes.append(name)
        elif not callable(value) or _exact(kind, CONTAINERS):
            variables.append(describe(name, value))
    if not (variables or functions or classes or modules):
        return ""
    variables.sort(key=lambda item: (item.rank, -(item.size or 0), item.name))
    tail = [_cut(line, MAX_TAIL_CHARS) for line, items in (
        ("Functions defined: " + ", ".join(functions), functions),
        ("Classes defined: " + ", ".join(classes), classes),
        ("Modules imported: " + ", ".join(modules), modules),
    ) if items]
    shown = list(variables)
    text = _render(shown, variables, tail)
    # What gives way first: the smallest variables (down to the largest one), then the modules,
    # classes and functions lines, then that last variable.
    while count_text(text) > budget_tokens and len(shown) > 1:
        shown.pop()
        text = _render(shown, variables, tail)
    while count_text(text) > budget_tokens and tail:
        tail.pop()
        text = _render(shown, variables, tail)
    while count_text(text) > budget_tokens and shown:
        shown.pop()
        text = _render(shown, variables, tail)
    return text if count_text(text) <= budget_tokens else ""


def _render(shown: list[Item], variables: list[Item], tail: list[str]) -> str:
    listed = {item.name for item in shown}
    left_out = [item.name for item in variables if item.name not in listed]
    more = [_cut(f"… {len(left_out):,} more variables not shown: {', '.join(left_out)}", MAX_TAIL_CHARS)] \
        if left_out else []
    return "\n".join([HEADER, *(item.line for item in shown), *more, *tail])
