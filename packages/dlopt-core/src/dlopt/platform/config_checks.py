"""attrs validators shared by the public config classes: strict types, named in errors.

Every message names the class and field, the value given and what to give instead:
``ExecutionTarget.threads must be an integer >= 1 or None, got 0``. Bools are refused
where a number is expected (``True`` is an ``int`` to Python, never a count or a weight
to dlopt), and numbers must be finite. The error class is chosen per use
(:class:`~dlopt.errors.ConfigurationError` for policies, ``WorkloadError`` for workloads).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from dlopt.errors import ConfigurationError

Validator = Callable[[Any, Any, Any], None]


def field_name(instance: object, attribute: Any) -> str:
    """``"Class.field"`` for messages."""
    return f"{type(instance).__name__}.{attribute.name}"


def is_int(value: object) -> bool:
    """A real integer: ``int`` but not ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite real number that is not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _bounds(
    minimum: float | None, maximum: float | None, low_open: bool, high_open: bool
) -> tuple[str, Callable[[float], bool]]:
    words: list[str] = []
    if minimum is not None:
        words.append(f"{'>' if low_open else '>='} {minimum:g}")
    if maximum is not None:
        words.append(f"{'<' if high_open else '<='} {maximum:g}")

    def inside(value: float) -> bool:
        if minimum is not None and (value <= minimum if low_open else value < minimum):
            return False
        return not (maximum is not None and (value >= maximum if high_open else value > maximum))

    return (" " + " and ".join(words)) if words else "", inside


def _checked(
    accepts: Callable[[Any], bool], what: str, optional: bool, error: type[Exception]
) -> Validator:
    what += " or None" if optional else ""

    def check(instance: object, attribute: Any, value: object) -> None:
        if value is None and optional:
            return
        if not accepts(value):
            raise error(f"{field_name(instance, attribute)} must be {what}, got {value!r}")

    return check


def integer(
    *,
    minimum: int | None = None,
    optional: bool = False,
    hint: str = "",
    error: type[Exception] = ConfigurationError,
) -> Validator:
    """An ``int`` (not a bool), at least ``minimum``; ``None`` too when ``optional``."""
    bound, inside = _bounds(minimum, None, False, False)
    return _checked(lambda v: is_int(v) and inside(v), f"an integer{bound}{hint}", optional, error)


def number(
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
    hint: str = "",
    error: type[Exception] = ConfigurationError,
) -> Validator:
    """A finite ``int``/``float`` (not a bool) within the bounds; ``None`` when ``optional``."""
    bound, inside = _bounds(minimum, maximum, low_open, high_open)
    return _checked(
        lambda v: is_number(v) and inside(v), f"a finite number{bound}{hint}", optional, error
    )


def boolean(*, error: type[Exception] = ConfigurationError) -> Validator:
    """``True`` or ``False`` exactly (not 0/1, not a string)."""

    def check(instance: object, attribute: Any, value: object) -> None:
        if not isinstance(value, bool):
            raise error(f"{field_name(instance, attribute)} must be True or False, got {value!r}")

    return check


def text(*, optional: bool = False, error: type[Exception] = ConfigurationError) -> Validator:
    """A non-empty ``str``; ``None`` too when ``optional``."""

    def check(instance: object, attribute: Any, value: object) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str) or not value:
            what = "a non-empty string" + (" or None" if optional else "")
            raise error(f"{field_name(instance, attribute)} must be {what}, got {value!r}")

    return check


def one_of(choices: Iterable[str], *, error: type[Exception] = ConfigurationError) -> Validator:
    """One of the given strings: an attrs validator whose error names the class, the
    field, the choices and the value given (``dlopt.plugin.one_of`` for plan options)."""
    allowed = tuple(choices)

    def check(instance: object, attribute: Any, value: object) -> None:
        if not (isinstance(value, str) and value in allowed):
            raise error(
                f"{field_name(instance, attribute)} must be one of "
                f"{', '.join(map(repr, allowed))}; got {value!r}"
            )

    return check


def instance_of(
    cls: type | Callable[[], type],
    *,
    what: str | None = None,
    error: type[Exception] = ConfigurationError,
) -> Validator:
    """An instance of ``cls`` (or of the class ``cls()`` returns, for lazy imports)."""

    def check(instance: object, attribute: Any, value: object) -> None:
        expected = cls if isinstance(cls, type) else cls()
        if not isinstance(value, expected):
            name = what or f"a {expected.__name__}"
            raise error(
                f"{field_name(instance, attribute)} must be {name}, got "
                f"{type(value).__name__} {value!r}"
            )

    return check
