"""What the loader measures about itself: per-stage counters, the stats object, the diagnosis.

``iterator.stats()`` (DataLoader and Dataset API iterators) returns a
:class:`~grainlite.stats.report.Stats`: per stage (read, each transform by class name, batch,
transport, the consumer's wait) the time per element, its share, elements in and out, worker
buffer occupancy and time to first element, with a one-line
:attr:`~grainlite.stats.report.Stats.diagnosis`.

Modules: :mod:`~grainlite.stats.counters` (the cheap always-on counters), :mod:`.chain` (sampled
timing of the DataLoader's transform chain), :mod:`.collect` (counters of a Dataset API iterator
tree), :mod:`.report` (the object, its table and JSON), :mod:`.diagnosis` (the rules),
:mod:`.profiling` (``enable_profiling=True``: periodic logging).
"""
