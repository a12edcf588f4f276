"""Progress of a conversion: one rewritten line on a terminal, plain lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """Reports each finished shard to ``stream`` (stderr by default); silent when ``enabled`` is
    False. On a terminal it redraws one line; elsewhere it prints a line per shard."""

    def __init__(
        self, shards: int, records: int, stream: TextIO | None = None, enabled: bool = True
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.shards, self.records = shards, records
        self.done_shards = self.done_records = 0
        self.started = time.perf_counter()

    def shard_done(self, entry: dict[str, Any]) -> None:
        """Counts one finished shard (its manifest entry) and reports it."""
        self.done_shards += 1
        self.done_records += int(entry["records"])
        if not self.enabled:
            return
        rate = self.done_records / max(time.perf_counter() - self.started, 1e-9)
        if self.tty:
            width = 30
            filled = width * self.done_shards // max(self.shards, 1)
            bar = "#" * filled + "." * (width - filled)
            end = "\n" if self.done_shards == self.shards else ""
            self.stream.write(
                f"\r[{bar}] {self.done_shards}/{self.shards} shards, {self.done_records}/"
                f"{self.records} records, {rate:,.0f} records/s{end}"
            )
        else:
            self.stream.write(
                f"shard {self.done_shards}/{self.shards} written: {entry['file']} "
                f"({entry['records']} records; {self.done_records}/{self.records} in all)\n"
            )
        self.stream.flush()
