"""Writes a workload's records in a streaming peer's format, run in that peer's environment.

``.venv-litdata/bin/python -m benchmarks.remote_convert --format litdata --data DIR --records N
--shards S --out DIR`` (LitData's ``optimize``, one chunk per shard range) or ``--format mds`` in
.venv-mosaic (MosaicML Streaming's ``MDSWriter``, shards of about one range's bytes). Each sample
is ``{"record": bytes}``: the same bytes the ArrayRecord shards hold.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.remote_data import RawRecords, RemoteData


class RecordsOfShard:
    """LitData's ``fn`` (picklable, for its worker processes): the samples of one shard range, as
    a generator (one chunk per input)."""

    def __init__(self, data: RemoteData) -> None:
        self.data = data

    def __call__(self, shard: int) -> Iterator[dict[str, Any]]:
        raw = RawRecords(self.data.root)
        start, end = self.data.shard_range(shard)
        for index in range(start, end):
            yield {"record": raw[index]}


def litdata(data: RemoteData, out: Path) -> None:
    import litdata as ld

    ld.optimize(
        fn=RecordsOfShard(data),
        inputs=list(range(data.shards)),
        output_dir=str(out),
        chunk_size=data.per_shard,
        num_workers=1,
        mode="overwrite",
    )


def mds(data: RemoteData, out: Path) -> None:
    from benchmarks.remote_lib_mosaic import MDSWriter  # (streaming without its vision part)

    raw = RawRecords(data.root)
    biggest = max(
        int(raw.offsets[end] - raw.offsets[start])
        for start, end in map(data.shard_range, range(data.shards))
    )
    # About one range per shard: its bytes plus MDS's per-sample overhead.
    limit = biggest + 16 * data.per_shard + (1 << 16)
    with MDSWriter(out=str(out), columns={"record": "bytes"}, size_limit=limit) as writer:
        for index in range(len(raw)):
            writer.write({"record": raw[index]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", required=True, choices=("litdata", "mds"))
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--records", required=True, type=int)
    parser.add_argument("--shards", required=True, type=int)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    data = RemoteData(args.data, args.records, args.shards)
    (litdata if args.format == "litdata" else mds)(data, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
