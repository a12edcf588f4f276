"""The conversion as an Apache Beam pipeline: the same shards, written by any Beam runner.

The driver plans exactly as the local converter does (open the input, infer the schema, decide
the shards by the spread rule in shards.py) and creates the partial folder. The pipeline then
has one element per shard::

    Create(shard indices) -> Reshuffle -> WriteShard (shards.write_shard) -> ToList -> Publish

``Reshuffle`` lets the runner spread the shards over its workers; ``WriteShard`` writes shard
``i``'s records, which the spread rule fixes, so which worker writes it, or in which bundle, does
not change a byte. ``Publish`` sorts the entries by shard and writes the manifest and renames the
folder with the local converter's own code: the output is byte-identical to ``convert``'s.

The default runner is DirectRunner (this machine). DataflowRunner, FlinkRunner and SparkRunner
run the same pipeline; their workers must see the destination's filesystem (e.g. a mounted bucket)
and have grainlite installed. This is the only module that imports ``apache_beam``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from grainlite._optional import require
from grainlite.errors import GrainliteValueError
from grainlite.sources import locations
from grainlite.tools.convert import converter
from grainlite.tools.convert import manifest as manifest_module
from grainlite.tools.convert.shards import ShardTask, write_shard


def _write(index: int, tasks: Sequence[ShardTask]) -> tuple[int, dict[str, Any]]:
    return index, write_shard(tasks[index])


def _publish(entries: list[tuple[int, dict[str, Any]]], plan: converter.Plan, folder: str) -> str:
    ordered = [entry for _, entry in sorted(entries, key=lambda pair: pair[0])]
    converter.finish(plan, folder, ordered)
    return plan.dst


def build(pipeline: Any, plan: converter.Plan, folder: str) -> Any:
    """Adds the conversion of ``plan`` (shards into ``folder``) to ``pipeline``."""
    beam = require("apache_beam", "beam", "The Beam conversion pipeline")
    tasks = plan.tasks(folder)
    return (
        pipeline
        | "Shards" >> beam.Create(list(range(len(tasks))))
        | "Spread" >> beam.Reshuffle()
        | "WriteShard" >> beam.Map(_write, tasks)
        | "Gather" >> beam.combiners.ToList()
        | "Publish" >> beam.Map(_publish, plan, folder)
    )


def run(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    options: converter.ConvertOptions,
    runner: str = "DirectRunner",
    pipeline_args: Sequence[str] = (),
) -> manifest_module.Manifest:
    """Converts ``src`` into ``dst`` with a Beam pipeline on ``runner``; returns the manifest.

    ``pipeline_args`` are more Beam pipeline options, e.g. ``["--direct_num_workers=2"]``.
    """
    beam = require("apache_beam", "beam", "The Beam conversion pipeline")
    from apache_beam.options.pipeline_options import PipelineOptions

    plan = converter.plan(src, dst, options)
    if locations.is_remote(plan.dst) and runner != "DirectRunner":
        raise GrainliteValueError(
            f"A bucket destination ({plan.dst!r}) is written through a local staging folder, "
            f"which only DirectRunner's workers share; the runner is {runner!r}. Use "
            f"--runner DirectRunner (or the local converter), or convert into a folder every "
            f"worker sees and upload it."
        )
    folder = converter.start(plan)
    try:
        pipeline_options = PipelineOptions([f"--runner={runner}", *pipeline_args])
        with beam.Pipeline(options=pipeline_options) as pipeline:
            build(pipeline, plan, folder)
    except BaseException:
        converter.discard(folder)
        raise
    return manifest_module.load(plan.dst)
