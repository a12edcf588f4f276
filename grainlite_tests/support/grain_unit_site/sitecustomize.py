"""Puts the Grain unit-test adapter's import mapping in every Python process the tests start.

The adapter (:mod:`grainlite_tests.support.grain_unit_adapter`) answers ``grain.*`` imports with
grainlite's public names, but only in the process that installed it. A worker process is a fresh
interpreter: when it unpickles a class of a Grain test module (pickled by reference, as
``grain._src...._test.Name``), it imports that module, and without the mapping the module's
``from grain._src.python.dataset import dataset`` would load the *real* Grain, so the worker would
run Grain's classes where the parent runs grainlite's. Python imports ``sitecustomize`` at start-up
from its path; the adapter puts this directory on the path of the processes it starts
(``PYTHONPATH``) and sets ``GRAINLITE_GRAIN_UNIT_ADAPTER=1``, so they install the same mapping
before they run anything. Without that variable this module does nothing.
"""

import os

if os.environ.get("GRAINLITE_GRAIN_UNIT_ADAPTER") == "1":
    from grainlite_tests.support import grain_unit_adapter

    grain_unit_adapter.install()
