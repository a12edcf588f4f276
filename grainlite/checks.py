"""The one check of int options (what counts as an int, and the two errors a bad one gets), and
the one builder of the error for a state that cannot be restored (:func:`invalid_state`).

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
) -> int:
    """``value`` as an ``int`` if it is an integer >= ``minimum``.

    Args:
      value: what the user passed.
      minimum: the smallest value allowed (0 for a non-negative option, 1 for a positive one).
      wrong_type: the message when ``value`` is not an integer (a template, see the module doc).
      too_small: the message when it is below ``minimum`` (a template).
      too_small_error: the error raised then, a :class:`GrainliteValueError` (a subclass where
        Grain raises a second builtin there too).

    Raises:
      GrainliteTypeError: ``value`` is not an integer (a TypeError, as Python raises there).
      GrainliteValueError: ``value`` is below ``minimum`` (a ValueError, as Grain raises), or
        ``too_small_error``.
    """
    if not is_int(value):
        raise GrainliteTypeError(template_filled(wrong_type, value))
    number = int(value)  # type: ignore[call-overload]
    if number < minimum:
        raise too_small_error(template_filled(too_small, number))
    return number


def template_filled(template: str, value: object) -> str:
    """``template`` with ``{value}`` (``shown(value)``) and ``{type}`` (its type's name)."""
    return template.format(value=shown(value), type=type(value).__name__)


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
