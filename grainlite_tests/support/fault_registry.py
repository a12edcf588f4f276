"""The fault suite's registry and the helpers its scenario modules share.

A scenario is a function ``run(tmp: Path) -> str`` that raises AssertionError if a promise is
broken, ``Unavailable`` if this machine cannot build the fault, and otherwise returns what
happened in a few words. Its time to error is measured by :func:`timed`. Scenario modules
(``fault_*_scenarios.py``) import from here and register with :func:`scenario`; ``fault_suite``
imports them in order. Nothing here imports a scenario module.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grainlite as grain

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "examples") not in sys.path:  # leak_check lives beside the example scripts
    sys.path.insert(0, str(REPO / "examples"))


class Unavailable(Exception):
    """This machine cannot build the fault (e.g. no permission for a private mount namespace)."""


@dataclass(frozen=True)
class Scenario:
    """One fault and the promise grainlite keeps under it."""

    group: str
    name: str
    promise: str
    run: Callable[[Path], str]
    module: str  # the scenario module that registered it (fault_suite orders the table by it)


SCENARIOS: list[Scenario] = []
_JOBS: list[subprocess.Popen[str]] = []  # processes started by the running scenario


def run_scenario(scenario: Scenario, tmp: Path) -> str:
    """Runs ``scenario``; whatever happens, no job process it started outlives it."""
    try:
        return scenario.run(tmp)
    finally:
        while _JOBS:
            job = _JOBS.pop()
            if job.poll() is None:
                job.terminate()  # SIGTERM: the job removes its own shared memory, then dies
                try:
                    job.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    job.kill()
            job.communicate()


def scenario(
    group: str, name: str, promise: str, workers: tuple[int, ...] | None = None
) -> Callable[[Callable[..., str]], Any]:
    """Registers ``run`` as a scenario of the suite.

    With ``workers``, ``run(tmp, workers)`` is one scenario per worker count, in that order, each
    named with ``{workers}`` in ``name`` replaced by the count (``"..., W={workers}"``).
    """

    def register(run: Callable[..., str]) -> Callable[..., str]:
        if workers is None:
            SCENARIOS.append(Scenario(group, name, promise, run, run.__module__))
            return run
        assert "{workers}" in name, f"{name!r} does not say where the worker count goes"
        for count in workers:
            named = name.replace("{workers}", str(count))
            bound = functools.partial(run, workers=count)
            SCENARIOS.append(Scenario(group, named, promise, bound, run.__module__))
        return run

    return register


@contextlib.contextmanager
def timed(limit_s: float) -> Iterator[list[float]]:
    """Measures the block; fails if it takes longer than ``limit_s`` (the time-to-error bound)."""
    elapsed: list[float] = []
    started = time.monotonic()
    yield elapsed
    elapsed.append(time.monotonic() - started)
    assert elapsed[0] <= limit_s, f"took {elapsed[0]:.2f} s, more than {limit_s} s"


def raised(call: Callable[[], Any], limit_s: float = 5.0) -> tuple[BaseException, float]:
    """The exception ``call`` raises and how long it took; fails if it returns or is too slow."""
    started = time.monotonic()
    try:
        call()
    except BaseException as error:  # the scenario inspects whatever came out
        seconds = time.monotonic() - started
        assert seconds <= limit_s, f"the error took {seconds:.2f} s, more than {limit_s} s"
        return error, seconds
    raise AssertionError(f"{call} raised nothing")


def sampler(n: int, num_epochs: int | None = 1) -> grain.IndexSampler:
    """The plain sequential sampler of ``n`` records."""
    return grain.IndexSampler(n, grain.NoSharding(), shuffle=False, num_epochs=num_epochs, seed=0)


def start_job(*args: str, private_shm: str | None = None) -> subprocess.Popen[str]:
    """Starts ``fault_jobs`` in a new process, with a private ``/dev/shm`` mounted if asked."""
    command = [sys.executable, "-m", "grainlite_tests.support.fault_jobs", *args]
    if private_shm is not None:
        if os.geteuid() != 0 and not _user_namespaces():
            raise Unavailable("needs root or user namespaces to mount a private /dev/shm")
        inner = " ".join(command)
        command = ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o {private_shm} tmpfs /dev/shm "
                   f"&& exec {inner}"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env, cwd=REPO)  # fmt: skip
    _JOBS.append(job)
    return job


def _user_namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


def job_outcome(job: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    out, err = job.communicate(timeout=timeout_s)
    if job.returncode != 0 and "mount" in err and "permission" in err.lower():
        raise Unavailable(f"cannot mount a private /dev/shm here: {err.strip()}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"the job printed no outcome (exit {job.returncode}): {err[-2000:]}"
    return json.loads(lines[-1])


def children_of(pid: int) -> list[int]:
    from leak_check import live_children

    return sorted(live_children(pid))


def is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def range_loader(operations: list[Any], workers: int, n: int = 8) -> grain.DataLoader:
    return grain.DataLoader(data_source=grain.RangeDataSource(0, n, 1), sampler=sampler(n),
                            operations=operations, worker_count=workers)  # fmt: skip


def damaged_states(state: dict[str, Any], rng: Any) -> Iterator[tuple[str, bytes]]:
    """Random damage to a valid state: wrong types, huge and negative numbers, junk, depth."""
    junk: list[Any] = [None, True, -1, -(2**70), 2**70, 1.5, "", "x" * 10_000, [], {}, [[[]]]]
    for _ in range(60):
        document = json.loads(json.dumps(state))
        path = []
        node: Any = document
        while isinstance(node, dict) and node and rng.random() < 0.7:
            key = rng.choice(sorted(node))
            path.append(key)
            if not isinstance(node[key], dict):
                node[key] = rng.choice(junk)
                break
            node = node[key]
        else:
            if isinstance(node, dict):
                node[rng.choice(["extra", "version", "worker_count"])] = rng.choice(junk)
        yield f"{'.'.join(path) or 'top'}", json.dumps(document).encode()
    yield "depth", b"[" * 200_000 + b"]" * 200_000
    yield "bytes", bytes(rng.getrandbits(8) for _ in range(300))
    yield "huge integer", b'{"version": ' + b"9" * 5000 + b"}"
    yield "huge", json.dumps(dict(state, sampler="y" * 20_000_000)).encode()
    yield "too large", b" " * (65 * 1024 * 1024)
