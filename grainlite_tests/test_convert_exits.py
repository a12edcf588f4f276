"""A killed conversion leaves no shard writer behind and its partial folder is reclaimed; a
destination that cannot be written ends the command with one line on stderr, not a traceback."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from leak_check import alive

from grainlite.shm.names import identity
from grainlite_tests.support.convert_helpers import convert, read_back

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (the processes whose /proc stat names it as parent)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _partial(dst: Path, pid: int, ident: str | None = None) -> Path:
    folder = dst.parent / f"{dst.name}.partial-{pid}-{ident or identity()}-{secrets.token_hex(4)}"
    folder.mkdir()
    (folder / "shard").write_bytes(b"half")
    return folder


def _convert_command(*args: str, cwd: Path = ROOT, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grainlite", *args],
        capture_output=True, text=True, timeout=90, cwd=cwd, **kwargs,
    )  # fmt: skip


def test_a_conversion_killed_by_sigkill_leaves_no_writer_and_the_next_one_reclaims_its_folder(
    tmp_path,
):
    data = np.random.default_rng(0).random((4096, 1024))  # 32 MiB
    np.save(tmp_path / "big.npy", data)
    command = [
        sys.executable, "-m", "grainlite", "convert", str(tmp_path / "big.npy"),
        str(tmp_path / "out"), "--num-shards", "16", "--compression", "uncompressed",
        "--workers", "2",
    ]  # fmt: skip
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        first = process.stderr.readline()  # type: ignore[union-attr]
        assert first.startswith("shard 1/16 written"), first
        writers = _children(process.pid)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
        process.stderr.close()  # type: ignore[union-attr]
    assert process.returncode == -signal.SIGKILL
    assert len(writers) == 2, writers
    deadline = time.monotonic() + 5
    while any(map(alive, writers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [pid for pid in writers if alive(pid)]
    for pid in survivors:  # a failing run leaves nothing behind either
        os.kill(pid, signal.SIGKILL)
    assert not survivors, "a shard writer outlived the convert"
    (stale,) = [name for name in os.listdir(tmp_path) if name.startswith("out.partial-")]

    assert convert(tmp_path / "big.npy", tmp_path / "out", "--num-shards", "4") == 0
    assert sorted(os.listdir(tmp_path)) == ["big.npy", "out"], stale
    rows = read_back(tmp_path / "out")
    assert len(rows) == 4096
    (feature,) = rows[4095]
    np.testing.assert_array_equal(rows[4095][feature], data[4095])


def test_a_conversion_removes_its_destinations_dead_partial_folders_and_keeps_a_running_ones(
    tmp_path,
):
    np.save(tmp_path / "small.npy", np.arange(10))
    dead = _partial(tmp_path / "out", _dead_pid())
    running = _partial(tmp_path / "out", os.getpid())
    another_destination = _partial(tmp_path / "other", _dead_pid())
    assert convert(tmp_path / "small.npy", tmp_path / "out") == 0
    assert not dead.exists()
    assert (running / "shard").read_bytes() == b"half"
    assert another_destination.exists()  # not this destination's: left for cleanup


def test_cleanup_removes_dead_owners_partial_folders_and_keeps_live_foreign_and_old_ones(
    tmp_path,
):
    dead_pid = _dead_pid()
    dead = _partial(tmp_path / "out", dead_pid)
    live = _partial(tmp_path / "out", os.getpid())
    foreign = _partial(tmp_path / "out", _dead_pid(), ident="0abcde")  # another namespace
    old = tmp_path / f"out.partial-{_dead_pid()}-{secrets.token_hex(4)}"  # no identity: unknown
    old.mkdir()

    dry = _convert_command("cleanup", "--dry-run", str(tmp_path))
    assert dry.returncode == 0, dry.stderr
    assert (
        f"would remove {dead} (a killed conversion's output, owner pid {dead_pid})\n" in dry.stdout
    )
    assert "would remove 1 stale partial folder(s); kept 1 in use and 2 of unknown owner\n" in (
        dry.stdout
    )
    assert dead.exists()

    done = _convert_command("cleanup", cwd=tmp_path)  # no PATH: the current folder
    assert done.returncode == 0, done.stderr
    assert f"removed {dead} (a killed conversion's output, owner pid {dead_pid})\n" in done.stdout
    assert f"kept {old} (owner not provably dead" in done.stdout
    assert done.stdout.splitlines()[-1].startswith("removed ")  # the segments' summary, last
    assert not dead.exists()
    assert live.exists() and foreign.exists() and old.exists()


def test_cleanup_given_a_destination_looks_at_its_partial_folders_beside_it(tmp_path):
    (tmp_path / "data").mkdir()
    dead = _partial(tmp_path / "data" / "out", _dead_pid())
    done = _convert_command("cleanup", str(tmp_path / "data" / "out"))
    assert done.returncode == 0, done.stderr
    assert not dead.exists()


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("convert: error: "), result.stderr
    return lines[0]


def test_a_destination_below_a_file_is_a_one_line_error(tmp_path):
    np.save(tmp_path / "small.npy", np.arange(10))
    (tmp_path / "file").write_text("not a folder")
    result = _convert_command(
        "convert", "--quiet", str(tmp_path / "small.npy"), str(tmp_path / "file" / "out")
    )
    line = _one_line_error(result)
    assert str(tmp_path / "file") in line
    assert line.endswith("; check that the destination is a writable folder with room on its disk")
    assert sorted(os.listdir(tmp_path)) == ["file", "small.npy"]


def test_a_read_only_destination_folder_is_a_one_line_error(tmp_path):
    # Root writes into a mode 555 folder anyway: as root, the command runs as user nobody (after
    # importing what it needs: the interpreter may live where nobody cannot read, under /root).
    become = (
        "import argparse, errno, gettext, locale, os, sys, grainlite.__main__\n"
        "import grainlite.tools.convert.converter, grainlite.tools.convert.numpy_arrays\n"
        "import grainlite.tools.convert.progress, grainlite.tools.convert.shards\n"
        f"if os.getuid() == 0: os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})\n"
        "sys.exit(grainlite.__main__.main(sys.argv[1:]))\n"
    )
    base = Path(tempfile.mkdtemp(prefix="grainlite-ro-"))  # tmp_path's parents are mode 700
    try:
        base.chmod(0o755)
        np.save(base / "small.npy", np.arange(10))
        (base / "small.npy").chmod(0o644)
        (base / "locked").mkdir()
        (base / "locked").chmod(0o555)
        result = subprocess.run(
            [sys.executable, "-c", become, "convert", "--quiet", str(base / "small.npy"),
             str(base / "locked" / "out")],
            capture_output=True, text=True, timeout=90, cwd=ROOT,
        )  # fmt: skip
        line = _one_line_error(result)
        assert "Permission denied" in line and str(base / "locked") in line, line
        assert os.listdir(base / "locked") == []
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_full_disk_while_writing_shards_is_a_one_line_error_and_removes_the_partial_folder(
    tmp_path, workers
):
    # A file size limit fails the writes as a full disk does (EFBIG instead of ENOSPC), no mount.
    np.save(tmp_path / "big.npy", np.random.default_rng(0).random((2000, 100)))
    limit = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))\n"
        "from grainlite.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", limit, "convert", "--quiet", str(tmp_path / "big.npy"),
         str(tmp_path / "out"), "--num-shards", "2", "--compression", "uncompressed",
         "--workers", workers],
        capture_output=True, text=True, timeout=90, cwd=ROOT,
    )  # fmt: skip
    line = _one_line_error(result)
    assert "Could not write the shard" in line and "File too large" in line, line
    assert line.endswith("Make room on the destination's disk (or write elsewhere) and run the "
                         "conversion again.")  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["big.npy"]
