"""Cleanup removes segments of dead owners of this namespace and user, and nothing else.

The segments of another container, boot or user are built as real files in /dev/shm, with names
made by :mod:`grainlite.shm.names` for another identity, or chowned to another user.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import grainlite as grain
from grainlite import shm
from grainlite.errors import GrainliteValueError
from grainlite.shm import names

# shm_cleanup: these tests make stale segments and remove every stale segment of the machine.
pytestmark = [pytest.mark.timeout(60), pytest.mark.shm_cleanup]

SHM = Path("/dev/shm")
NOBODY = 65534
ROOT = Path(__file__).resolve().parents[1]

if not SHM.is_dir():
    pytest.skip("needs /dev/shm (Linux)", allow_module_level=True)


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def another_identity() -> str:
    return "abcdef" if names.identity() != "abcdef" else "bcdefg"


@pytest.fixture
def segment_file() -> Iterator[Callable[..., str]]:
    """Makes segment files in /dev/shm under any name; removes what is left of them at the end."""
    made: list[Path] = []

    def make(name: str, uid: int | None = None, size: int = 16) -> str:
        path = SHM / name
        path.write_bytes(b"\0" * size)
        made.append(path)
        if uid is not None:
            os.chown(path, uid, -1)
        return name

    yield make
    for path in made:
        path.unlink(missing_ok=True)


def ours_dead(tag: str = "unit") -> str:
    return shm.segment_name(tag, dead_pid())


def needs_root() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to make a file of another user in /dev/shm")


def test_a_dead_owners_segment_of_this_namespace_is_removed(segment_file):
    name = segment_file(ours_dead(), size=100)
    stale = [s for s in shm.stale_segments() if s.name == name]
    assert stale == [shm.StaleSegment(name, names.parse(name).owner_pid, 100)]
    assert stale[0] in shm.remove_stale_segments()
    assert not (SHM / name).exists()


def test_a_segment_whose_owner_runs_is_kept():
    segment = shm.Segment.create(8, "unit")
    try:
        assert segment.name not in [s.name for s in shm.remove_stale_segments()]
        assert segment.name in shm.list_segments()
    finally:
        segment.unlink()
        segment.close()


def test_a_dead_pid_in_a_segment_of_another_pid_namespace_is_never_removed(segment_file):
    # In another container a pid that does not run here names a process that may well run there.
    name = segment_file(names.format_name(another_identity(), dead_pid(), "unit"))
    assert name in shm.list_segments()
    assert name not in [s.name for s in shm.stale_segments()]
    shm.remove_stale_segments()
    shm.remove_stale_segments_automatically()
    assert (SHM / name).exists()


def test_a_live_segment_made_in_another_pid_namespace_survives_cleanup_here():
    # The case of `docker --ipc=host` and of Kubernetes pods: /dev/shm shared, pids not.
    code = (
        "import sys; from grainlite import shm\n"
        "segment = shm.Segment.create(8, 'live')\n"
        "print(segment.name, flush=True)\n"
        "sys.stdin.read()\n"
        "segment.unlink(); segment.close()\n"
    )
    inner = _start_in_new_pid_namespace(code)
    try:
        name = inner.stdout.readline().strip()
        if not name:
            pytest.skip(f"cannot make a pid namespace here: {inner.stderr.read().strip()}")
        assert shm.owner_pid(name) is None
        assert name in shm.list_segments()
        assert name not in [s.name for s in shm.remove_stale_segments()]
        shm.remove_stale_segments_automatically()
        assert (SHM / name).exists()
    finally:
        inner.communicate("", timeout=30)
    assert inner.returncode == 0, inner.stderr


def _start_in_new_pid_namespace(code: str) -> subprocess.Popen[str]:
    # The segment's owner pid inside is chosen to be one no process has out here, so that a check
    # of the pid alone would take the segment for stale.
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    free = next(p for p in range(pid_max - 1, 300, -1) if not Path(f"/proc/{p}").exists())
    shell = f'echo {free - 1} > /proc/sys/kernel/ns_last_pid 2>/dev/null; "$@"'
    command = ["sh", "-c", shell, "sh", sys.executable, "-c", code]
    try:
        return subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
    except FileNotFoundError:
        pytest.skip("needs the unshare command (util-linux)")


def test_another_users_segment_is_skipped_and_a_loader_with_workers_still_starts(segment_file):
    needs_root()
    name = segment_file(ours_dead(), uid=NOBODY)
    assert name not in [s.name for s in shm.stale_segments()]
    shm.remove_stale_segments_automatically()
    loader = grain.DataLoader(
        data_source=[1, 2, 3],
        sampler=grain.SequentialSampler(3, grain.NoSharding()),
        worker_count=1,
    )
    assert list(loader) == [1, 2, 3]
    assert (SHM / name).exists()


def _as_nobody(code: str) -> str:
    """Runs ``code`` in a process that imports grainlite as root, then becomes user nobody.

    Becoming nobody before exec fails where the interpreter lives under /root (mode 700), and
    so does any later import from there: the modules argparse imports lazily are imported first.
    """
    become = (
        "import argparse, gettext, locale, os, shutil, grainlite, grainlite.__main__\n"
        "import grainlite.shm, grainlite.tools.cleanup_command  # grainlite imports lazily\n"
        "import grainlite.tools.convert.partial  # cleanup also looks for partial folders\n"
        f"os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", become + code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_cleanup_run_by_another_user_neither_fails_nor_touches_our_segments(segment_file):
    needs_root()
    name = segment_file(ours_dead())  # root's, stale, and not removable by nobody
    code = (
        "from grainlite import shm\n"
        "shm.remove_stale_segments_automatically()\n"
        "print(len(shm.remove_stale_segments()))\n"
    )
    assert _as_nobody(code) == "0\n"
    assert (SHM / name).exists()


def test_a_stale_segment_that_cannot_be_removed_is_logged_at_debug_and_left(caplog):
    # A directory under a stale segment's name: unlinking it fails (EISDIR) on any file system.
    name = ours_dead()
    (SHM / name).mkdir()
    try:
        with caplog.at_level(logging.DEBUG, logger="grainlite"):
            shm.remove_stale_segments_automatically()
            assert name not in [s.name for s in shm.remove_stale_segments()]
        assert (SHM / name).is_dir()
        messages = [r.getMessage() for r in caplog.records if r.name == "grainlite"]
        assert any(
            m.startswith(f"grainlite: could not remove shared-memory segment {name}: ")
            for m in messages
        ), messages
    finally:
        (SHM / name).rmdir()


@pytest.mark.parametrize("value", ["0", "false", "no", "off", " OFF "])
def test_grainlite_auto_cleanup_0_leaves_stale_segments_in_place(segment_file, monkeypatch, value):
    name = segment_file(ours_dead())
    monkeypatch.setenv("GRAINLITE_AUTO_CLEANUP", value)
    shm.remove_stale_segments_automatically()
    assert (SHM / name).exists()
    monkeypatch.delenv("GRAINLITE_AUTO_CLEANUP")
    shm.remove_stale_segments_automatically()
    assert not (SHM / name).exists()


@pytest.mark.parametrize("value", ["1", "yes", ""])
def test_automatic_cleanup_runs_unless_turned_off(segment_file, monkeypatch, value):
    name = segment_file(ours_dead())
    monkeypatch.setenv("GRAINLITE_AUTO_CLEANUP", value)
    shm.remove_stale_segments_automatically()
    assert not (SHM / name).exists()


def test_remove_tagged_removes_only_this_owners_segments_with_the_tag_prefix(segment_file):
    me, other = os.getpid(), os.getpid() + 1
    removed = [segment_file(shm.segment_name(tag, me)) for tag in ("ab12", "ab1200", "ab12z9")]
    kept = [
        segment_file(shm.segment_name("ab1", me)),
        segment_file(shm.segment_name("cd12", me)),
        segment_file(shm.segment_name("ab1200", other)),
        segment_file(names.format_name(another_identity(), me, "ab1200")),
    ]
    shm.remove_tagged("ab12")
    assert [n for n in removed if (SHM / n).exists()] == []
    assert [n for n in kept if (SHM / n).exists()] == kept
    shm.remove_tagged("ab1", other)
    assert [n for n in kept if (SHM / n).exists()] == [kept[0], kept[1], kept[3]]
    shm.remove_tagged("zz")  # nothing with that tag: nothing happens


def test_remove_tagged_skips_another_users_segment_and_does_not_raise(segment_file):
    needs_root()
    name = segment_file(shm.segment_name("ab12"), uid=NOBODY)
    shm.remove_tagged("ab12")
    assert (SHM / name).exists()


def test_remove_tagged_rejects_a_prefix_that_is_not_a_tag():
    with pytest.raises(GrainliteValueError) as raised:
        shm.remove_tagged("")
    assert str(raised.value) == (
        "A shared-memory segment tag prefix must be 1 to 6 characters of a-z and 0-9 (got ''); "
        "pass a short lower-case tag such as 'src'."
    )


def test_list_segments_lists_grainlite_segments_of_every_namespace_sorted(segment_file):
    ours = segment_file(shm.segment_name("unit"))
    theirs = segment_file(names.format_name(another_identity(), 7, "unit"))
    segment_file("psm_0123abcd")
    listed = shm.list_segments()
    assert listed == sorted(listed)
    assert {ours, theirs} <= set(listed)
    assert "psm_0123abcd" not in listed


def _cleanup_command(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "grainlite", "cleanup", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_cleanup_command_removes_only_dead_owners_segments_of_this_namespace_and_user(
    segment_file,
):
    stale = segment_file(ours_dead(), size=32)
    foreign = segment_file(names.format_name(another_identity(), dead_pid(), "unit"))
    pid = names.parse(stale).owner_pid

    dry = _cleanup_command("--dry-run")
    assert f"would remove /dev/shm/{stale} (32 bytes, owner pid {pid})\n" in dry
    summary = re.fullmatch(
        r"would remove [1-9]\d* stale segment\(s\); kept \d+ in use; "
        r"skipped (\d+) not ours \(another container, boot or user\)",
        dry.splitlines()[-1],
    )
    assert summary is not None, dry
    assert int(summary.group(1)) >= 1  # the foreign one at least
    assert (SHM / stale).exists()

    done = _cleanup_command()
    assert f"removed /dev/shm/{stale} (32 bytes, owner pid {pid})\n" in done
    assert not (SHM / stale).exists()
    assert (SHM / foreign).exists()


def test_the_cleanup_command_run_by_another_user_leaves_our_segments(segment_file):
    needs_root()
    stale = segment_file(ours_dead())
    out = _as_nobody("grainlite.__main__.main(['cleanup'])")
    assert stale not in out
    assert out.startswith("removed 0 stale segment(s); ")
    assert (SHM / stale).exists()
