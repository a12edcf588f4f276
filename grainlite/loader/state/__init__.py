"""The DataLoader's checkpoint: its JSON codec, a worker's state, the holes field, elastic restore.

``layout`` is what a state must agree with (this loader's process layout and identity strings),
``encoding`` writes the bytes (Grain's DataLoader v2 fields plus grainlite's own),
``saved_state`` reads them once and safely, and ``decoding`` checks their fields against a layout;
``worker_state`` defines what one worker's position is, ``holes_field`` the ``grainlite_holes``
field, and ``elastic`` places a state saved with another layout: its rule for one index space
shared by every layout, or the rule of ``resharding`` for a sampler that shards by itself, both
built on ``streams`` (the saved streams and what they had not delivered) and ``deal`` (the
remainder split between the new streams).
"""
