"""The data root as an s3:// URL, against a local S3-compatible server (moto's, from the dev extra):
outputs complete only with their manifest, listings never stale, downloads checked, and a pipeline
run computes the same cache keys and fingerprints as on a local folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pyarrow as pa
import pytest
from deploy_support import BIN, free_port, small_sample_yaml, status_rows

from vsi_wild import schema
from vsi_wild.store import MANIFEST_NAME, Store, StoreError, UnitRef, table_bytes

pytest.importorskip("moto.server", reason="moto[server] (dev extra) runs the local S3 server")
s3fs = pytest.importorskip("s3fs")

BUCKET = "vsi-wild-test"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A local S3 server; yields the environment that points fsspec/botocore at it."""
    port = free_port()
    with open(tmp_path_factory.mktemp("moto") / "moto.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(env["AWS_ENDPOINT_URL"], timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the local S3 server did not start") from None
                time.sleep(0.5)
        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(BUCKET)
        yield env
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _root() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"


def _other_client() -> s3fs.S3FileSystem:
    """Another process's view of the bucket: its own connection and caches."""
    return s3fs.S3FileSystem(skip_instance_cache=True)


def test_output_is_complete_only_with_its_manifest(s3, tmp_path, monkeypatch):
    store = Store(_root(), local_cache=tmp_path / "cache")
    ref = UnitRef("s", "u", "k1")
    calls = []
    real_put = store.fs.put_file

    def put_then_die(lpath, rpath, **kw):  # the writer dies after its first upload
        calls.append(rpath)
        if len(calls) == 2:
            raise ConnectionError("connection reset")
        return real_put(lpath, rpath, **kw)

    monkeypatch.setattr(store.fs, "put_file", put_then_die)
    with pytest.raises(ConnectionError), store.writer(ref) as w:
        w.write_table("a.parquet", pa.table({"x": [1]}))
        w.path("b.bin").write_bytes(b"b" * 1000)
    monkeypatch.undo()
    other = _other_client()
    unit_dir = store.unit_dir(ref)
    assert other.exists(f"{unit_dir}/a.parquet")  # one file made it ...
    assert not other.exists(f"{unit_dir}/{MANIFEST_NAME}")  # ... but nothing claims completion
    assert not store.is_complete(ref)
    with store.writer(ref) as w:  # the next writer replaces the leftovers
        w.write_table("a.parquet", pa.table({"x": [2]}))
    assert store.is_complete(ref)
    assert sorted(p.rsplit("/", 1)[1] for p in other.ls(unit_dir)) == [MANIFEST_NAME, "a.parquet"]
    assert store.read_table(ref, "a.parquet")["x"].to_pylist() == [2]


def test_listings_are_never_stale(s3, tmp_path):
    """A status row written by another process (a Dask worker) is seen at once."""
    root = _root()
    store = Store(root, local_cache=tmp_path / "cache")
    row = {n: None for n in schema.STATUS.names} | {
        "stage": "probe",
        "state": "done",
        "key": "k",
        "attempts": 1,
        "pipeline_version": "0",
    }
    store.write_status(row | {"unit": "local-a-00000000"})
    assert len(store.status_table()) == 1
    other = _other_client()
    other.pipe(
        f"{root.removeprefix('s3://')}/status/probe/local-b-00000000.parquet",
        table_bytes(schema.table(schema.STATUS, [row | {"unit": "local-b-00000000"}])),
    )
    assert len(store.status_table()) == 2
    assert store.read_status("probe", "local-b-00000000")["state"] == "done"


def test_downloads_are_checked_against_the_manifest(s3, tmp_path):
    root = _root()
    store = Store(root, local_cache=tmp_path / "cache")
    ref = UnitRef("s", "u", "k1")
    with store.writer(ref) as w:
        w.path("video.mp4").write_bytes(b"frames" * 100)
    local = store.local_file(ref, "video.mp4")
    assert local.read_bytes() == b"frames" * 100
    ref2 = UnitRef("s", "v", "k1")
    with store.writer(ref2) as w:
        w.path("video.mp4").write_bytes(b"frames" * 100)
    _other_client().pipe(f"{store.unit_dir(ref2)}/video.mp4", b"tampered")
    with pytest.raises(StoreError, match="differs from its unit's manifest"):
        Store(root, local_cache=tmp_path / "cache2").local_file(ref2, "video.mp4")


@pytest.mark.slow
def test_pipeline_on_s3_matches_a_local_run(s3, tmp_path):
    cfg = tmp_path / "local.yaml"
    cfg.write_text(small_sample_yaml())
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    local_root, s3_root = tmp_path / "local", _root()

    def run(root: str) -> None:
        out = subprocess.run(
            ["vsi-wild", "run", "--config", str(cfg), "--data-root", root],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert out.returncode == 0, out.stdout + out.stderr

    run(str(local_root))
    run(s3_root)
    local_rows, s3_rows = status_rows(local_root), status_rows(s3_root)
    assert local_rows and local_rows.keys() == s3_rows.keys()
    for k, r in local_rows.items():
        assert (r["state"], r["key"], r["fingerprint"]) == (
            s3_rows[k]["state"],
            s3_rows[k]["key"],
            s3_rows[k]["fingerprint"],
        ), k
    # again: everything is cached, no unit ran (a unit that runs rewrites its status row)
    run(s3_root)
    assert status_rows(s3_root) == s3_rows
