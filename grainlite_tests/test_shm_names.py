"""Segment names: owner's pid namespace and pid, within macOS's length limit, tags validated."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grainlite import shm
from grainlite.errors import GrainliteValueError
from grainlite.shm import names

pytestmark = pytest.mark.timeout(60)

LARGEST_PID = 4_194_304


def another_identity() -> str:
    """A namespace identity that is not ours."""
    return "abcdef" if names.identity() != "abcdef" else "bcdefg"


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout.strip()


@pytest.mark.parametrize("tag", ["a", "src", "abcdef", "999999"])
@pytest.mark.parametrize("pid", [1, 48213, LARGEST_PID], ids=["pid1", "pid48213", "largest_pid"])
def test_every_name_fits_the_31_character_posix_limit_of_macos(pid, tag):
    name = shm.segment_name(tag, pid)
    assert len("/" + name) <= 31
    assert len(names.format_name("0abcde", pid, tag)) <= 30  # the identity without /proc


def test_a_name_records_our_namespace_the_owner_pid_and_the_tag():
    name = shm.segment_name("src", 48213)
    parts = names.parse(name)
    assert parts is not None
    assert (parts.identity, parts.owner_pid, parts.tag) == (names.identity(), 48213, "src")
    assert shm.owner_pid(name) == 48213
    assert shm.owner_pid(shm.segment_name("src")) == os.getpid()


def test_two_names_for_the_same_owner_and_tag_differ():
    assert len({shm.segment_name("src") for _ in range(100)}) == 100


def test_a_name_of_another_pid_namespace_has_no_owner_here():
    name = names.format_name(another_identity(), os.getpid(), "src")
    assert names.parse(name) is not None  # a grainlite name...
    assert shm.owner_pid(name) is None  # ...but its pid is not one of ours


@pytest.mark.parametrize(
    "name",
    [
        "psm_1234",
        "wnsm_1234",
        "grainlite_1234_source_0123456789abcdef",  # the format of grainlite before namespaces
        "gl_abcdef_1234_src",
        "gl_abcdef_0_src_abcde",
        "gl_abcdef_12345678_src_abcde",
        "gl_ABCDEF_1234_src_abcde",
        "gl_abcdef_1234_src_abcde.tmp",
    ],
)
def test_other_names_are_not_grainlite_segments(name):
    assert names.parse(name) is None
    assert shm.owner_pid(name) is None


@pytest.mark.parametrize("tag", ["", "abcdefg", "Src", "s_1", "sr-c", "sré", 5, None], ids=repr)
def test_a_tag_that_is_not_1_to_6_lowercase_letters_or_digits_is_rejected(tag):
    with pytest.raises(GrainliteValueError) as raised:
        shm.segment_name(tag)
    assert str(raised.value) == (
        f"A shared-memory segment tag must be 1 to 6 characters of a-z and 0-9 (got {tag!r}); "
        f"pass a short lower-case tag such as 'src'."
    )


@pytest.mark.parametrize("pid", [0, -1, LARGEST_PID + 1, True, "12"], ids=repr)
def test_an_owner_pid_that_is_not_a_process_id_is_rejected(pid):
    with pytest.raises(GrainliteValueError) as raised:
        shm.segment_name("src", pid)
    assert str(raised.value) == (
        f"A shared-memory segment owner_pid must be a process id from 1 to {LARGEST_PID} "
        f"(got {pid!r}); pass os.getpid() of the owning process, or None for this process."
    )


def test_processes_of_one_namespace_share_the_identity():
    child = _run("from grainlite.shm import names; print(names.identity())")
    assert child == names.identity()
    assert len(child) == 6 and "0" not in child and "1" not in child


def test_a_process_in_another_pid_namespace_has_another_identity():
    code = "from grainlite.shm import names; print(names.identity())"
    try:
        inside = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError:
        pytest.skip("needs the unshare command (util-linux)")
    if inside.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {inside.stderr.strip()}")
    assert inside.stdout.strip() != names.identity()


# A process that cannot read /proc: the boot id is looked for where there is none, and the
# identity is made again, as importing grainlite.shm does.
WITHOUT_PROC = (
    "from grainlite.shm import names\n"
    "names._BOOT_ID_PATH = '/nonexistent/boot_id'\n"
    "names.identity.cache_clear()\n"
    "names.identity()\n"
)


def test_without_proc_the_identity_is_random_never_a_hash_and_inherited_by_children():
    child = WITHOUT_PROC + "print(names.identity())"
    code = WITHOUT_PROC + (
        "import subprocess, sys\n"
        f"run = [sys.executable, '-c', {child!r}]\n"
        "child = subprocess.run(run, capture_output=True, text=True, check=True).stdout\n"
        "print(names.identity(), child)\n"
    )
    first, first_child = _run(code).split()
    second, _ = _run(code).split()
    assert first.startswith("0") and len(first) == 6  # "0" never appears in a hash identity
    assert first_child == first  # worker processes recognise their parent's segments
    assert second != first  # an unrelated process tree never matches
    assert first != names.identity()


def test_without_proc_mounted_grainlite_still_names_segments_and_runs_workers():
    code = (
        "import os, grainlite as grain\n"
        "from grainlite import shm\n"
        "inherited = os.environ.get('_GRAINLITE_SHM_IDENTITY')  # set by importing shm alone\n"
        "from grainlite.shm import names\n"
        "print(names.identity(), inherited)\n"
        "source = grain.InMemoryDataSource([1, 2, 3])\n"
        "sampler = grain.SequentialSampler(3, grain.NoSharding())\n"
        "loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=1)\n"
        "print(list(loader), shm.owner_pid(source.name) == os.getpid())\n"
        "source.close()\n"
        "print([n for n in shm.list_segments() if shm.owner_pid(n) is not None])\n"
    )
    shell = 'umount -l /proc && exec "$@"'
    command = ["unshare", "--mount", "sh", "-c", shell, "sh", sys.executable, "-c", code]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("needs the unshare command (util-linux)")
    if "umount" in result.stderr or "unshare:" in result.stderr:
        pytest.skip(f"cannot unmount /proc here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    identities, loaded, leftovers = result.stdout.splitlines()
    identity, inherited = identities.split()
    assert identity == inherited and identity.startswith("0")  # in the workers' environment too
    assert (loaded, leftovers) == ("[1, 2, 3] True", "[]")
