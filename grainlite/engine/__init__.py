"""The worker engine: runs a pipeline in worker processes and merges their elements in order.

Shared by every iterator that uses worker processes. See :mod:`grainlite.engine.protocol` for the
messages between the parent and its workers.
"""
