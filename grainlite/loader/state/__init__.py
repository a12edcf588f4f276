"""The DataLoader's checkpoint: its JSON codec, a worker's state, the holes field, elastic restore.

``codec`` reads and writes the bytes (Grain's DataLoader v2 fields plus grainlite's own),
``worker_state`` defines what one worker's position is, ``holes_field`` the ``grainlite_holes``
field, and ``elastic`` places a state saved with another layout: its rule for one index space
shared by every layout, or the rule of ``resharding`` for a sampler that shards by itself, both
built on ``streams`` (the saved streams and what they had not delivered) and ``deal`` (the
remainder split between the new streams).
"""
