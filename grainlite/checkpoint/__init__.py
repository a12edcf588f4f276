"""Saving a grainlite iterator with Orbax, beside the model.

``mngr.save(step, args=grain.GrainCheckpointSave(iterator))`` writes the iterator's state to
``<step>/<item>/process_<i>-of-<n>.json`` (one file per JAX process); ``mngr.restore(step,
args=grain.GrainCheckpointRestore(iterator))`` moves ``iterator`` there and returns it. The file
holds exactly ``iterator.get_state()``; restoring reads it as JSON, never unpickles it.

Importing this module imports Orbax; without it, MissingExtraError names the ``orbax`` extra.
"""

from grainlite.checkpoint.orbax import CheckpointHandler, CheckpointRestore, CheckpointSave

__all__ = ["CheckpointHandler", "CheckpointRestore", "CheckpointSave"]
