"""``grain.config``: Grain's option names and defaults, the options honoured, errors for others."""

from __future__ import annotations

import os
import traceback

import pytest

import grainlite as grain
from grainlite import config
from grainlite.errors import GrainliteTypeError, GrainliteValueError

real_grain = pytest.importorskip("grain")
absl_flags = pytest.importorskip("absl.flags")

pytestmark = pytest.mark.timeout(120)

GRAINLITE_DIR = os.path.dirname(os.path.abspath(grain.__file__)) + os.sep


@pytest.fixture(autouse=True)
def fresh_config(monkeypatch):
    """Each test starts from Grain's defaults; the environment and stored values are put back."""
    monkeypatch.delenv(config.TRACEBACK_FILTERING_ENV, raising=False)
    monkeypatch.setattr(config, "_stored", {})


def grain_option_names() -> set[str]:
    """Grain 0.2.18's options: those of its absl flags ``grain_<option>`` that its config takes."""
    names = set()
    for flag in absl_flags.FLAGS:
        if flag.startswith("grain_"):
            try:
                real_grain.config.get_or_default(flag.removeprefix("grain_"))
            except ValueError:  # a flag of another module (ArrayRecord threads, profiling)
                continue
            names.add(flag.removeprefix("grain_"))
    return names


def test_the_options_are_grains_with_grains_defaults():
    names = grain_option_names()
    assert len(names) >= 10
    ours = set(config._DEFAULTS)
    assert ours == names, (names - ours, ours - names)
    for name in sorted(names):
        assert config.get_or_default(name) == real_grain.config.get_or_default(name), name


def test_config_is_the_same_module_in_every_spelling():
    import grainlite.python

    assert grain.config is grainlite.python.config is config
    assert grain.config.update is config.update


def test_an_unknown_option_is_a_value_error_as_in_grain():
    for call in (lambda c: c.update("traceback_filtering", "off"),
                 lambda c: c.get_or_default("traceback_filtering")):  # fmt: skip
        with pytest.raises(ValueError, match="traceback_filtering"):
            call(real_grain.config)
        with pytest.raises(GrainliteValueError) as caught:
            call(config)
        assert str(caught.value) == (
            "grain.config has no option 'traceback_filtering': Grain 0.2.18's options are "
            + ", ".join(config._DEFAULTS)
            + "; check the spelling (without the 'grain_' prefix of the flag)."
        )


def test_options_read_as_attributes_as_in_grain():
    assert grain.config.py_traceback_filtering == real_grain.config.get_or_default(
        "py_traceback_filtering"
    )
    assert grain.config.py_debug_mode is False
    with pytest.raises(AttributeError):
        grain.config.no_such_option  # noqa: B018


def test_traceback_filtering_takes_grains_values_and_the_environment_variable(monkeypatch):
    for value in ("off", "tracebackhide", "quiet_remove_frames", "remove_frames", "auto"):
        config.update("py_traceback_filtering", value)
        assert config.get_or_default("py_traceback_filtering") == value
        assert os.environ[config.TRACEBACK_FILTERING_ENV] == value  # what workers inherit
    monkeypatch.setenv(config.TRACEBACK_FILTERING_ENV, "0")
    assert config.get_or_default("py_traceback_filtering") == "off"
    monkeypatch.setenv(config.TRACEBACK_FILTERING_ENV, "1")
    assert config.get_or_default("py_traceback_filtering") == "auto"


def test_a_traceback_filtering_value_grain_does_not_know_is_refused():
    with pytest.raises(GrainliteValueError) as caught:
        config.update("py_traceback_filtering", "none")
    assert str(caught.value) == (
        "grain.config option py_traceback_filtering must be one of auto, off, tracebackhide, "
        "quiet_remove_frames, remove_frames (got 'none'); pass 'off' to keep every frame."
    )
    assert config.get_or_default("py_traceback_filtering") == "auto"


class FailOnThree(grain.MapTransform):
    def map(self, x):
        if int(x) == 3:
            raise KeyError(f"record {int(x)}")
        return x


def _frames_of_failure(workers: int) -> list[str]:
    """The file names of every frame the error of record 3 shows, its worker's included."""
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 6, 1),
        sampler=grain.IndexSampler(6, grain.NoSharding(), num_epochs=1),
        operations=[FailOnThree()],
        worker_count=workers,
    )
    with iter(loader) as iterator, pytest.raises(KeyError) as caught:
        for _ in range(6):
            next(iterator)
    text = "".join(traceback.format_exception(caught.value))
    return [line.split('"')[1] for line in text.splitlines() if line.strip().startswith("File ")]


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "two-workers"])
def test_traceback_filtering_off_keeps_grainlites_frames_in_this_process_and_workers(workers):
    filtered = _frames_of_failure(workers)
    assert filtered.count(__file__) == 2  # the transform's frame and this test's stay
    # Only the frame of next() that raises it to you is left of grainlite's own.
    assert len([name for name in filtered if name.startswith(GRAINLITE_DIR)]) == 1
    config.update("py_traceback_filtering", "off")
    kept = _frames_of_failure(workers)
    assert kept.count(__file__) == 2
    assert len([name for name in kept if name.startswith(GRAINLITE_DIR)]) >= 2


def test_debug_mode_is_a_stored_bool_that_changes_nothing():
    config.update("py_debug_mode", True)
    assert config.get_or_default("py_debug_mode") is True
    with pytest.raises(GrainliteTypeError) as caught:
        config.update("py_debug_mode", "yes")
    assert str(caught.value) == (
        "grain.config option py_debug_mode must be a bool (got 'yes' of type str); "
        "pass True or False."
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("py_relay_sigterm_to_main", True),
        ("tf_interleaved_shuffle", True),
        ("py_dataset_visualization_output_dir", "/tmp/graphs"),
        ("tf_prefetch_buffer_size", 4),
    ],
)
def test_an_option_grainlite_does_not_implement_takes_only_grains_default(name, value):
    default = real_grain.config.get_or_default(name)
    config.update(name, default)  # what grainlite does anyway: accepted
    assert config.get_or_default(name) == default
    with pytest.raises(GrainliteValueError) as caught:
        config.update(name, value)
    assert str(caught.value) == (
        f"grain.config option {name} is not implemented by grainlite (got {value!r}); it "
        f"accepts only Grain's default, {default!r}, which changes nothing here; remove the call."
    )
    assert config.get_or_default(name) == default
