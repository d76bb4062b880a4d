"""`CtxMagic`: ctx_magic's settings as traitlets, settable with `%config CtxMagic.x = y`.

One trait per field of `ctx_magic.settings.Settings`, built from it: the same name, type,
default and help. A value outside a setting's bounds is refused at `%config` time with one line.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from typing import Any

from traitlets import Bool, CaselessStrEnum, Float, Int, TraitError, TraitType, Unicode, validate
from traitlets.config import Configurable

from ctx_magic import settings as settings_module
from ctx_magic.settings import Settings, setting_problem

_TRAIT_TYPES: dict[type, type[TraitType]] = {bool: Bool, int: Int, float: Float, str: Unicode}


def field_help() -> dict[str, str]:
    """Each Settings field's docstring (the string literal under it in settings.py)."""
    try:
        tree = ast.parse(inspect.getsource(settings_module))
    except (OSError, TypeError):  # no source shipped: the traits go without help
        return {}
    body = next(node.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Settings")
    docs: dict[str, str] = {}
    for node, following in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)):
            docs[node.target.id] = " ".join(str(following.value.value).split())
    return docs


def _trait(spec: dataclasses.Field, help_text: str) -> TraitType:
    if "choices" in spec.metadata:
        return CaselessStrEnum(list(spec.metadata["choices"]), default_value=spec.default, help=help_text).tag(
            config=True)
    return _TRAIT_TYPES[type(spec.default)](spec.default, help=help_text).tag(config=True)


class _CtxMagicBase(Configurable):
    """ctx_magic's settings for this kernel (see `%ctx config`)."""

    @validate(*(f.name for f in dataclasses.fields(Settings)))
    def _within_bounds(self, proposal: dict[str, Any]) -> Any:
        problem = setting_problem(proposal["trait"].name, proposal["value"])
        if problem:
            raise TraitError(problem)
        return proposal["value"]

    def to_settings(self) -> Settings:
        """The current values as one frozen Settings."""
        return Settings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Settings)})

    def describe(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in sorted(self.trait_names(config=True))}


_HELP = field_help()
CtxMagic = type("CtxMagic", (_CtxMagicBase,), {
    "__doc__": _CtxMagicBase.__doc__,
    "__module__": __name__,
    **{f.name: _trait(f, _HELP.get(f.name, "")) for f in dataclasses.fields(Settings)},
})
