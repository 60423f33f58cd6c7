"""The artifact store: atomic outputs, manifests written last, status rows, the registry."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from vsi_wild import schema
from vsi_wild.store import MANIFEST_NAME, Store, UnitRef, manifest_fingerprint


def _table(n: int) -> pa.Table:
    return pa.table({"x": list(range(n))})


def test_committed_output_has_manifest_with_real_hashes(tmp_path):
    store = Store(tmp_path)
    ref = UnitRef("s", "u", "k1")
    with store.writer(ref) as w:
        w.write_table("a.parquet", _table(3))
        w.path("sub/b.bin").write_bytes(b"hello")
    assert store.is_complete(ref)
    m = {r["file"]: r for r in store.manifest(ref).to_pylist()}
    assert set(m) == {"a.parquet", "sub/b.bin"}
    assert m["sub/b.bin"]["sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert m["sub/b.bin"]["bytes"] == 5
    assert store.read_table(ref, "a.parquet")["x"].to_pylist() == [0, 1, 2]
    # scratch space is gone
    assert not any((tmp_path / "tmp").iterdir())


def test_failed_writer_leaves_nothing_trusted(tmp_path):
    store = Store(tmp_path)
    ref = UnitRef("s", "u", "k1")
    with pytest.raises(RuntimeError), store.writer(ref) as w:
        w.write_table("a.parquet", _table(3))
        raise RuntimeError("boom")
    assert not store.is_complete(ref)
    assert not os.path.exists(store.unit_dir(ref))


def test_output_without_manifest_is_replaced(tmp_path):
    store = Store(tmp_path)
    ref = UnitRef("s", "u", "k1")
    d = store.unit_dir(ref)
    os.makedirs(d)
    Path(d, "stale.bin").write_bytes(b"half")  # a crash between rename and manifest
    assert not store.is_complete(ref)
    with store.writer(ref) as w:
        w.path("fresh.bin").write_bytes(b"ok")
    assert store.files(ref) == ["fresh.bin"]
    assert not os.path.exists(os.path.join(d, "stale.bin"))


def test_fingerprint_depends_on_content_only(tmp_path):
    s1, s2 = Store(tmp_path / "a"), Store(tmp_path / "b")
    for st, key in ((s1, "k1"), (s2, "k2")):
        with st.writer(UnitRef("s", "u", key)) as w:
            w.path("f.bin").write_bytes(b"same")
    assert s1.fingerprint(UnitRef("s", "u", "k1")) == s2.fingerprint(UnitRef("s", "u", "k2"))
    with s1.writer(UnitRef("s", "u", "k3")) as w:
        w.path("f.bin").write_bytes(b"other")
    assert s1.fingerprint(UnitRef("s", "u", "k3")) != s1.fingerprint(UnitRef("s", "u", "k1"))


def test_bad_output_names_are_refused(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(Exception, match="bad output file name"), store.writer(UnitRef("s", "u", "k")) as w:
        w.path("../escape.bin")


def test_status_and_registry_tables(tmp_path):
    store = Store(tmp_path)
    row = {n: None for n in schema.STATUS.names}
    row.update(stage="probe", unit="local-a-1", state="failed", key="k", error="bad", attempts=1, pipeline_version="0")
    store.write_status(row)
    t = store.status_table()
    assert t.num_rows == 1 and t.schema == schema.STATUS
    assert store.read_status("probe", "local-a-1")["error"] == "bad"
    src = {n: None for n in schema.SOURCE.names}
    src.update(source_id="local-a-1", origin="local", path="/x.mp4")
    store.register_source(src)
    assert store.registry()["source_id"].to_pylist() == ["local-a-1"]
    assert store.unregister_source("local-a-1") and store.registry().num_rows == 0


def test_status_table_parses_only_the_rows_written_since_its_index(tmp_path, monkeypatch):
    """status_table reads through status/_index.parquet: the same rows as reading every file, and
    only the files written (or rewritten) since the index was made are parsed."""
    store = Store(tmp_path)

    def status(stage, unit, state, error=None):
        row = {n: None for n in schema.STATUS.names}
        row.update(stage=stage, unit=unit, state=state, key="k", error=error, attempts=1, pipeline_version="0")
        store.write_status(row)

    for i in range(5):
        status("probe", f"local-a-{i}", "done")
    status("review", "local-a-0", "skipped", "awaiting review")

    def every_file():
        return store._concat_dir(store.path("status"), schema.STATUS, "*/*.parquet")

    assert store.status_table().equals(every_file())
    assert (tmp_path / "status" / "_index.parquet").exists()

    parsed = []
    real = Store.read_table_at
    monkeypatch.setattr(Store, "read_table_at", lambda self, path: parsed.append(Path(path).name) or real(self, path))
    assert store.status_table().equals(every_file()) and parsed.count("_index.parquet") == 1
    parsed.clear()
    t = store.status_table()
    assert parsed == ["_index.parquet"]  # nothing changed: no row file parsed
    status("review", "local-a-0", "done")  # rewritten
    status("probe", "local-b-9", "failed", "broken")  # new
    (tmp_path / "status" / "probe" / "local-a-3.parquet").unlink()  # gone
    parsed.clear()
    t = store.status_table()
    assert sorted(parsed) == ["_index.parquet", "local-a-0.parquet", "local-b-9.parquet"]
    monkeypatch.setattr(Store, "read_table_at", real)
    assert t.equals(every_file()) and t.num_rows == 6
    assert {(r["unit"], r["state"]) for r in t.to_pylist() if r["stage"] == "review"} == {("local-a-0", "done")}
    (tmp_path / "status" / "_index.parquet").write_bytes(b"damaged")
    assert store.status_table().equals(every_file())  # a damaged index is rebuilt


def test_removed_sources_are_not_registered_again_by_the_sample_and_add_overrides(tmp_path):
    """A removal leaves a tombstone: the sample stage's registration (run on every cached run) does
    not register the sample again; `add` of a local file is a person's own word and lifts its removal."""
    from vsi_wild.config import load_config
    from vsi_wild.tasks import engine
    from vsi_wild.tasks import sample as ts
    from vsi_wild.tasks.sources import register_local

    store = Store(tmp_path / "root")
    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "sample.yaml")
    ref = UnitRef("sample", "sample-walk", "k1")
    registration = schema.table(schema.SOURCE, [ts.registration_row(config.sample, ref)])

    def register_sample() -> None:  # what the engine does with the sample's output, cached or computed
        engine.register_sources(store, registration)

    register_sample()
    assert store.registry()["source_id"].to_pylist() == ["sample-walk"]
    assert store.remove_source("sample-walk", "not needed") and store.is_removed("sample-walk")
    register_sample()
    assert store.registry().num_rows == 0
    assert store.removed_sources().to_pylist()[0]["reason"] == "not needed"
    assert store.undo_remove("sample-walk") and not store.undo_remove("sample-walk")
    register_sample()
    assert store.registry()["source_id"].to_pylist() == ["sample-walk"]

    video = tmp_path / "walk.mp4"
    video.write_bytes(b"not probed yet")
    [sid] = register_local(store, [str(video)])
    assert store.remove_source(sid) and store.registry_row(sid) is None
    assert register_local(store, [str(video)]) == [sid]
    assert store.registry_row(sid) is not None and not store.is_removed(sid)


def test_kill_during_write_leaves_no_trusted_output(tmp_path):
    """A process killed while writing (after some files, before the manifest) leaves a unit that
    no reader trusts; its scratch folder is cleaned by the next run."""
    code = textwrap.dedent(f"""
        import os, signal
        from vsi_wild.store import Store, UnitRef
        st = Store({str(tmp_path)!r})
        with st.writer(UnitRef("s", "u", "k")) as w:
            w.path("a.bin").write_bytes(b"x" * 1000)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code])
    assert proc.returncode == -9
    store = Store(tmp_path)
    assert not store.is_complete(UnitRef("s", "u", "k"))
    assert len(list((tmp_path / "tmp").iterdir())) == 1
    assert store.clean_scratch() == 1
    assert not list((tmp_path / "tmp").iterdir())


def test_remote_root_same_guarantees(tmp_path):
    """An fsspec root (memory://) gets the same outputs, manifests and fingerprints."""
    local, remote = Store(tmp_path), Store("memory://vsi-wild-test/root")
    for st in (local, remote):
        with st.writer(UnitRef("s", "u", "k")) as w:
            w.write_table("t.parquet", _table(5))
            w.path("v.bin").write_bytes(b"video")
    ref = UnitRef("s", "u", "k")
    assert remote.is_complete(ref)
    assert remote.fingerprint(ref) == local.fingerprint(ref)
    assert remote.local_file(ref, "v.bin").read_bytes() == b"video"
    assert remote.read_table(ref, "t.parquet").equals(local.read_table(ref, "t.parquet"))
    assert manifest_fingerprint(remote.manifest(ref)) == local.fingerprint(ref)
    assert remote.fs.exists(f"{remote.unit_dir(ref)}/{MANIFEST_NAME}")


def test_two_processes_committing_one_unit_leave_it_whole(tmp_path):
    """Two processes that compute the same unit at once (two workers, or two benches on one root)
    each commit it many times: none fails, and what stays is one whole output, its files those its
    manifest lists, with their hashes. (Before: one's cleanup removed the other's files, whose
    manifest then landed in the empty folder, or its rename failed on the other's folder.)"""
    code = textwrap.dedent(f"""
        import sys
        from vsi_wild.store import Store, UnitRef
        st, me = Store({str(tmp_path)!r}), sys.argv[1]
        for i in range(150):
            with st.writer(UnitRef("s", "u", "k")) as w:
                for j in range(4):
                    w.path(f"{{me}}-{{j}}.bin").write_bytes((me * 2000).encode())
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", code, name], stderr=subprocess.PIPE, text=True) for name in ("a", "b")
    ]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    store, ref = Store(tmp_path), UnitRef("s", "u", "k")
    assert store.is_complete(ref)
    listed = {r["file"]: r["sha256"] for r in store.manifest(ref).to_pylist()}
    on_disk = sorted(p.name for p in Path(store.unit_dir(ref)).iterdir() if p.name != MANIFEST_NAME)
    assert sorted(listed) == on_disk and len(on_disk) == 4
    for name, sha in listed.items():
        assert hashlib.sha256((Path(store.unit_dir(ref)) / name).read_bytes()).hexdigest() == sha
    assert store.clean_scratch() == 0 and not list((tmp_path / "tmp").iterdir())


def test_remote_commit_racing_another_leaves_no_manifest_without_its_files(monkeypatch):
    """Two workers commit one unit on an object store: A has PUT its files; B starts its commit and
    dies at its first PUT; then A's manifest lands. A's output must be whole. (Before: B's commit
    began by removing the unit's folder, so A's manifest landed on an emptied folder: complete by
    its manifest, none of its files there.)"""
    st = Store(f"memory://vsi-wild-race-{uuid.uuid4().hex[:8]}/root")
    ref = UnitRef("s", "u", "k")
    real_put, real_manifest_write = st.fs.put_file, st.write_table_atomic

    def put_that_dies_in_b(*a, **k):
        if b_running:
            raise ConnectionError("worker B lost its connection")
        return real_put(*a, **k)

    def b_commits_before_a_manifest(path, table):
        nonlocal b_running
        b_running = True
        with pytest.raises(ConnectionError), st.writer(ref) as wb:
            wb.path("v.bin").write_bytes(b"B")
        b_running = False
        real_manifest_write(path, table)

    b_running = False
    monkeypatch.setattr(st.fs, "put_file", put_that_dies_in_b)
    monkeypatch.setattr(st, "write_table_atomic", b_commits_before_a_manifest)
    with st.writer(ref) as wa:
        wa.write_table("t.parquet", _table(3))
        wa.path("v.bin").write_bytes(b"A")
    assert st.is_complete(ref)
    for row in st.manifest(ref).to_pylist():
        data = st.fs.cat_file(f"{st.unit_dir(ref)}/{row['file']}")
        assert hashlib.sha256(data).hexdigest() == row["sha256"], row["file"]
    assert st.local_file(ref, "v.bin").read_bytes() == b"A"


def test_remote_commit_replacing_an_output_is_untrusted_until_its_manifest(monkeypatch):
    """A forced re-run on an object store that dies while PUTting its files leaves the unit
    incomplete (recomputed next time), not the old manifest over a mix of old and new files."""
    st = Store(f"memory://vsi-wild-replace-{uuid.uuid4().hex[:8]}/root")
    ref = UnitRef("s", "u", "k")
    with st.writer(ref) as w:
        w.path("a.bin").write_bytes(b"old a")
        w.path("b.bin").write_bytes(b"old b")
    real_put, puts = st.fs.put_file, []

    def put_then_die(*a, **k):
        puts.append(a)
        if len(puts) == 2:
            raise ConnectionError("killed")
        return real_put(*a, **k)

    monkeypatch.setattr(st.fs, "put_file", put_then_die)
    with pytest.raises(ConnectionError), st.writer(ref) as w:
        w.path("a.bin").write_bytes(b"new a")
        w.path("b.bin").write_bytes(b"new b")
    assert not st.is_complete(ref)


def test_a_short_script_that_reads_tables_exits_cleanly(tmp_path):
    """A script that reads a few tables through the store and ends as scripts do (the
    interpreter's own exit, no vsi_wild.process_exit) returns 0. Read through a Python file object,
    the same script aborted at exit (SIGABRT, "terminate called without an active exception") in
    about a third of the runs on this project's machines: Arrow's threads released the file
    object after the interpreter had finalised."""
    script = textwrap.dedent(
        """
        import sys
        import pyarrow as pa
        from vsi_wild.store import Store
        for root in (sys.argv[1], "memory://exit-check/root"):
            store = Store(root)
            path = store.path("t.parquet")
            if not store.exists(path):
                store.write_table_atomic(path, pa.table({"a": list(range(1000))}))
            for _ in range(5):
                assert store.read_table_at(path).num_rows == 1000
        """
    )
    runs = [
        subprocess.run([sys.executable, "-c", script, str(tmp_path / "root")], capture_output=True, text=True)
        for _ in range(16)
    ]
    failed = [(r.returncode, r.stderr[-300:]) for r in runs if r.returncode != 0]
    assert not failed, f"{len(failed)} of 16 runs ended badly: {failed[:2]}"
