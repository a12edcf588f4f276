"""Jobs of several processes on localhost (``jax.distributed`` peers): a free port, the
environment they need, a runner that kills them all at a deadline or at the first failure, and
the call with which each job process joins the others."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INIT_TIMEOUT_S = 30  # how long a job process waits for its peers in jax.distributed.initialize


def join_peers(process_id: int, process_count: int, port: int | str) -> None:
    """Starts ``jax.distributed`` in a job process: process ``process_id`` of ``process_count``,
    the coordinator on localhost ``port``. Call it before any other JAX call."""
    import jax

    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        coordinator_bind_address=f"127.0.0.1:{port}",
        num_processes=process_count,
        process_id=process_id,
        initialization_timeout=INIT_TIMEOUT_S,
    )


def free_port() -> int:
    """A port that was free a moment ago: bound to port 0, read back, released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_processes(commands: list[list[str]], deadline: float) -> None:
    """Runs the commands side by side; kills them all at ``deadline`` (monotonic) or as soon as one
    fails, and then fails the test with every exit code and stderr."""
    with contextlib.ExitStack() as stack:
        # stderr goes to files, not pipes, which could fill up and block a chatty child.
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in commands]
        children = [
            subprocess.Popen(command, env=environment(), stdout=subprocess.DEVNULL, stderr=log)
            for command, log in zip(commands, logs)
        ]
        timed_out = False
        try:
            while True:
                codes = [child.poll() for child in children]
                if None not in codes or any(codes):  # all done, or one failed: the rest would hang
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                time.sleep(0.05)
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                child.wait()
        if timed_out or any(child.returncode for child in children):
            report = []
            for i, (child, log) in enumerate(zip(children, logs)):
                log.seek(0)
                report.append(
                    f"--- process {i}: exit code {child.returncode}\n{log.read()[-3000:]}"
                )
            reason = (
                "not finished by the deadline, all killed"
                if timed_out
                else "a process failed, the others were killed"
            )
            pytest.fail(f"{reason}:\n" + "\n".join(report), pytrace=False)
