"""The artifact store: parquet tables and media files under one data root, written atomically.

Layout under the data root (a local path or an fsspec URL such as ``s3://bucket/prefix``)::

    artifacts/<stage>/<unit>/<key>/...        one completed output per cache key
    artifacts/<stage>/<unit>/<key>/_manifest.parquet   written last: its presence means "complete"
    status/<stage>/<unit>.parquet             the latest status row of (stage, unit)
    status/_index.parquet                     every status row, compacted (a cache of the above)
    registry/<source_id>.parquet              the source's registration row (schema.SOURCE)
    review/<source_id>.parquet                the human review decision of a source
    exports/                                  the published benchmark (see stages/export)
    tmp/                                      scratch space of outputs being written

A unit's output is built in a private scratch folder, then moved into place with its manifest
(file names, sizes, sha256): on a local disk the files and the manifest appear in one rename, on
an object store the old manifest is removed first and the new one is one object PUT after every
file. A run killed at any moment leaves at most a scratch folder or a folder without a manifest,
which no reader trusts and the next writer replaces.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from vsi_wild import schema
from vsi_wild.digest import sha256_file, table_bytes
from vsi_wild.errors import UnitError

MANIFEST_NAME = "_manifest.parquet"
STATUS_INDEX = "_index.parquet"  # under status/: the compacted status rows (Store.status_table)


def manifest_fingerprint(manifest: pa.Table) -> str:
    h = hashlib.sha256()
    for name, digest in sorted(zip(manifest["file"].to_pylist(), manifest["sha256"].to_pylist(), strict=True)):
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()


class StoreError(RuntimeError):
    pass


@dataclass(frozen=True)
class UnitRef:
    """Where one completed (stage, unit) output lives."""

    stage: str
    unit: str
    key: str


class Store:
    def __init__(self, root: str | os.PathLike[str], local_cache: str | os.PathLike[str] | None = None):
        root = os.fspath(root)
        self.url = root
        self.fs, path = fsspec.core.url_to_fs(root)
        self.is_local = isinstance(self.fs, LocalFileSystem)
        if not self.is_local and getattr(getattr(self.fs, "dircache", None), "use_listings_cache", False):
            # Other processes (Dask workers, other hosts) write here: a cached directory listing
            # would hide their outputs and status rows from this one.
            self.fs, path = fsspec.core.url_to_fs(root, use_listings_cache=False)
        if self.is_local:
            path = os.path.abspath(path)
            os.makedirs(path, exist_ok=True)
        self.root = path.rstrip("/")
        # Remote files are read through a local copy (videos are decoded by ffmpeg from disk).
        self._cache = Path(local_cache) if local_cache else Path(tempfile.gettempdir()) / "vsi-wild-cache"

    # ---------------------------------------------------------------- paths
    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def unit_dir(self, ref: UnitRef) -> str:
        return self.path("artifacts", ref.stage, ref.unit, ref.key)

    def local_root(self) -> Path:
        if not self.is_local:
            raise StoreError(f"data root {self.url} is not a local folder")
        return Path(self.root)

    # ---------------------------------------------------------------- small atomic files
    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        else:
            # One object PUT is atomic on object stores: readers see the old or the new object.
            self.fs.pipe_file(path, data)

    def write_table_atomic(self, path: str, table: pa.Table) -> None:
        self.write_bytes_atomic(path, table_bytes(table))

    def read_table_at(self, path: str, columns: list[str] | None = None) -> pa.Table:
        """The parquet table at ``path`` (``columns``: only those). Arrow reads it from memory it
        owns (a local file by its path, a remote one's bytes copied into an Arrow buffer), never
        through a Python object: Arrow's threads release what they read from after the interpreter
        has finalised, and releasing a Python file object or bytes then aborts the process at exit
        ("terminate called without an active exception"; apache/arrow#33975)."""
        if self.is_local:
            with pq.ParquetFile(path) as pf:
                return pf.read(columns=columns)
        sink = pa.BufferOutputStream()
        sink.write(self.fs.cat_file(path))
        with pq.ParquetFile(pa.BufferReader(sink.getvalue())) as pf:
            return pf.read(columns=columns)

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    # ---------------------------------------------------------------- unit outputs
    def is_complete(self, ref: UnitRef) -> bool:
        return self.fs.exists(f"{self.unit_dir(ref)}/{MANIFEST_NAME}")

    def manifest(self, ref: UnitRef) -> pa.Table:
        return self.read_table_at(f"{self.unit_dir(ref)}/{MANIFEST_NAME}")

    def fingerprint(self, ref: UnitRef) -> str:
        return manifest_fingerprint(self.manifest(ref))

    def files(self, ref: UnitRef) -> list[str]:
        return self.manifest(ref)["file"].to_pylist()

    def read_table(self, ref: UnitRef, name: str) -> pa.Table:
        return self.read_table_at(f"{self.unit_dir(ref)}/{name}")

    def has_file(self, ref: UnitRef, name: str) -> bool:
        return name in self.files(ref)

    def local_file(self, ref: UnitRef, name: str) -> Path:
        """A local path to one file of a completed output (downloaded once if the root is remote)."""
        return self.local_path_of(f"artifacts/{ref.stage}/{ref.unit}/{ref.key}/{name}")

    def local_path_of(self, relative: str) -> Path:
        """A local path to the file at ``relative`` under the root (downloaded once if remote)."""
        remote = self.path(relative)
        if self.is_local:
            return Path(remote)
        local = self._cache / hashlib.sha256(self.url.encode()).hexdigest()[:12] / relative
        if not local.exists():
            local.parent.mkdir(parents=True, exist_ok=True)
            tmp = local.with_name(local.name + f".tmp-{uuid.uuid4().hex}")
            try:
                self.fs.get_file(remote, str(tmp))
                expected = self.manifest_sha256(relative)
                if expected is not None and sha256_file(tmp) != expected:
                    raise StoreError(
                        f"{self.url}/{relative}: content differs from its unit's manifest "
                        "(changed after the unit was completed): re-run that stage with --force"
                    )
                os.replace(tmp, local)
            finally:
                tmp.unlink(missing_ok=True)
        return local

    def manifest_sha256(self, relative: str) -> str | None:
        """The manifest's sha256 of a file of a completed output (None for files outside outputs)."""
        parts = relative.split("/")
        if len(parts) < 5 or parts[0] != "artifacts":
            return None
        ref = UnitRef(parts[1], parts[2], parts[3])
        if not self.is_complete(ref):
            return None
        m = self.manifest(ref)
        name = "/".join(parts[4:])
        for f, digest in zip(m["file"].to_pylist(), m["sha256"].to_pylist(), strict=True):
            if f == name:
                return digest
        return None

    @contextmanager
    def writer(self, ref: UnitRef) -> Iterator[UnitWriter]:
        """Build an output in scratch space; commit it on success, discard it on error."""
        scratch_parent = Path(self.root) / "tmp" if self.is_local else self._cache / "scratch"
        scratch_parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f"{socket.gethostname()}-{os.getpid()}-", dir=scratch_parent))
        w = UnitWriter(self, ref, scratch)
        try:
            yield w
            w._commit()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def remove_output(self, ref: UnitRef) -> None:
        d = self.unit_dir(ref)
        if self.fs.exists(d):
            self.fs.rm(d, recursive=True)

    def clean_scratch(self) -> int:
        """Remove scratch folders left by processes of this host that no longer run."""
        if not self.is_local:
            return 0
        removed = 0
        host = socket.gethostname()
        for d in (Path(self.root) / "tmp").glob(f"{host}-*-*"):
            try:
                pid = int(d.name[len(host) + 1 :].split("-", 1)[0])
            except ValueError:
                continue
            if not _pid_alive(pid):
                shutil.rmtree(d, ignore_errors=True)
                removed += 1
        return removed

    # ---------------------------------------------------------------- status rows
    def status_path(self, stage: str, unit: str) -> str:
        return self.path("status", stage, f"{unit}.parquet")

    def write_status(self, row: dict[str, Any]) -> None:
        self.write_table_atomic(self.status_path(row["stage"], row["unit"]), schema.table(schema.STATUS, [row]))

    def read_status(self, stage: str, unit: str) -> dict[str, Any] | None:
        p = self.status_path(stage, unit)
        if not self.fs.exists(p):
            return None
        return self.read_table_at(p).to_pylist()[0]

    def status_table(self) -> pa.Table:
        """Every status row, in path order. On a local root the rows are read through a compacted
        copy (``status/_index.parquet``: each row with its file's mtime and size), so that only the
        files written since are parsed: a no-op run of the whole release has ~6,000 of them. The
        per-unit files stay the truth; the index is rewritten whenever it was stale."""
        base = self.path("status")
        if not self.is_local:
            return self._concat_dir(base, schema.STATUS, "*/*.parquet")
        files = []
        if os.path.isdir(base):
            for stage_dir in os.scandir(base):
                if stage_dir.is_dir():
                    files += [
                        (e.path, e.stat())
                        for e in os.scandir(stage_dir.path)
                        if e.name.endswith(".parquet") and e.is_file()
                    ]
        files.sort(key=lambda f: f[0])
        index_path = os.path.join(base, STATUS_INDEX)
        known: dict[str, dict[str, Any]] = {}
        if os.path.exists(index_path):
            try:
                for r in self.read_table_at(index_path).to_pylist():
                    known[r.pop("file")] = r
            except Exception:  # a damaged index is only a lost shortcut
                known = {}
        rows, fresh = [], False
        for path, st in files:
            rel = os.path.relpath(path, base)
            r = known.get(rel)
            if r is not None and r.pop("file_mtime_ns") == st.st_mtime_ns and r.pop("file_bytes") == st.st_size:
                rows.append(r)
                continue
            try:
                row = schema.conform(self.read_table_at(path), schema.STATUS).to_pylist()[0]
            except Exception as e:  # a damaged row file must not hide the others
                raise StoreError(f"unreadable table {path}: {e}") from e
            rows.append(row)
            fresh = True
        if fresh or len(known) != len(files):
            index = [
                {**r, "file": os.path.relpath(p, base), "file_mtime_ns": st.st_mtime_ns, "file_bytes": st.st_size}
                for r, (p, st) in zip(rows, files, strict=True)
            ]
            self.write_table_atomic(index_path, schema.table(schema.STATUS_INDEX, index))
        return schema.table(schema.STATUS, rows)

    # ---------------------------------------------------------------- registry and review
    def register_source(self, row: dict[str, Any]) -> bool:
        """Write a source's registry row; a source a person removed (``remove_source``) is not
        registered again (False) until its removal is undone (``undo_remove``)."""
        if self.is_removed(row["source_id"]):
            return False
        self.write_table_atomic(
            self.path("registry", f"{row['source_id']}.parquet"), schema.table(schema.SOURCE, [row])
        )
        return True

    def registry_row(self, source_id: str) -> dict[str, Any] | None:
        p = self.path("registry", f"{source_id}.parquet")
        if not self.fs.exists(p):
            return None
        return schema.conform(self.read_table_at(p), schema.SOURCE).to_pylist()[0]

    def source_file(self, row: dict[str, Any]) -> Path:
        """The local file of a registered source: absolute paths as given, relative ones in the store."""
        path = row["path"]
        if not path:
            raise UnitError(f"source {row['source_id']} has no file yet (not downloaded)")
        if os.path.isabs(path):
            return Path(path)
        if self.is_local:
            return Path(self.path(path))
        return self.local_path_of(path)

    def unregister_source(self, source_id: str) -> bool:
        p = self.path("registry", f"{source_id}.parquet")
        if self.fs.exists(p):
            self.fs.rm(p)
            return True
        return False

    def remove_source(self, source_id: str, reason: str | None = None) -> bool:
        """Unregister a source and leave a tombstone, so that nothing registers it again (a cached
        crawl download or sample is published on every run). True if it was registered."""
        from datetime import datetime

        row = {"source_id": source_id, "removed_at": datetime.now(UTC), "reason": reason}
        self.write_table_atomic(self._removed_path(source_id), schema.table(schema.REMOVED_SOURCE, [row]))
        return self.unregister_source(source_id)

    def is_removed(self, source_id: str) -> bool:
        return self.fs.exists(self._removed_path(source_id))

    def undo_remove(self, source_id: str) -> bool:
        """Drop a source's tombstone (the next run registers it again); True if there was one."""
        p = self._removed_path(source_id)
        if self.fs.exists(p):
            self.fs.rm(p)
            return True
        return False

    def removed_sources(self) -> pa.Table:
        return self._concat_dir(self.path("removed"), schema.REMOVED_SOURCE, "*.parquet").sort_by("source_id")

    def _removed_path(self, source_id: str) -> str:
        return self.path("removed", f"{source_id}.parquet")

    def registry(self) -> pa.Table:
        return self._concat_dir(self.path("registry"), schema.SOURCE, "*.parquet").sort_by("source_id")

    def _concat_dir(self, base: str, sch: pa.Schema, pattern: str) -> pa.Table:
        paths = sorted(self.fs.glob(f"{base}/{pattern}")) if self.fs.exists(base) else []
        tables = []
        for p in paths:
            try:
                tables.append(schema.conform(self.read_table_at(p), sch))
            except Exception as e:  # a damaged row file must not hide the others
                raise StoreError(f"unreadable table {p}: {e}") from e
        return pa.concat_tables(tables) if tables else sch.empty_table()


class UnitWriter:
    """Collects the files of one output in a local scratch folder (see ``Store.writer``)."""

    def __init__(self, store: Store, ref: UnitRef, scratch: Path):
        self.store = store
        self.ref = ref
        self.scratch = scratch

    def path(self, name: str) -> Path:
        """A local path to write the file ``name`` (may contain '/'); parents are created."""
        if name.startswith("/") or ".." in Path(name).parts or name == MANIFEST_NAME:
            raise StoreError(f"bad output file name {name!r}")
        p = self.scratch / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_table(self, name: str, table: pa.Table) -> None:
        self.path(name).write_bytes(table_bytes(table))

    def _commit(self) -> None:
        files = sorted(p for p in self.scratch.rglob("*") if p.is_file())
        rows = [
            {"file": p.relative_to(self.scratch).as_posix(), "bytes": p.stat().st_size, "sha256": sha256_file(p)}
            for p in files
        ]
        manifest = schema.table(schema.MANIFEST, rows)
        final = self.store.unit_dir(self.ref)
        st = self.store
        if st.is_local:
            self._commit_local(final, table_bytes(manifest))
            return
        self._commit_remote(final, files, manifest)

    def _commit_remote(self, final: str, files: list[Path], manifest: pa.Table) -> None:
        """An object store has no rename: the old manifest goes first (no reader trusts an output
        whose files are being replaced), every file is PUT over its name, the manifest last. Nothing
        else is removed: another worker committing the same unit at once may already have PUT its
        manifest, whose files must stay (removing the folder, as before, let a manifest land on
        an emptied folder: complete by its manifest, with none of its files). Files an earlier
        attempt left under other names stay, unlisted, and no reader looks at them."""
        st = self.store
        manifest_path = f"{final}/{MANIFEST_NAME}"
        # a first commit, or another worker's commit removed it just now
        with contextlib.suppress(FileNotFoundError):
            st.fs.rm(manifest_path)
        for p in files:
            st.fs.put_file(str(p), f"{final}/{p.relative_to(self.scratch).as_posix()}")
        st.write_table_atomic(manifest_path, manifest)

    def _commit_local(self, final: str, manifest: bytes) -> None:
        """The files and their manifest appear at ``final`` in one rename (scratch lives under the
        root: one file system), replacing what is there (an attempt that died before its manifest,
        or the output a forced re-run recomputes) by moving it aside first. Two processes that
        compute the same unit at once each leave a whole output there, the later one's; before,
        one's cleanup removed the other's files and its manifest landed in the empty folder (seen
        with two benches on one root: a unit complete by its manifest, with none of its files)."""
        self.store.write_bytes_atomic(str(self.scratch / MANIFEST_NAME), manifest)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        for _ in range(100):
            try:
                os.rename(self.scratch, final)
                return
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            # named as scratch is, so that clean_scratch removes it if this process dies here
            aside = self.scratch.with_name(f"{self.scratch.name}-replaced")
            try:
                os.rename(final, aside)
            except FileNotFoundError:  # another process moved it aside first: try again
                continue
            shutil.rmtree(aside, ignore_errors=True)
        raise StoreError(f"could not commit {final}: other processes kept replacing it")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
