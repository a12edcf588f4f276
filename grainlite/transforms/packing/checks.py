"""Argument, element and state checks shared by the packers, with grainlite's error messages.

Grain 0.2.18's packers accept flat dicts of numpy arrays only; where Grain fails with a bare
``AssertionError`` (an element that is not a dict, a feature that is a list) grainlite raises a
``TypeError`` that names the feature and the fix, and a sequence longer than its target raises
``ValueError`` as Grain does.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grainlite.checks import int_option
from grainlite.errors import GrainliteTypeError, GrainliteValueError, shown
from grainlite.transforms.packing.layout import (
    PackSpec,
    column_values,
    is_scalar,
    non_sequence_meta_features,
)


def _per_feature(
    owner: str, argument: str, struct: Any, features: Sequence[str], default: Any
) -> list[Any]:
    if struct is None:
        return [default] * len(features)
    if not isinstance(struct, Mapping):
        raise GrainliteTypeError(
            f"{owner} {argument} must be a dict from feature name to value (got {struct!r}); "
            f"pass e.g. {{{features[0]!r}: ...}} for the features of length_struct."
        )
    return [struct.get(name, default) for name in features]


def _leaves(owner: str, name: str, value: Any) -> list[tuple[tuple[str, ...], Any]]:
    """``(path below name, target length)`` of each leaf of a nested ``length_struct`` entry."""
    if not isinstance(value, Mapping):
        return [((), value)]
    if not value:
        raise GrainliteTypeError(
            f"{owner} length_struct[{name!r}] is an empty dict; give each nested feature a "
            "target length, e.g. {'inner': 128}, or drop the entry."
        )
    leaves = []
    for key in sorted(value):
        for path, leaf in _leaves(owner, f"{name}][{key!r}", value[key]):
            leaves.append(((key, *path), leaf))
    return leaves


def _below(struct: Any, path: tuple[str, ...], default: Any) -> Any:
    """The entry of a nested ``pack_alignment_struct``/``padding_struct`` at ``path``."""
    for key in path:
        if not isinstance(struct, Mapping) or key not in struct:
            return default
        struct = struct[key]
    return struct


def make_spec(
    owner: str,
    length_struct: Any,
    meta_features: Sequence[str],
    alignment_struct: Any,
    padding_struct: Any,
    nested: bool = False,
) -> PackSpec:
    """The :class:`PackSpec` of a packer's arguments, checked.

    With ``nested`` (the Dataset API's first-fit and best-fit packers), an entry of
    ``length_struct`` may be a dict of target lengths: each of its leaves is packed.
    """
    if not isinstance(length_struct, Mapping) or not length_struct:
        raise GrainliteTypeError(
            f"{owner} length_struct must be a non-empty dict from feature name to target length "
            f"(got {length_struct!r}); elements must be flat dicts of arrays, e.g. "
            "length_struct={'inputs': 1024, 'targets': 1024}."
        )
    names, paths, lengths = [], [], []
    for name in length_struct:
        value = length_struct[name]
        for path, leaf in _leaves(owner, name, value) if nested else [((), value)]:
            where = "".join(f"[{key!r}]" for key in (name, *path))
            names.append(name)
            paths.append(path)
            if leaf is None:  # a ValueError, as Grain's (its tree of lengths has a hole)
                raise GrainliteValueError(
                    f"{owner} length_struct{where} is None; give each feature a target length "
                    "(an int >= 1), or leave the feature out of length_struct."
                )
            lengths.append(check_count(owner, f"length_struct{where}", leaf))
    features = tuple(names)
    alignments = _per_feature(owner, "pack_alignment_struct", alignment_struct, features, 1)
    alignments = [
        check_alignment(owner, f"pack_alignment_struct[{name!r}]", _below(value, path, 1))
        for name, path, value in zip(features, paths, alignments)
    ]
    padding = _per_feature(owner, "padding_struct", padding_struct, features, 0)
    padding = [_below(value, path, 0) for path, value in zip(paths, padding)]
    metas = [str(name) for name in meta_features]
    others = non_sequence_meta_features(length_struct, metas)
    sequence_metas = frozenset(name for name in metas if name not in others)
    unsegmented = [n for n, path in zip(names, paths) if path and n not in sequence_metas]
    return PackSpec(
        features=features,
        lengths=tuple(lengths),
        alignments=tuple(alignments),
        padding=tuple(padding),
        sequence_metas=sequence_metas,
        other_metas=tuple(others),
        paths=tuple(paths) if any(paths) else (),
        unsegmented=unsegmented[0] if unsegmented else None,
    )


def check_segmentable(spec: PackSpec) -> None:
    """A ValueError (Grain's words, and the fix) for a nested feature that is not a meta feature:
    a dict of packed arrays has no one segment ids and positions."""
    if spec.unsegmented is not None:
        name = spec.unsegmented
        raise GrainliteValueError(
            f"Failed to extract segment ids for {name!r}, which has type <class 'dict'> rather "
            "than np.ndarray. Perhaps it should be marked as a meta feature? A nested feature of "
            f"length_struct is packed without segment ids and positions: add {name!r} to "
            "meta_features, or make each of its arrays a top-level feature."
        )


def check_count(owner: str, argument: str, value: Any) -> int:
    """``value`` as a positive int (:func:`grainlite.checks.int_option`), naming ``argument``.

    What is no integer (``2.0``, ``True``, a string) is a TypeError and a value below 1 a
    ValueError: the types Grain raises for them (at its first ``next()``; here at once).
    """
    where = f"{owner} {argument}".replace("{", "{{").replace("}", "}}")
    return int_option(
        value,
        1,
        wrong_type=f"{where} must be an int (got {{type}} {{value}}); pass an int >= 1.",
        too_small=f"{where} must be a positive int (got {{value}}); pass an int >= 1.",
    )


def check_alignment(owner: str, argument: str, value: Any) -> int:
    """A ``pack_alignment_struct`` entry as a positive int.

    Grain takes ``True`` (1) and a whole float (``2.0`` is 2) here, so grainlite does too. A
    fraction, which Grain accepts but which misplaces its tokens and segment ids, is a
    ValueError; anything else is :func:`check_count`'s.
    """
    if isinstance(value, bool):
        value = int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        number = float(value)
        if not number.is_integer():
            raise GrainliteValueError(
                f"{owner} {argument} must be a whole number (got {shown(value)}): a fractional "
                "alignment misplaces the tokens of a row; pass an int >= 1."
            )
        value = int(number)
    return check_count(owner, argument, value)


def check_max_sequences(owner: str, value: Any) -> int | None:
    """``max_sequences_per_bin``: None, or the most sequences a row takes.

    Grain takes any real number above 0 (``True`` is 1; a row is full once it holds at least
    ``value`` sequences, so ``1.5`` allows 2): the same here, as ``ceil(value)``. Anything else is
    a TypeError, a number not above 0 (or not finite) a ValueError with Grain's wording.
    """
    if value is None:
        return None
    if not isinstance(value, numbers.Real):
        raise GrainliteTypeError(
            f"{owner}: `max_sequences_per_bin` must be a number (got {type(value).__name__} "
            f"{shown(value)}). Pass an int >= 1, or None for no limit on the sequences of a row."
        )
    number = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not number > 0 or number == math.inf:
        raise GrainliteValueError(
            f"{owner}: If specified, `max_sequences_per_bin` must be a positive integer, but got "
            f"{shown(value)}. Pass an int >= 1, or None for no limit on the sequences of a row."
        )
    return math.ceil(number)


def check_group_by(owner: str, feature: str | None, spec: PackSpec) -> None:
    """``shuffle_bins_group_by_feature`` must name a feature the rows keep."""
    if feature is None or feature in spec.features or feature in spec.other_metas:
        return
    raise GrainliteValueError(
        f"{owner} shuffle_bins_group_by_feature={feature!r} is not a feature of the rows (they "
        f"keep {sorted([*spec.features, *spec.other_metas])}); add it to length_struct or to "
        "meta_features."
    )


def sequence_lengths(spec: PackSpec, element: Any) -> list[int]:
    """The length of each packed feature of ``element``, checked against its target.

    A feature is an array whose first axis is the sequence, or a scalar (a number or a 0-d
    array), which is a sequence of one token, as in Grain.
    """
    try:
        sizes = [
            1 if is_scalar(value) else value.shape[0] for value in column_values(spec, element)
        ]
    except (TypeError, AttributeError, IndexError, KeyError) as error:
        raise _element_error(spec, element, error) from None
    for size, length in zip(sizes, spec.lengths):
        if size > length:
            too_long = [
                (name, int(size), int(length))
                for name, size, length in zip(spec.features, sizes, spec.lengths)
                if size > length
            ]
            raise GrainliteValueError(
                "Inputs to PackedBatch must be truncated to max length. Exceeds: (feature, "
                f"feature_length, max_length) = {too_long}. Truncate each sequence to its "
                "target length before packing (e.g. .map(lambda x: {k: v[:n] ...}))."
            )
    return sizes


def _element_error(spec: PackSpec, element: Any, error: Exception) -> Exception:
    if not isinstance(element, Mapping):
        return GrainliteTypeError(
            f"A packer's elements must be dicts of numpy arrays (got {type(element).__name__}: "
            f"{element!r:.200}); map each element to {{feature: np.ndarray}} before packing."
        )
    missing = [name for name in spec.features if name not in element]
    if missing:
        return KeyError(
            f"The element has no feature {missing[0]!r} of length_struct (its keys: "
            f"{sorted(element)}); give every element each feature of length_struct."
        )
    for name, value in zip(spec.features, column_values(spec, element)):
        if not isinstance(value, np.ndarray) and not is_scalar(value):
            return GrainliteTypeError(
                f"Feature {name!r} must be a numpy array with a sequence axis or a scalar (got "
                f"{type(value).__name__}: {value!r:.200}); convert it with np.asarray(...), or "
                "list it in meta_features and leave it out of length_struct."
            )
    return error


def check_state(owner: str, state: Any, keys: Sequence[str]) -> None:
    """A ValueError unless ``state`` is a dict with ``keys`` (a state of this packer)."""
    if not isinstance(state, Mapping) or any(key not in state for key in keys):
        raise GrainliteValueError(
            f"{owner}.set_state needs a state with keys {list(keys)} (got {state!r:.300}); pass "
            "a state returned by get_state() of the same pipeline."
        )
