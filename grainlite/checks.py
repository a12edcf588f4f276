"""The one check of int options (what counts as an int, and the two errors a bad one gets), the
one check of an integer field of a saved state (:func:`state_int`), and the one builder of the
error for a state that cannot be restored (:func:`invalid_state`).

Every option that takes a count (``worker_count``, ``num_threads``, ``num_epochs``...) is checked
by :func:`int_option`, so all of them accept the same things: a Python or numpy integer (not a
bool), returned as a Python ``int``. Each caller keeps its own messages (Grain's wording where
Grain has one, and the fix), given as templates: ``{value}`` is the value as received (quoted
at most ~200 characters, :func:`grainlite.errors.shown`; a too small integer as a plain
``int``) and ``{type}`` its type's name.

A leaf module: it imports nothing of grainlite but its errors, so every layer may use it.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TypeVar

from grainlite.errors import GrainliteError, GrainliteTypeError, GrainliteValueError, shown

_Error = TypeVar("_Error", bound=GrainliteError)


def is_int(value: object) -> bool:
    """True for a Python or numpy integer; False for a bool (``True`` is not a count; numpy's
    bool is no ``numbers.Integral``)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def int_option(
    value: object,
    minimum: int,
    wrong_type: str,
    too_small: str,
    too_small_error: type[GrainliteValueError] = GrainliteValueError,
    wrong_type_error: type[GrainliteError] = GrainliteTypeError,
) -> int:
    """``value`` as an ``int`` if it is an integer >= ``minimum``.

    Args:
      value: what the user passed.
      minimum: the smallest value allowed (0 for a non-negative option, 1 for a positive one).
      wrong_type: the message when ``value`` is not an integer (a template, see the module doc).
      too_small: the message when it is below ``minimum`` (a template).
      too_small_error: the error raised then, a :class:`GrainliteValueError` (a subclass where
        Grain raises a second builtin there too).
      wrong_type_error: the error raised for a value that is no integer: a
        :class:`GrainliteTypeError` unless the option has always raised a ValueError there.

    Raises:
      GrainliteTypeError: ``value`` is not an integer (a TypeError, as Python raises there), or
        ``wrong_type_error``.
      GrainliteValueError: ``value`` is below ``minimum`` (a ValueError, as Grain raises), or
        ``too_small_error``.
    """
    if not is_int(value):
        raise wrong_type_error(template_filled(wrong_type, value))
    number = int(value)  # type: ignore[call-overload]
    if number < minimum:
        raise too_small_error(template_filled(too_small, number))
    return number


def template_filled(template: str, value: object) -> str:
    """``template`` with ``{value}`` (``shown(value)``) and ``{type}`` (its type's name)."""
    return template.format(value=shown(value), type=type(value).__name__)


def state_int(
    value: object,
    where: str,
    error: Callable[[str], Exception],
    *,
    low: int | None = None,
    kind: str = "an int",
) -> int:
    """``value``, an integer field of a saved state, as an ``int``.

    A state field takes what an int option takes (:func:`is_int`: a Python or numpy integer, not
    a bool; Grain reads numpy integers in its states) and, with ``low``, nothing below ``low``.
    Anything else raises ``error(message)``, the caller's own state error, with the message
    ``"{where} must be {kind} >= {low}, got {value}"`` (without ``low``: no bound), the value
    quoted at most ~200 characters.
    """
    if not is_int(value) or (low is not None and int(value) < low):  # type: ignore[call-overload]
        bound = "" if low is None else f" >= {low}"
        number = int(value) if is_int(value) else value  # type: ignore[call-overload]
        raise error(f"{where} must be {kind}{bound}, got {shown(number)}")
    return int(value)  # type: ignore[call-overload]


def invalid_state(
    what: str,
    fix: str,
    *,
    subject: str | None = "Invalid iterator state",
    error: type[_Error] = GrainliteValueError,  # type: ignore[assignment]
) -> _Error:
    """The error for a checkpoint or iterator state that cannot be restored.

    The message is ``"{subject}: {what}. {fix}"`` (without a subject: ``"{what}; {fix}"``), so
    every state error says what is wrong and what to pass instead. ``what`` quotes the bad
    value through :func:`grainlite.errors.shown` (at most ~200 characters: a state may hold
    megabytes); ``error`` is the class raised (a ValueError unless the caller matches Grain's
    TypeError or IndexError there).
    """
    if subject is None:
        return error(f"{what}; {fix}")
    return error(f"{subject}: {what}. {fix}")
