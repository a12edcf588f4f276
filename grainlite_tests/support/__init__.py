"""Support modules of the test suite: shared contracts, peers, the fault suite, job scripts run as
processes, and helpers. None of them is a test module; test modules import only from here."""
