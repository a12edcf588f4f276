"""Runs device tests in one interpreter that has 8 virtual CPU devices, apart from the others.

JAX reads ``XLA_FLAGS`` once, when its CPU backend starts, and the other test modules start it
with one device. So the tests of ``test_device_put.py`` run in a *lab*: one child interpreter,
started with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` by a module-scoped fixture
(:func:`lab_session`), that imports the test module and calls the test function by name. A test
is written as usual and decorated with :func:`in_lab`; in the pytest process the decorator sends
``(module, name, kwargs)`` and raises the child's failure with its traceback. One child serves
the whole module, so JAX is imported once.

Protocol (pickles with a 4-byte length, parent to child on stdin, child to parent on a duplicate
of the child's original stdout; the child's own prints go to stderr)::

    parent: (module, name, kwargs)      child: ("ok", None) or ("failed", traceback text)
    parent: None (or EOF)               child exits
"""

from __future__ import annotations

import functools
import os
import pickle
import struct
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

LAB_ENV = "GRAINLITE_DEVICE_LAB"
DEVICE_COUNT = 8
REPO = Path(__file__).resolve().parents[2]

_current: Lab | None = None


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message)
    stream.write(struct.pack("<I", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    header = stream.read(4)
    if len(header) < 4:
        raise EOFError("the device lab ended")
    (size,) = struct.unpack("<I", header)
    return pickle.loads(stream.read(size))


class Lab:
    """The child interpreter with 8 virtual CPU devices; :meth:`call` runs one test there."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env[LAB_ENV] = "1"
        env["JAX_PLATFORMS"] = "cpu"
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICE_COUNT}"
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "examples")])
        self._process = subprocess.Popen(
            [sys.executable, "-m", "grainlite_tests.support.device_lab"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )

    def call(self, module: str, name: str, kwargs: dict[str, Any]) -> None:
        """Runs ``module.name(**kwargs)`` in the lab; raises AssertionError with its traceback."""
        assert self._process.stdin is not None and self._process.stdout is not None
        _send(self._process.stdin, (module, name, kwargs))
        status, text = _receive(self._process.stdout)
        if status != "ok":
            raise AssertionError(f"in the device lab (8 CPU devices):\n{text}")

    def close(self) -> None:
        """Ends the child; kills it if it does not end within 10 s."""
        try:
            if self._process.stdin is not None:
                _send(self._process.stdin, None)
                self._process.stdin.close()
            self._process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        finally:
            if self._process.stdout is not None:
                self._process.stdout.close()


def lab_session() -> Iterator[Lab]:
    """The body of a module-scoped fixture: one lab for the module's tests, ended after them."""
    global _current
    _current = Lab()
    try:
        yield _current
    finally:
        _current.close()
        _current = None


def in_lab(test: Callable[..., None]) -> Callable[..., None]:
    """Runs ``test`` in the lab (directly when already in it). Its arguments must pickle."""

    @functools.wraps(test)
    def run(**kwargs: Any) -> None:
        if os.environ.get(LAB_ENV):
            test(**kwargs)
            return
        assert _current is not None, "the module needs a fixture that runs lab_session()"
        _current.call(test.__module__, test.__name__, kwargs)

    return run


def _import_with_rewritten_asserts(name: str) -> Any:
    """Imports test module ``name`` with pytest's assertion rewriting, as pytest would: a failed
    ``assert`` then shows the values compared."""
    import ast
    import importlib.util
    import types

    from _pytest.assertion.rewrite import rewrite_asserts

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    source = Path(spec.origin).read_bytes()
    tree = ast.parse(source, spec.origin)
    rewrite_asserts(tree, source, spec.origin)
    module = types.ModuleType(name)
    module.__file__ = spec.origin
    sys.modules[name] = module
    exec(compile(tree, spec.origin, "exec"), module.__dict__)
    return module


def serve() -> None:
    """The child's loop: run each test asked for, report its outcome."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a print of a test goes to stderr, not into the replies
    requests = sys.stdin.buffer
    while True:
        try:
            message = _receive(requests)
        except EOFError:
            return
        if message is None:
            return
        module, name, kwargs = message
        try:
            getattr(_import_with_rewritten_asserts(module), name)(**kwargs)
        except BaseException:
            _send(replies, ("failed", traceback.format_exc()))
        else:
            _send(replies, ("ok", None))


if __name__ == "__main__":
    serve()
