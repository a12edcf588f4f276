"""Object-storage clients side by side on a local S3 server: the choice behind grainlite[remote].

``python -m benchmarks.remote_clients [--requests 400] [--threads 16] [--big-mib 64]``

Starts SeaweedFS (``weed mini``, grainlite_tests/support/seaweed.py) on 127.0.0.1, uploads one
object, then for each client installed (obstore, pyarrow.fs.S3FileSystem, s3fs) measures, in
this process:

- small ranged GETs (4 KiB at random offsets), one at a time: wall ms and CPU ms per request;
- the same from ``--threads`` threads: requests per second and CPU ms per request;
- one ``--big-mib`` object read as parallel 8 MiB ranges from ``--threads`` threads: MB/s.

Each measurement checks the bytes it got against the object (a client cannot look fast by
returning less). The loopback server's latency is ~1-3 ms, so these numbers compare client costs,
not networks; the CPU per request is what decides how many requests a training process can keep
in flight.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

SMALL = 4096
PART = 8 << 20


def _clients(server) -> dict[str, Callable[[str, int, int], bytes]]:
    """``read(key, start, end) -> bytes`` of each installed client."""
    clients: dict[str, Callable[[str, int, int], bytes]] = {}
    try:
        import obstore
        from obstore.store import S3Store

        store = S3Store(
            server.bucket,
            endpoint=server.endpoint_url,
            access_key_id=server.access_key_id,
            secret_access_key=server.secret_access_key,
            region=server.region,
            client_options={"allow_http": True},
        )
        clients["obstore"] = lambda key, a, b: bytes(obstore.get_range(store, key, start=a, end=b))
    except ImportError:
        pass
    try:
        from pyarrow import fs

        s3 = fs.S3FileSystem(
            access_key=server.access_key_id,
            secret_key=server.secret_access_key,
            endpoint_override=server.endpoint_url,
            region=server.region,
        )

        def arrow(key: str, a: int, b: int) -> bytes:
            with s3.open_input_file(f"{server.bucket}/{key}") as file:
                return file.read_at(b - a, a)

        clients["pyarrow.fs"] = arrow
    except ImportError:
        pass
    try:
        import s3fs

        filesystem = s3fs.S3FileSystem(
            key=server.access_key_id,
            secret=server.secret_access_key,
            client_kwargs={"endpoint_url": server.endpoint_url, "region_name": server.region},
        )
        clients["s3fs"] = lambda key, a, b: filesystem.cat_file(
            f"{server.bucket}/{key}", start=a, end=b
        )
    except ImportError:
        pass
    return clients


def _timed(run: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--big-mib", type=int, default=64)
    args = parser.parse_args()
    from grainlite_tests.support.seaweed import running_seaweed

    data = os.urandom(args.big_mib << 20)
    rng = random.Random(0)
    offsets = [rng.randrange(0, len(data) - SMALL) for _ in range(args.requests)]
    with running_seaweed() as server:
        server.put("big.bin", data)
        print(
            f"{'client':<12} {'serial ms/req':>14} {'serial CPU ms/req':>18} "
            f"{f'{args.threads} threads req/s':>18} {'CPU ms/req':>11} {'big MB/s':>9}"
        )
        for name, read in _clients(server).items():
            read("big.bin", 0, SMALL)  # connect, warm up

            def serial(read=read) -> None:
                for a in offsets:
                    assert read("big.bin", a, a + SMALL) == data[a : a + SMALL]

            def threaded(read=read) -> None:
                with ThreadPoolExecutor(args.threads) as pool:
                    got = list(pool.map(lambda a: read("big.bin", a, a + SMALL), offsets))
                assert all(g == data[a : a + SMALL] for g, a in zip(got, offsets))

            def big(read=read) -> None:
                starts = range(0, len(data), PART)
                with ThreadPoolExecutor(args.threads) as pool:
                    parts = list(pool.map(lambda a: read("big.bin", a, a + PART), starts))
                assert b"".join(parts) == data

            s_wall, s_cpu = _timed(serial)
            t_wall, t_cpu = _timed(threaded)
            b_wall, _ = _timed(big)
            n = len(offsets)
            print(
                f"{name:<12} {1e3 * s_wall / n:>14.2f} {1e3 * s_cpu / n:>18.3f} "
                f"{n / t_wall:>18.0f} {1e3 * t_cpu / n:>11.3f} "
                f"{len(data) / 1e6 / b_wall:>9.0f}"
            )


if __name__ == "__main__":
    main()
