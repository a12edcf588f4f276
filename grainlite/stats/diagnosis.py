"""The one-line diagnosis of :class:`~grainlite.stats.report.Stats`: the bottleneck and the fix.

The rules, in order (each has a test that builds the situation for real):

1. Nothing delivered yet: nothing to say.
2. After the first element (start-up is left out), the consumer waited for less than
   :data:`CONSUMER_BOUND_WAIT` of the time: the training loop, not the loader, is the slow side;
   loader settings cannot help.
3. Otherwise the loader is the slow side, and its biggest stage is named:
   a transform or batch (by class name): run it in (more) worker processes, up to the CPUs this
   process may use (:func:`~grainlite.cpus.usable_cpu_count`), or make it cheaper when every
   CPU has a worker; a read: reader threads (``ReadOptions``) if a record takes more than
   :data:`~grainlite.options.READ_POLICY`'s 20 µs to read, and workers; the transport: put the
   Batch in the workers and keep elements numpy arrays; a Dataset API node that runs in the
   consumer's process above ``mp_prefetch``: move it below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainlite.options import READ_POLICY
from grainlite.stats.counters import REPORT_EVERY_S

if TYPE_CHECKING:
    from grainlite.stats.report import StageStats, Stats

CONSUMER_BOUND_WAIT = 0.10
"""Below this share of wall time spent waiting for data, the consumer is the slow side."""


def _more_workers(stats: Stats) -> str:
    """The worker-count advice: how many processes the CPUs allow (DataLoader's worker_count,
    or the Dataset API's mp_prefetch num_workers)."""
    cpus = stats.usable_cpus
    workers = stats.worker_count
    option = "worker_count" if stats.api == "loader" else "num_workers"
    if workers == 0:
        if cpus <= 1:
            return "only 1 CPU is available to this process, so make it cheaper"
        if stats.api == "loader":
            return f"set worker_count={cpus} to run it in parallel ({cpus} CPUs available)"
        return (
            f"run it in {cpus} processes with .mp_prefetch(grain.MultiprocessingOptions("
            f"num_workers={cpus})) ({cpus} CPUs available)"
        )
    if workers < cpus:
        return f"raise {option} ({workers} → {cpus} CPUs available)"
    return (
        f"every one of the {cpus} available CPUs already has a worker ({option}={workers}), "
        "so make it cheaper or give the job more CPUs"
    )


def _of_what(stage: StageStats) -> str:
    return "worker time" if stage.where == "workers" else "the wall time"


def diagnose(stats: Stats) -> str:
    """The diagnosis line for ``stats``."""
    if stats.elements_delivered == 0 or stats.wall_seconds <= 0:
        return "no element delivered yet: call stats() after iterating for a while."
    if stats.elements_delivered == 1:
        return (
            f"only the first element so far (it took {stats.time_to_first_element or 0:.2f} s, "
            "start-up included): call stats() after iterating for a while."
        )
    if stats.wait_share < CONSUMER_BOUND_WAIT:
        return (
            f"the training loop, not the loader, is the slow side: {stats.wait_share:.1%} of the "
            f"time is spent waiting for data, so loader settings (worker_count, "
            f"worker_buffer_size, read threads) will not make it faster."
        )
    if stats.worker_count and stats.buffer is None:
        return (
            f"the consumer waits {stats.wait_share:.0%} of the time, but the workers have not "
            f"reported their counters yet (they do with their first element, then every "
            f"{REPORT_EVERY_S} s): iterate for longer."
        )
    work = [stage for stage in stats.stages if stage.kind != "wait"]
    if not work or max(stage.seconds for stage in work) <= 0:
        return (
            f"the loader is the slow side ({stats.wait_share:.1%} of the time is spent waiting "
            f"for data), but no stage has been timed yet: iterate for longer."
        )
    worst = max(work, key=lambda stage: stage.seconds)
    share = f"{worst.share:.0%} of {_of_what(worst)}"
    waiting = f"the consumer waits {stats.wait_share:.0%} of the time"
    if worst.where == "in-process" and stats.worker_count:
        return (
            f"`{worst.name}` runs in the consumer's process after mp_prefetch and takes {share}; "
            f"{waiting}: move it before mp_prefetch so the workers run it."
        )
    if worst.kind in ("transform", "batch"):
        what = "Transform" if worst.kind == "transform" else "Batching"
        return f"{what} `{worst.name}` takes {share} ({waiting}); {_more_workers(stats)}."
    if worst.kind == "read":
        per_record = worst.seconds_per_element
        if per_record < READ_POLICY.slow_read_s:  # reader threads would not start
            return (
                f"`{worst.name}` takes {share} ({waiting}) although each record reads fast "
                f"({per_record * 1e6:.1f} µs): the rest of the pipeline is cheaper still; "
                f"{_more_workers(stats)}."
            )
        return (
            f"`{worst.name}` takes {share} ({waiting}); read with more threads "
            f"(read_options=grain.ReadOptions(num_threads=16, prefetch_buffer_size=500)), or "
            f"{_more_workers(stats)}."
        )
    return (
        f"moving elements between processes (`{worst.name}`, {worst.where}) takes {share} "
        f"({waiting}); put the Batch in the workers (last in operations) so fewer, larger "
        f"elements travel, and keep them numpy arrays."
    )
