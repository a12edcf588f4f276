"""The Dataset API's side of the worker engine: ``mp_prefetch`` and what it runs in the workers.

- :mod:`~grainlite.dataset.mp.prefetch`: ``IterDataset.mp_prefetch``, its dataset and iterator;
- :mod:`~grainlite.dataset.mp.pipeline`: the pipeline each worker runs
  (:class:`~grainlite.engine.pipeline.WorkerPipeline` for a dataset);
- :mod:`~grainlite.dataset.mp.slicing`: each worker's share of the elements;
- :mod:`~grainlite.dataset.mp.state`: the checkpoint, Grain's interleave-shaped dict.
"""
