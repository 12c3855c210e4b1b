"""One RocksDB store (rocksdict) per status partition: rows as JSON plus their indexes, on disk."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from rocksdict import Options, Rdict, WriteBatch

from reach.streams.status import keys

WRITE_BUFFER_BYTES = 8 << 20
Parsed = tuple[dict[str, Any] | None, dict[str, Any] | None]
"""(the row as the store holds it, the row written), as JSON dicts."""


class PartitionStore:
    """Rows of one receipts/status partition; written by the fold thread only, read from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._options = Options(raw_mode=True)
        # Bounded memtables and log: RocksDB's defaults (64 MiB x 2 write buffers per store) let each partition's
        # store hold up to 128 MiB of rows in memory and as much log on disk before its first flush, which a soak
        # reads as growth (docs/reliability.md, "Soak"); 8 MiB buffers level off at ~45 MiB for four stores
        self._options.set_write_buffer_size(WRITE_BUFFER_BYTES)
        self._options.set_max_write_buffer_number(2)
        self._options.set_max_total_wal_size(4 * WRITE_BUFFER_BYTES)
        self._db = Rdict(str(path), self._options)
        # Every read, write and iteration against close(): the fold thread closes a revoked partition's store
        # while HTTP and timekeeper threads may still be reading it (RocksDB is thread-safe, a closed handle is not)
        self._lock = threading.Lock()
        self._closed = False
        self.rows = int(self._db.get(keys.META_ROWS) or b"0")

    @property
    def changelog_next(self) -> int | None:
        """The next changelog offset this store has not applied yet (None: never recovered)."""
        raw = self._db.get(keys.META_CHANGELOG)
        return int(raw) if raw is not None else None

    def get_raw(self, message_id: str) -> bytes | None:
        with self._lock:
            if self._closed:  # revoked while a reader held it: the new owner answers from now on
                return None
            value: bytes | None = self._db.get(keys.row_key(message_id))
            return value

    def get(self, message_id: str) -> dict[str, Any] | None:
        raw = self.get_raw(message_id)
        found: dict[str, Any] | None = orjson.loads(raw) if raw is not None else None
        return found

    def write(self, rows: Mapping[str, bytes | None], *, changelog_next: int | None = None,
              parsed: Mapping[str, Parsed] | None = None) -> None:
        """Put (JSON) or delete (None) rows with their index entries, atomically, with the changelog offset.

        `parsed`: per message id, (the row as this store holds it now, the row as `rows` writes it), both as dicts,
        when the writer has them already (the fold read and built them): the store then reads and parses neither."""
        batch = WriteBatch(raw_mode=True)
        count = self.rows
        for message_id, value in rows.items():
            known = parsed.get(message_id) if parsed is not None else None
            if known is not None:
                was, row = known
                existed = was is not None
            else:
                old_raw = self.get_raw(message_id)
                existed = old_raw is not None
                was = orjson.loads(old_raw) if old_raw is not None else None
                row = orjson.loads(value) if value is not None else None
            old = keys.index_entries(was)
            new = keys.index_entries(row) if value is not None else {}
            for key in old.keys() - new.keys():
                batch.delete(key)
            for key, entry in new.items():
                if old.get(key) != entry:
                    batch.put(key, entry)
            if value is None:
                if existed:
                    batch.delete(keys.row_key(message_id))
                    count -= 1
            else:
                batch.put(keys.row_key(message_id), value)
                count += not existed
        batch.put(keys.META_ROWS, str(count).encode())
        if changelog_next is not None:
            batch.put(keys.META_CHANGELOG, str(changelog_next).encode())
        with self._lock:
            self._db.write(batch)
            self.rows = count

    def timed(self, prefix: bytes, until_ms: int, limit: int = 10_000) -> list[tuple[int, str]]:
        """(time, message_id) of the `prefix` index entries timed at or before `until_ms`, oldest first."""
        end = keys.until(prefix, until_ms)
        return [keys.timed_id(key) for key, _ in self._range(prefix, end, limit)]

    def no_route(self, until_ms: int, limit: int = 10_000) -> list[str]:
        return [keys.timed_id(key)[1] for key, _ in self._range(keys.NO_ROUTE, keys.until(keys.NO_ROUTE, until_ms),
                                                                   limit)]

    def trace(self, trace_id: str, limit: int = 10_000) -> list[tuple[int, str]]:
        """(first seen at, message_id) of every row of the trace in this partition."""
        prefix = keys.trace_prefix(trace_id)
        return [(keys.read_time(value), key[len(prefix):].decode())
                for key, value in self._range(prefix, prefix[:-1] + b"\x01", limit)]

    def newest(self, prefix: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """At most `limit` (key, value) of `prefix`, from its last key backwards (newest first for a timed index)."""
        found: list[tuple[bytes, bytes]] = []
        with self._lock:
            if self._closed:
                return found
            it = self._db.iter()
            it.seek_for_prev(prefix + b"\xff" * 9)
            while it.valid() and len(found) < limit:
                key: bytes = it.key()
                if not key.startswith(prefix):
                    break
                found.append((key, it.value()))
                it.prev()
            del it
        return found

    def _range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """At most `limit` (key, value) from `start` to before `end`, read whole under the lock."""
        found: list[tuple[bytes, bytes]] = []
        with self._lock:
            if self._closed:
                return found
            it = self._db.iter()
            it.seek(start)
            while it.valid() and len(found) < limit:
                key: bytes = it.key()
                if key >= end:
                    break
                found.append((key, it.value()))
                it.next()
            del it  # released before close() can run
        return found

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def destroy(self) -> None:
        """Close and delete the store from disk (it is rebuilt from the changelog)."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
