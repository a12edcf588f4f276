"""A silent worker is asked for its Python stacks with SIGUSR1 (grainlite.engine.stall), whose
default action ends a process. A worker asked while it is still starting must never die of it:
forked workers have the handler from the instant of their fork (the fork server registers it
before it forks any), and a process that does not handle the signal yet is not sent it; one that
has just ended is said to have ended, not to be starting. A timeout that comes before the warning
asks for the stacks itself."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

import grainlite as grain
from grainlite import config
from grainlite.engine.process_group import _signal_state
from grainlite.errors import WorkerTimeoutError

pytestmark = pytest.mark.timeout(120)


class HangsOnFive(grain.MapTransform):
    def map(self, element: int) -> int:
        if element == 5:
            time.sleep(3600)
        return element


def _fork_servers() -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process().children(recursive=True)
        if "grainlite.engine.forkserver" in " ".join(child.cmdline())
    ]


def test_the_fork_server_handles_the_stack_request_before_it_forks_a_worker():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 8, 1),
        sampler=grain.IndexSampler(8, grain.NoSharding(), num_epochs=1),
        worker_count=1,
    )
    with iter(loader) as iterator:
        next(iterator)
        servers = _fork_servers()
        assert servers, "no fork server: this test needs the fork-server start (Linux)"
        for server in servers:
            assert _signal_state(server.pid, signal.SIGUSR1) == "caught", server.cmdline()


def test_a_process_that_does_not_handle_the_signal_yet_is_seen_as_such():
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    handling = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import faulthandler, signal, time\n"
            "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert handling.stdout is not None and handling.stdout.readline() == "ready\n"
        assert _signal_state(handling.pid, signal.SIGUSR1) == "caught"
        assert _signal_state(plain.pid, signal.SIGUSR1) == "default"
    finally:
        for process in (plain, handling):
            process.kill()
            process.wait()
        if handling.stdout is not None:
            handling.stdout.close()
    assert _signal_state(plain.pid, signal.SIGUSR1) == "ended"  # gone: nothing is sent


def test_a_process_that_has_ended_and_is_not_yet_reaped_is_seen_as_ended():
    # It handled the signal while it ran; as a zombie its mask is empty, which must not read as
    # "still starting".
    ended = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import faulthandler, signal\nfaulthandler.register(signal.SIGUSR1)",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(ended.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child never ended"
            time.sleep(0.01)
        assert _signal_state(ended.pid, signal.SIGUSR1) == "ended"
    finally:
        ended.wait()


@pytest.mark.parametrize("attempt", range(5))
def test_stacks_asked_for_the_moment_workers_start_end_in_a_timeout_not_a_death(
    attempt, monkeypatch
):
    # A warning after 0 s asks each worker for its stacks at the parent's first wait, while the
    # workers are still being forked and starting: the worst moment for the signal.
    monkeypatch.setattr(config, "STALL_WARNING_S", 0.0)
    grain.config.update("worker_timeout_s", 2)
    try:
        loader = grain.DataLoader(
            data_source=grain.RangeDataSource(0, 16, 1),
            sampler=grain.IndexSampler(16, grain.NoSharding(), num_epochs=1),
            operations=[HangsOnFive()],
            worker_count=2,
        )
        delivered = []
        with pytest.raises(WorkerTimeoutError, match="sent nothing for"):
            for element in loader:
                delivered.append(element)
        assert delivered == list(range(5))
    finally:
        grain.config.update("worker_timeout_s", None)


def test_a_timeout_before_the_warning_asks_the_worker_for_its_stacks(capfd):
    # The default warning (60 s) never comes: the timeout itself must ask, and the worker's
    # stacks (faulthandler, to the standard error it shares with this process) name the hang.
    assert config.STALL_WARNING_S > 30
    grain.config.update("worker_timeout_s", 4)  # not 2: a slow start under load is no hang
    try:
        loader = grain.DataLoader(
            data_source=grain.RangeDataSource(0, 16, 1),
            sampler=grain.IndexSampler(16, grain.NoSharding(), num_epochs=1),
            operations=[HangsOnFive()],
            worker_count=1,
        )
        with pytest.raises(WorkerTimeoutError, match="stacks were printed to its standard error"):
            for _ in loader:
                pass
    finally:
        grain.config.update("worker_timeout_s", None)
    printed = capfd.readouterr().err
    assert "most recent call first" in printed, printed[-2000:]
    assert f'File "{__file__}", line' in printed and " in map" in printed, printed[-2000:]
