"""The packing algorithm both APIs use: pure numpy, no dataset node.

``layout`` (the packed batch's columns), ``fit`` (first fit of sequences into bins, one round at
a time) and ``checks`` (arguments, element and state checks with Grain's error types). The Dataset
API's packers (:mod:`grainlite.dataset.experimental.packing`,
:mod:`grainlite.dataset.experimental.concat_then_split`) and the DataLoader's
:class:`~grainlite.transforms.pack_and_batch.PackAndBatchOperation` run on them.
"""
