"""A worker's traceback names the user's file, line and source line, as at worker_count=0.

Transforms defined in the script the user runs (``__main__``) travel to the workers by value
(cloudpickle). The script below is run as ``__main__`` in a new process; its transforms raise at
``worker_count=2``, and the re-raised error's traceback text must show each frame of the user's
code (a transform class at module level calling a helper, a class and a function nested in
``main()``, and a class typed in a notebook cell, whose file does not exist) exactly as the same
error shows it at ``worker_count=0``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)

SCRIPT = textwrap.dedent(
    """
    import json
    import linecache
    import sys
    import traceback

    import grainlite as grain


    CELL_NAME = "/nonexistent/ipykernel_1/cell_7.py"
    CELL_SOURCE = (
        "class CellTransform(grain.MapTransform):\\n"
        "    def map(self, element):\\n"
        "        return 10 // (element - 2)\\n"
    )


    def check_record(value):
        if value == 3:
            raise ValueError(f"record {value} is bad")
        return value


    class ChecksRecords(grain.MapTransform):
        def map(self, element):
            return check_record(element) * 2


    def main(workers):
        def nested_check(value):
            if value == 4:
                raise KeyError(f"nested check refused {value}")
            return value

        class NestedTransform(grain.MapTransform):
            def map(self, element):
                return nested_check(element) + 1

        # A notebook cell: code whose "file" does not exist, its lines kept in linecache (as
        # IPython keeps every cell's).
        cell = CELL_NAME
        cell_lines = CELL_SOURCE.splitlines(keepends=True)
        linecache.cache[cell] = (len(CELL_SOURCE), None, cell_lines, cell)
        namespace = {"grain": grain}
        exec(compile(CELL_SOURCE, cell, "exec"), namespace)

        texts = {}
        for name, transform, error_type in [
            ("module level", ChecksRecords(), ValueError),
            ("nested", NestedTransform(), KeyError),
            ("notebook cell", namespace["CellTransform"](), ZeroDivisionError),
        ]:
            loader = grain.DataLoader(
                data_source=grain.RangeDataSource(0, 6, 1),
                sampler=grain.IndexSampler(
                    6, grain.NoSharding(), shuffle=False, num_epochs=1, seed=0
                ),
                operations=[transform],
                worker_count=workers,
            )
            try:
                list(loader)
            except error_type:
                texts[name] = traceback.format_exc()
        print(json.dumps(texts))


    if __name__ == "__main__":
        main(int(sys.argv[1]))
    """
)

# One frame of a traceback: its file line and the source line under it.
FRAME = re.compile(
    r'  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)\n    (?P<src>.+)'
)


def _tracebacks(script: Path, workers: int) -> dict[str, str]:
    run = subprocess.run(
        [sys.executable, str(script), str(workers)],
        capture_output=True,
        text=True,
        timeout=90,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        cwd=script.parent,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    texts: dict[str, str] = json.loads(run.stdout.splitlines()[-1])
    return texts


def _user_frames(text: str, script: Path) -> list[tuple[str, str, str]]:
    """(line, function, source) of every frame in ``script``, in order, main() left out."""
    return [
        (m["line"], m["name"], m["src"].strip())
        for m in FRAME.finditer(text)
        if m["file"] == str(script) and m["name"] != "main"
    ]


def test_a_worker_traceback_names_the_scripts_file_line_and_source_line(tmp_path):
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT)
    in_workers = _tracebacks(script, 2)
    in_process = _tracebacks(script, 0)
    lines = SCRIPT.splitlines()
    for name, expected in [
        ("module level", ["return check_record(element) * 2", 'raise ValueError(f"record']),
        ("nested", ["return nested_check(element) + 1", 'raise KeyError(f"nested check']),
    ]:
        text = in_workers[name]
        assert "<dynamic-code>" not in text, text
        frames = _user_frames(text, script)
        assert [src for _, _, src in frames] == [
            next(line.strip() for line in lines if line.strip().startswith(start))
            for start in expected
        ], text
        for number, _, src in frames:  # each line number points at that source line
            assert lines[int(number) - 1].strip() == src
        assert frames == _user_frames(in_process[name], script), (text, in_process[name])
    cell = "/nonexistent/ipykernel_1/cell_7.py"
    text = in_workers["notebook cell"]
    assert "<dynamic-code>" not in text, text
    frames = _user_frames(text, Path(cell))
    assert frames == [("3", "map", "return 10 // (element - 2)")], text
    assert frames == _user_frames(in_process["notebook cell"], Path(cell))
