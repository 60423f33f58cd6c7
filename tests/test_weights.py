"""Weights by content: a stage's cache key holds its weight files' sha256 (remembered per file
version), not where they lie; the catalogue of where each production weight comes from; the
check the run and `vsi-wild weights check` share."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pytest

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.stages.backends import base as backends
from vsi_wild.stages.backends import params as P
from vsi_wild.stages.backends import weights as W
from vsi_wild.store import Store
from vsi_wild.tasks import engine
from vsi_wild.tasks.engine import BackendUse, Plan, Stage

ROWS = schema._schema("weight test rows", schema.f("unit", pa.string()), schema.f("n", pa.int64()))


@pytest.fixture
def folder_backend():
    """A pose estimator whose weight is a folder (as DA3's model dir), built through the model cache."""
    loads = []

    class Pose:
        def __init__(self, ctx):
            path = ctx.models.weight_path("da3_model_dir", kind="dir")
            self.model = P.load_once(("test-folder", str(path)), lambda: (loads.append(path) or object(), "cpu")).model

    backends.register(
        "pose_estimator",
        "test_folder",
        fields=("da3_model_dir",),
        weights=("da3_model_dir",),
        sources={"da3_model_dir": W.DA3_LARGE},
    )(Pose)
    yield loads
    del backends._SPECS["pose_estimator"]["test_folder"]
    P.clear_cache()
    W.forget_digests()


def _weights(root, stamp: int) -> None:
    """DA3's folder under ``root``, its files dated ``stamp``."""
    d = root / "da3" / "DA3-LARGE"
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"model": "large"}')
    (d / "model.safetensors").write_bytes(b"\x01" * 1000)
    for f in d.iterdir():
        os.utime(f, ns=(stamp, stamp))


def _stage(calls: list[str]) -> Stage:
    def run(job):
        calls.append(job.unit)
        job.backend("pose_estimator")
        job.out.write_table("t.parquet", schema.table(ROWS, [{"unit": job.unit, "n": 1}]))

    return Stage(
        "posed",
        "1",
        "source",
        run,
        outputs=(schema._parquet("t.parquet", ROWS),),
        units=lambda plan, st: plan.sources(),
        sections=("pose",),
        backends=(BackendUse("pose_estimator", "pose.backend"),),
    )


def _config(weights_dir) -> Config:
    return Config.model_validate({"pose": {"backend": "test_folder"}, "models": {"weights_dir": str(weights_dir)}})


def test_the_same_weights_elsewhere_give_the_same_keys_and_a_cache_hit(tmp_path, folder_backend):
    store = Store(tmp_path / "root")
    row = {n: None for n in schema.SOURCE.names}
    row.update(source_id="local-a-1", origin="local", path="/nonexistent/a.mp4")
    store.register_source(row)
    _weights(tmp_path / "a", 1_600_000_000_000_000_000)
    _weights(tmp_path / "b", 1_700_000_000_000_000_000)  # another folder, other times
    calls: list[str] = []
    stage = _stage(calls)

    def keys(weights_dir) -> tuple[dict[str, str], str]:
        plan = Plan.load(_config(weights_dir), store, [stage])
        return plan.backend_fingerprints(stage), plan.cache_key(stage, "local-a-1", {})

    assert keys(tmp_path / "a") == keys(tmp_path / "b")
    plan = Plan.load(_config(tmp_path / "a"), store, [stage])
    engine.run_stages(plan, [stage], engine.run_inline(plan))
    assert calls == ["local-a-1"] and plan.outcomes["posed"]["local-a-1"].state == "computed"
    plan = Plan.load(_config(tmp_path / "b"), store, [stage])
    engine.run_stages(plan, [stage], engine.run_inline(plan))
    assert calls == ["local-a-1"] and plan.outcomes["posed"]["local-a-1"].state == "cached"

    # one changed file (same size, other bytes) is another key, and the stage recomputes
    before = keys(tmp_path / "b")
    (tmp_path / "b" / "da3" / "DA3-LARGE" / "model.safetensors").write_bytes(b"\x02" * 1000)
    assert keys(tmp_path / "b")[0] != before[0] and keys(tmp_path / "b")[1] != before[1]
    plan = Plan.load(_config(tmp_path / "b"), store, [stage])
    engine.run_stages(plan, [stage], engine.run_inline(plan))
    assert calls == ["local-a-1", "local-a-1"]


def test_digests_are_computed_once_per_file_version_and_remembered_on_disk(tmp_path, monkeypatch):
    f = tmp_path / "w" / "x.pt"
    f.parent.mkdir()
    f.write_bytes(b"abc")
    digest = W.file_sha256(f, tmp_path / "w")
    assert digest == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    cache = json.loads((tmp_path / "w" / W.DIGEST_CACHE).read_text())
    assert cache[str(f.resolve())][2] == digest
    W.forget_digests()
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: opened.append(p) or real_open(p, *a, **k))
    assert W.file_sha256(f, tmp_path / "w") == digest and f not in opened  # read from the cache file
    monkeypatch.undo()
    # a folder's digest: its files by relative name, the digest cache left out
    assert W.content_digest(tmp_path / "w", tmp_path / "w") == [["x.pt", digest]]
    assert W.content_digest(tmp_path / "absent", tmp_path / "w") is None
    shutil.copy2(f, tmp_path / "y.pt")
    assert W.file_sha256(tmp_path / "y.pt", None) == digest


def test_the_check_tells_present_missing_and_wrong_checksum(tmp_path, folder_backend):
    pinned = W.WeightSource(
        files=("m.pt",),
        url="http://127.0.0.1/m.pt",
        sha256="ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    )
    (tmp_path / "m.pt").write_bytes(b"abc")
    assert W.check_weight("models.x", tmp_path / "m.pt", pinned, tmp_path).state == "present"
    (tmp_path / "m.pt").write_bytes(b"abd")
    wrong = W.check_weight("models.x", tmp_path / "m.pt", pinned, tmp_path)
    assert wrong.state == "wrong checksum" and not wrong.usable and "expected ba7816bf" in W.problem_text(wrong)
    assert W.check_weight("models.x", tmp_path / "no.pt", pinned, tmp_path).state == "missing"

    # the run's requirement check is the same check: a folder lacking a file its source lists
    spec = backends.spec("pose_estimator", "test_folder")
    models = _config(tmp_path / "w").models
    (tmp_path / "w" / "da3" / "DA3-LARGE").mkdir(parents=True)
    (tmp_path / "w" / "da3" / "DA3-LARGE" / "config.json").write_text("{}")
    (problem,) = P.backend_problems(spec, models)
    assert "missing in the folder: model.safetensors" in problem and "`models.da3_model_dir`" in problem


def test_every_production_weight_declares_where_it_comes_from():
    from vsi_wild.stages import faces  # noqa: F401  (face detectors register there)

    for kind in backends.KINDS:
        for name in backends.available(kind):
            spec = backends.spec(kind, name)
            if name.startswith("test_"):
                continue
            assert {f for f, _ in spec.sources} == set(spec.weights), (kind, name)
    clip = W.OPENAI_CLIP_VIT_B_32
    assert clip.sha256 in clip.url  # OpenAI's URL carries the file's sha256
    assert W.SAM3.gated and W.SAM3.repo_id == "facebook/sam3"
    with pytest.raises(ValueError, match="not weight fields"):
        backends.register("segmenter", "x", fields=("sam3_checkpoint",), sources={"sam3_checkpoint": W.SAM3})(
            lambda ctx: None
        )
