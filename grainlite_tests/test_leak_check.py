"""live_children: the leak check of the tests and the demo sees exactly the live children."""

from __future__ import annotations

import subprocess
import sys

from leak_check import live_children


def test_a_running_child_is_listed_and_a_reaped_one_is_not():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in live_children()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in live_children()
