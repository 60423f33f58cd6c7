"""Reconciliation's appearance term from image embeddings: open_clip's image tower (random weights,
built offline, saved as the file the production loader reads), the crops the segment stage embeds,
the term's direction, and ``segment.appearance`` reaching ``associate`` (histogram on the CPU path,
the embedding's cosine otherwise)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import random_weights

from vsi_wild import ids, schema
from vsi_wild.config import Config
from vsi_wild.errors import MissingWeights
from vsi_wild.stages import reconcile as rc
from vsi_wild.stages import segment as seg
from vsi_wild.stages.backends import params as P
from vsi_wild.stages.backends.base import FrameBatch, SegmentRecord, create
from vsi_wild.stages.reconcile import answers as ans
from vsi_wild.stages.reconcile import associate as asc
from vsi_wild.stages.reconcile import locate as loc
from vsi_wild.tasks import metadata as tm

W, H = 320, 180


@pytest.fixture(scope="module")
def random_clip(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("clip")
    return random_weights.clip_state_dict(d / "state.pt"), d


@pytest.fixture(scope="module")
def embedder(random_clip):
    _, d = random_clip
    return create("image_embedder", "open_clip", device="cpu", weights_dir=str(d), open_clip_weights="state.pt")


def _reference_image(model, crops: list[np.ndarray]) -> np.ndarray:
    """open_clip's own preprocessing (create_model_and_transforms' eval transform) and image
    encoding of the crops, normalised: what the adapter must reproduce."""
    import open_clip
    import torch
    from PIL import Image

    _, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None, force_quick_gelu=True)
    with torch.no_grad():
        f = model.encode_image(torch.stack([preprocess(Image.fromarray(c)) for c in crops])).float()
    return (f / f.norm(dim=-1, keepdim=True)).numpy()


def _crops() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.integers(0, 256, size=s, dtype=np.uint8) for s in ((40, 30, 3), (224, 224, 3), (17, 90, 3))]


def test_open_clip_image_tower_embeds_crops_as_open_clip_does_and_deterministically(random_clip, embedder):
    model, d = random_clip
    crops = _crops()
    got = embedder.embed(crops)
    assert got.shape == (3, embedder.dim) and embedder.dim == 512 and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got, _reference_image(model, crops), atol=1e-5)
    assert np.array_equal(embedder.embed(crops), got)  # the same crops again
    P.clear_cache()  # a fresh load of the same file
    again = create("image_embedder", "open_clip", device="cpu", weights_dir=str(d), open_clip_weights="state.pt")
    assert np.array_equal(again.embed(crops), got)
    assert embedder.embed([]).shape == (0, 512)


def test_open_clip_image_embedder_without_weights_names_the_path_and_key(tmp_path):
    with pytest.raises(MissingWeights) as e:
        create("image_embedder", "open_clip", device="cpu", weights_dir=str(tmp_path))
    assert "models.open_clip_weights" in str(e.value) and str(tmp_path / "clip/ViT-B-32.pt") in str(e.value)


# ------------------------------------------------------------------------------ the segment stage's crops
def _clip_batch() -> tuple[FrameBatch, list[SegmentRecord]]:
    """Four frames: a red block (local 1) growing, cut by the right border in the last frame where
    it is largest; a blue block (local 2) in frames 1 and 3."""
    images, records = [], []
    for pos, (x0, w) in enumerate([(40, 30), (50, 40), (60, 50), (250, 80)]):
        img = np.full((H, W, 3), 90, np.uint8)
        m = np.zeros((H, W), bool)
        m[60:140, x0 : min(x0 + w, W)] = True
        img[m] = (200, 30, 30)
        records.append(SegmentRecord(pos, "bin", 1, (0, 0, 0, 0), 0.9, m))
        if pos % 2:
            b = np.zeros((H, W), bool)
            b[20:60, 150:190] = True
            img[b] = (30, 30, 200)
            records.append(SegmentRecord(pos, "bin", 2, (0, 0, 0, 0), 0.9, b))
        images.append(img)
    return FrameBatch(
        "sample-x_front", images, [0.5 * k for k in range(4)], list(range(4)), list(range(4)), 2.0
    ), records


def test_each_clip_instance_is_embedded_from_its_largest_whole_sightings(embedder):
    batch, records = _clip_batch()
    seg_rows, inst_rows, _ = seg.clip_tables("sample-x_front", 0, batch, records, "test", seg.SegmentParams())
    chosen = seg.best_sightings(seg_rows, 2)
    assert [r["sample_index"] for r in chosen[("bin", 1)]] == [2, 1]  # the border cuts sample 3's box
    rows = seg.embedding_rows("sample-x_front", 0, batch, seg_rows, embedder, 2)
    schema.table(schema.CLIP_EMBEDDINGS, rows)  # the declared columns and types
    by_local = {r["local_id"]: r for r in rows}
    assert sorted(by_local) == [1, 2] and {r["embedder"] for r in rows} == {"open_clip"}
    assert by_local[1]["n_crops"] == 2 and by_local[2]["n_crops"] == 2
    red = [
        seg.crop(np.asarray(batch.images[k]), (r["x0"], r["y0"], r["x1"], r["y1"]))
        for k, r in ((2, chosen[("bin", 1)][0]), (1, chosen[("bin", 1)][1]))
    ]
    mean = embedder.embed(red).astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(by_local[1]["embedding"], mean / np.linalg.norm(mean), atol=1e-6)
    assert len(by_local[2]["embedding"]) == embedder.dim
    # the crop holds the box and a tenth of its size around it, within the image
    c = seg.crop(np.zeros((H, W, 3), np.uint8), (250.0, 60.0, 320.0, 140.0))
    assert c.shape == (math.ceil(140 + 8) - math.floor(60 - 8), W - math.floor(250 - 7), 3)


# ------------------------------------------------------------------------------ the association term
def _instance(clip: int, local: int, k: int, embedding: np.ndarray | None, hist: np.ndarray) -> rc.ClipInstance:
    obs = {k: rc.Obs(k * 0.5, (100.0, 100.0, 120.0, 140.0), 800, 4 * k, 8.0, (W, H))}
    ci = rc.ClipInstance(clip, local, "bin", k * 0.5, k * 0.5, hist, 800.0, obs, embedding=embedding)
    ci.where = loc.Located(np.array([0.0, 5.0]), np.eye(2) * 0.3**2, 8.0, 0.0, "ground")
    return ci


def test_identical_crops_score_higher_than_different_ones(embedder):
    """Three sightings of a bin at one place: b's crop is a's, c's another image. With a positive
    appearance weight the pair that looks identical gets the higher appearance term and log odds;
    with the weight at 0 the term is 0 for both."""
    red, other = _crops()[1], _crops()[2]
    e_a, e_b, e_c = embedder.embed([red, red, other])
    hist = np.ones(72)
    a, b, c = _instance(0, 1, 10, e_a, hist), _instance(1, 1, 80, e_b, hist), _instance(2, 1, 150, e_c, hist)
    rules = ans.AnswerRules(120.0, 30.0)
    params = rc.ReconcileParams(appearance_weight=4.0)
    _, decided = asc.associate([a, b, c], {}, lambda k0, k1: 0.0, params, rules, appearance="embedding")
    pair = {(d.ev.a.key, d.ev.b.key): d for d in decided}
    same, differ = pair[(a.key, b.key)], pair[(a.key, c.key)]
    assert same.ev.appearance == pytest.approx(1.0, abs=1e-6) and differ.ev.appearance < same.ev.appearance
    assert same.terms["llr_appearance"] > differ.terms["llr_appearance"]
    assert differ.terms["llr_appearance"] == pytest.approx(4.0 * (differ.ev.appearance - 1.0))
    assert same.log_odds > differ.log_odds
    _, unweighted = asc.associate(
        [a, b, c], {}, lambda k0, k1: 0.0, rc.ReconcileParams(appearance_weight=0.0), rules, appearance="embedding"
    )
    assert {d.terms["llr_appearance"] for d in unweighted} == {0.0}
    # an instance without an embedding has no appearance term under "embedding"
    a.embedding = None
    _, decided = asc.associate([a, b], {}, lambda k0, k1: 0.0, params, rules, appearance="embedding")
    assert decided[0].terms["llr_appearance"] is None and decided[0].ev.appearance is None


def test_segment_appearance_chooses_what_reconcile_compares():
    """The same two instances reconciled as the reconcile stage does (``tasks.metadata.reconcile_view``):
    with ``segment.appearance: histogram`` the decision row's appearance is the histograms'
    Bhattacharyya coefficient, with ``open_clip`` the embeddings' cosine, and llr_appearance follows."""
    rng = np.random.default_rng(1)
    h1, h2 = rng.random(72), rng.random(72)
    e1, e2 = rng.normal(size=512), rng.normal(size=512)
    e1, e2 = e1 / np.linalg.norm(e1), e2 / np.linalg.norm(e2)
    view = {"duration_s": 120.0}
    clips = seg.clip_spans(120.0, 30.0)
    got = {}
    for setting in ("histogram", "open_clip"):
        config = Config.model_validate(
            {"segment": {"appearance": setting, "clip_seconds": 30.0}, "reconcile": {"appearance_weight": 3.0}}
        )
        instances = [_instance(0, 1, 10, e1, h1), _instance(2, 1, 150, e2, h2)]
        (row,) = tm.reconcile_view(config, "sample-x_front", view, instances, clips, None).decisions
        got[setting] = row
    assert got["histogram"]["appearance"] == pytest.approx(seg.bhattacharyya(h1, h2))
    assert got["open_clip"]["appearance"] == pytest.approx(float(e1 @ e2))
    for row in got.values():
        assert row["llr_appearance"] == pytest.approx(3.0 * (row["appearance"] - 1.0))
    assert got["histogram"]["appearance"] != pytest.approx(got["open_clip"]["appearance"])


# ------------------------------------------------------------------------------ through the engine
@pytest.mark.slow
def test_the_segment_stage_embeds_each_instance_and_reconcile_compares_the_embeddings(random_clip, tmp_path):
    """The small sample up to reconcile with ``segment.appearance: open_clip``: without the weight
    file the segment stage does not start and says which file and key; with it, every clip instance
    has a unit-length embedding of the image tower's width, and every decision row's appearance is
    the cosine of its two instances' embeddings."""
    from conftest import small_sample_config

    from vsi_wild.config import load_config
    from vsi_wild.store import Store, UnitRef
    from vsi_wild.tasks import engine
    from vsi_wild.tasks.probe import PROBE
    from vsi_wild.tasks.project import PROJECT
    from vsi_wild.tasks.review import REVIEW
    from vsi_wild.tasks.sample import SAMPLE

    _, weights = random_clip
    stages = [SAMPLE, PROBE, REVIEW, PROJECT, *(s for s in tm.STAGES if s.name != "metadata")]
    path = small_sample_config(tmp_path / "c.yaml", tmp_path / "data")
    store = Store(tmp_path / "data")

    def run(weights_dir):
        overrides = {
            "segment.appearance": "open_clip",
            "models.device": "cpu",
            "models.weights_dir": str(weights_dir),
            "detect.max_fraction": 1.0,  # 16 s of video: every object is in view most of the time
        }
        config = load_config(path, {**overrides, "models.open_clip_weights": "state.pt"})
        plan = engine.Plan.load(config, store, stages)
        engine.run_stages(plan, stages, engine.run_inline(plan))
        return plan

    plan = run(tmp_path / "no-weights")
    (failure,) = engine.summarize(plan, str(tmp_path))["failed"]
    assert failure["stage"] == "segment" and "units not started" in failure["unit"]
    assert (
        "models.open_clip_weights" in failure["error"] and str(tmp_path / "no-weights" / "state.pt") in failure["error"]
    )

    plan = run(weights)
    assert not engine.summarize(plan, str(tmp_path))["failed"]
    embedding = {}
    for unit, o in plan.outcomes["segment"].items():
        ref = UnitRef("segment", unit, o.key)
        keys = {(r["clip_index"], r["local_id"]) for r in store.read_table(ref, "instances.parquet").to_pylist()}
        rows = store.read_table(ref, "embeddings.parquet").to_pylist()
        assert {(r["clip_index"], r["local_id"]) for r in rows} == keys
        for r in rows:
            e = np.asarray(r["embedding"], dtype=np.float64)
            assert r["embedder"] == "open_clip" and 1 <= r["n_crops"] <= 4 and e.shape == (512,)
            assert np.linalg.norm(e) == pytest.approx(1.0, abs=1e-5)
            embedding[(ids.split_clip_id(unit)[0], r["clip_index"], r["local_id"])] = e
    compared = 0
    for vid, o in plan.outcomes["reconcile"].items():
        for d in store.read_table(UnitRef("reconcile", vid, o.key), "merge_decisions.parquet").to_pylist():
            ea, eb = embedding[(vid, d["clip_a"], d["local_a"])], embedding[(vid, d["clip_b"], d["local_b"])]
            assert d["appearance"] == pytest.approx(float(ea @ eb), abs=1e-5)
            compared += 1
    assert len(embedding) >= 8 and compared >= 4


def test_histogram_builds_no_image_embedder_and_open_clip_checks_its_weight(tmp_path):
    """``segment.appearance: histogram`` (the CPU path) needs no model: no requirement, no
    fingerprint in the segment stage's key; ``open_clip`` needs the configured CLIP file."""
    from vsi_wild.store import Store
    from vsi_wild.tasks import registry
    from vsi_wild.tasks.engine import Plan

    def plan(setting: str) -> Plan:
        config = Config.model_validate(
            {"segment": {"backend": "groundtruth", "appearance": setting}, "models": {"weights_dir": str(tmp_path)}}
        )
        return Plan.load(config, Store(tmp_path / "root"), registry.STAGES)

    hist, clip = plan("histogram"), plan("open_clip")
    assert hist.requirement_problems(tm.SEGMENT) == []
    (problem,) = clip.requirement_problems(tm.SEGMENT)
    assert "`models.open_clip_weights`" in problem and str(tmp_path / "clip" / "ViT-B-32.pt") in problem
    assert set(hist.backend_fingerprints(tm.SEGMENT)) == {"segment.backend"}
    assert set(clip.backend_fingerprints(tm.SEGMENT)) == {"segment.backend", "segment.appearance"}
