"""Bytes both layers fingerprint: a file's sha256, and a table's parquet bytes written one way only.

The store (manifests, status rows) and the stages (exports, view tables) both need these, and the
stages may not import the store; written the same way everywhere, equal tables give equal bytes,
hence equal hashes and cache keys (for one pyarrow version).
"""

from __future__ import annotations

import hashlib
import io
import os

import pyarrow as pa
import pyarrow.parquet as pq

_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def table_bytes(table: pa.Table) -> bytes:
    """Parquet bytes of a table, written the same way everywhere (deterministic for one pyarrow)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=True)
    return buf.getvalue()
