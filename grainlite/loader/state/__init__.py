"""The DataLoader's checkpoint: its JSON codec, a worker's state, the holes field, elastic restore.

``codec`` reads and writes the bytes (Grain's DataLoader v2 fields plus grainlite's own),
``worker_state`` defines what one worker's position is, ``holes_field`` the ``grainlite_holes``
field, and ``elastic`` / ``resharding`` place a state saved with another layout.
"""
