"""A transform's exception reads well, in the calling process and from a worker: its type and
message, the user's frames once, grainlite's own frames left out, and one note naming the transform
by class."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import traceback

import pytest

import grainlite as grain
from grainlite.engine import remote_errors
from grainlite.engine.protocol import ErrorReport

pytestmark = pytest.mark.timeout(120)

_SCRIPT = textwrap.dedent(
    """
    import sys
    import grainlite as grain

    class Boom(grain.MapTransform):
        def map(self, x):
            if x[0] == 3:
                raise ValueError(f"record {x[0]} is bad")
            return x

    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 6, 1),
        sampler=grain.IndexSampler(6, grain.NoSharding(), num_epochs=1),
        operations=[grain.Batch(1, drop_remainder=False), Boom()],
        worker_count=int(sys.argv[1]),
    )
    with iter(loader) as iterator:
        for element in iterator:
            pass
    """
)


def _uncaught_output(workers: int) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(workers)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    return done.stderr


@pytest.mark.parametrize("workers", [0, 2])
def test_an_uncaught_transform_error_prints_its_frames_and_note_once(workers):
    output = _uncaught_output(workers)
    assert output.rstrip().splitlines()[-1].startswith("grainlite: ")
    record = "grainlite: the record being processed was sampler index 3, record key 3."
    assert output.count(record) == 1
    assert "ValueError: record 3 is bad" in output
    assert output.count(", in map") == 1  # the user's frame, once
    assert output.count("grainlite: raised by the transform operations[1] (Boom).") == 1
    assert "object at 0x" not in output
    for internal in ("stages.py", "pipeline.py", "child.py", "parent.py", "remote_errors.py"):
        assert internal not in output
    if workers:
        assert output.count("grainlite: raised in worker process 1 (pid ") == 1


class NotPicklable(Exception):
    def __reduce__(self):
        raise TypeError("no pickling for this one")


def test_an_exception_that_cannot_travel_arrives_as_a_runtime_error_with_its_text():
    try:
        raise NotPicklable("lost in transit")
    except NotPicklable as error:
        message = remote_errors.report(error, 0, 5)
    assert message.error is None and message.state == 5
    rebuilt = remote_errors.rebuild(message, 1, 1234)
    assert isinstance(rebuilt, grain.GrainliteRuntimeError)
    assert "NotPicklable: lost in transit" in str(rebuilt)
    printed = "".join(traceback.format_exception(rebuilt))
    assert "lost in transit" in printed and 'raise NotPicklable("lost in transit")' in printed


def test_a_rebuilt_exception_keeps_its_type_message_and_notes():
    try:
        raise KeyError("k")
    except KeyError as error:
        error.add_note("from the source")
        message = remote_errors.report(error, 2, 7)
    assert isinstance(message, ErrorReport) and message.type_name == "KeyError"
    rebuilt = remote_errors.rebuild(message, 0, 99)
    assert type(rebuilt) is KeyError and rebuilt.args == ("k",)
    assert rebuilt.__notes__ == [
        "from the source",
        "grainlite: raised in worker process 0 (pid 99); traceback above.",
    ]
    assert "from the source" not in str(rebuilt.__cause__)  # the note is printed once, below


def test_a_rebuilt_exception_has_the_worker_frames_and_keeps_a_chained_cause_in_the_text():
    def convert(value: str) -> int:
        try:
            return int(value)
        except ValueError as error:
            raise KeyError("no such record") from error

    try:
        convert("x")
    except KeyError as error:
        message = remote_errors.report(error, 0, 1)
    rebuilt = remote_errors.rebuild(message, 0, 42)
    assert [f.name for f in traceback.extract_tb(rebuilt.__traceback__)][-1] == "convert"
    cause = str(rebuilt.__cause__)  # pickling drops the chain: the text keeps it
    assert "invalid literal for int()" in cause and "direct cause" in cause
