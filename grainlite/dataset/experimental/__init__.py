"""Grain's ``grain.experimental`` datasets: packing, streams, file sources and ElasticIterator.

One module per node family; ``grainlite.experimental`` exposes their names lazily.
"""
