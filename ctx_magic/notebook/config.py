"""`CtxMagic`: ctx_magic's settings as traitlets traits, settable with `%config CtxMagic.x = y`
and listed with their help by `%config CtxMagic`. Each trait is made from its field of `Settings`
(ctx_magic/settings.py), where the setting's default, help and bounds are declared.

A value outside a trait's bounds is refused by traitlets itself with one line; a change makes a
new `current`, the frozen `Settings` every part reads.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from traitlets import Bool, CaselessStrEnum, Float, Instance, Int, TraitError, TraitType, Unicode, validate
from traitlets.config import Configurable
from traitlets.utils.descriptions import class_of

from ctx_magic.memory.store import check_team_name
from ctx_magic.prices import Prices
from ctx_magic.settings import Settings


class FiniteFloat(Float):  # type: ignore[misc]
    """A Float that is a number: nan passes every bound (it compares false with all of them) and
    inf is no setting anyone means, so both are refused in the same one line as a value out of bounds."""

    def validate(self, obj: Any, value: Any) -> Any:
        value = super().validate(obj, value)
        if not math.isfinite(value):
            raise TraitError(f"The value of the '{self.name}' trait of {class_of(obj)} instance should be a finite "
                             f"number, but a value of {value!r} was specified")
        return value


class _ZeroMeans:
    """A number whose 0 asks for the automatic value; any other value is held to the bounds."""

    def __init__(self, default_value: Any, *, zero_means: str, **kwargs: Any) -> None:
        super().__init__(default_value, **kwargs)  # type: ignore[call-arg]
        self.zero_means = zero_means

    def validate(self, obj: Any, value: Any) -> Any:
        try:
            return super().validate(obj, value)  # type: ignore[misc]
        except TraitError as error:
            if value == 0 and not isinstance(value, bool):
                return type(self.default_value)(0)  # type: ignore[attr-defined]
            raise TraitError(f"{error} (or 0: {self.zero_means})") from None


class ZeroOrInt(_ZeroMeans, Int):  # type: ignore[misc]
    """An Int that is 0 (the automatic value) or within `min` and `max`."""


class ZeroOrFloat(_ZeroMeans, FiniteFloat):  # type: ignore[misc]
    """A Float that is 0 (the automatic value) or within `min` and `max`."""


def _trait(spec: dataclasses.Field[Any]) -> TraitType[Any, Any]:
    """The trait of one field of `Settings`: its type from the default, its help and bounds from the field."""
    default, about = spec.default, spec.metadata
    bounds = {key: about[key] for key in ("min", "max") if about[key] is not None}
    given: dict[str, Any] = {"help": about["help"], **bounds}
    if about["choices"]:
        trait: TraitType[Any, Any] = CaselessStrEnum(list(about["choices"]), default_value=default, help=about["help"])
    elif isinstance(default, bool):
        trait = Bool(default, help=about["help"])
    elif isinstance(default, str):
        trait = Unicode(default, help=about["help"])
    elif about["zero_means"]:
        trait = (ZeroOrInt if isinstance(default, int) else ZeroOrFloat)(default, zero_means=about["zero_means"],
                                                                          **given)
    else:
        trait = (Int if isinstance(default, int) else FiniteFloat)(default, **given)
    return trait.tag(config=True)


class CtxMagic(Configurable):
    """ctx_magic's settings for this kernel (`%config CtxMagic` lists them with their help): a
    trait for each field of `Settings`, and `current`, the `Settings` of their values."""

    locals().update({spec.name: _trait(spec) for spec in dataclasses.fields(Settings)})  # one trait per field

    current = Instance(Settings, help="The settings in force: a new value whenever a setting changes.")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.current = self._made()
        self.observe(self._changed, names=[spec.name for spec in dataclasses.fields(Settings)])

    def _made(self) -> Settings:
        return Settings(**{spec.name: getattr(self, spec.name) for spec in dataclasses.fields(Settings)})

    def _changed(self, change: dict[str, Any]) -> None:
        self.current = self._made()

    @validate("team")
    def _team_name(self, proposal: dict[str, Any]) -> str:
        name = proposal["value"].strip()
        if name:
            try:
                check_team_name(name)
            except ValueError as error:
                raise TraitError(f"team: {error}") from None
        return name

    @validate("prices")
    def _prices_parse(self, proposal: dict[str, Any]) -> str:
        try:
            Prices.parse(proposal["value"])
        except ValueError as error:
            raise TraitError(f"prices: {error}") from None
        return proposal["value"]

    def describe(self) -> dict[str, object]:
        return dict(sorted(dataclasses.asdict(self.current).items()))
