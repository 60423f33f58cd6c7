"""The metadata stages through the real engine on the embedded sample (CPU backends).

sample -> probe -> review -> project -> candidates (MiniLM) -> detect (groundtruth) -> segment
(groundtruth, clip-local ids) -> pose (twoview) -> reconcile -> metadata. Checked against the
sample's truth: reconciled counts per category equal the truth's in every view, across the revisit
of the plaza; then fix files change the derived metadata as stated and recompute only that video.
"""

from __future__ import annotations

import datetime as dt
import itertools

import pyarrow.parquet as pq
import pytest
from sample_oracle import reviewed_voc

from vsi_wild import ids
from vsi_wild.config import Config
from vsi_wild.stages.backends.params import ModelsParams
from vsi_wild.stages.candidates import CandidatesParams
from vsi_wild.stages.detect import DetectParams
from vsi_wild.stages.faces import FaceParams
from vsi_wild.stages.metadata import MetadataParams
from vsi_wild.stages.pose import LoopParams, PoseParams
from vsi_wild.stages.project import ProjectParams
from vsi_wild.stages.reconcile import ReconcileParams
from vsi_wild.stages.sample import SampleParams
from vsi_wild.stages.segment import SegmentParams
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import engine
from vsi_wild.tasks import metadata as tm
from vsi_wild.tasks.engine import Plan
from vsi_wild.tasks.probe import PROBE
from vsi_wild.tasks.project import PROJECT
from vsi_wild.tasks.review import REVIEW
from vsi_wild.tasks.sample import SAMPLE, load_truth

pytestmark = pytest.mark.slow

SID = "sample-walk"
CATEGORIES = ["traffic cone", "trash can", "fire hydrant", "vending machine", "bench", "beach ball"]


class MetaConfig(Config):
    """Config with this test's defaults (small views, CPU backends)."""

    project: ProjectParams = ProjectParams(width=320, height=180, preset="ultrafast")
    faces: FaceParams = FaceParams(detect_every=8)
    models: ModelsParams = ModelsParams(device="cpu")
    candidates: CandidatesParams = CandidatesParams(embedder="minilm", seeds=CATEGORIES + ["sofa"])
    detect: DetectParams = DetectParams(backend="groundtruth", max_fraction=0.8)
    segment: SegmentParams = SegmentParams(backend="groundtruth", clip_seconds=30.0, appearance="histogram")
    reconcile: ReconcileParams = ReconcileParams()
    pose: PoseParams = PoseParams(backend="twoview")
    metadata: MetadataParams = MetadataParams(motion_clip_seconds=30.0)


STAGES = [SAMPLE, PROBE, REVIEW, PROJECT, *tm.STAGES]


def run(store: Store, config: Config) -> Plan:
    plan = Plan.load(config, store, STAGES)
    engine.run_stages(plan, STAGES, engine.run_inline(plan))
    return plan


def outcomes(plan: Plan) -> dict[tuple[str, str], engine.Outcome]:
    return {(s, u): o for s, units in plan.outcomes.items() for u, o in units.items()}


def table(store: Store, plan: Plan, stage: str, unit: str, name: str) -> list[dict]:
    o = plan.outcomes[stage][unit]
    return store.read_table(UnitRef(stage, unit, o.key), name).to_pylist()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("meta")
    store = Store(root / "data")
    (root / "data" / "proposals").mkdir(parents=True)
    # an MLLM's proposals for one view: "couch" is a synonym of the human seed "sofa"
    (root / "data" / "proposals" / f"{SID}_front.txt").write_text("couch\nbench\n")
    config = MetaConfig(
        sample=SampleParams(source_id=SID, width=640, fps=2.0, truth_view_width=320, truth_view_height=180)
    )
    plan = run(store, config)
    failed = {k: o.error for k, o in outcomes(plan).items() if o.state == "failed"}
    assert not failed, failed
    return store, config, plan


def _kept_and_truth(store, plan, vis, view) -> tuple[dict[str, dict], dict[str, set[int]]]:
    """The detect stage's concept stats of a view, and the truth: instances of the kept concepts
    seen in this view at least once with a mask the segment stage accepts (a few pixels at the
    horizon are below any segmenter's reach)."""
    stats = {r["concept"]: r for r in table(store, plan, "detect", ids.video_id(SID, view), "concept_stats.parquet")}
    kept = {c for c, r in stats.items() if r["kept"]}
    truth: dict[str, set[int]] = {}
    for r in vis:
        if r["view"] == view and r["category"] in kept and r["pixels"] >= MetaConfig().segment.min_area:
            truth.setdefault(r["category"], set()).add(r["instance_id"])
    return stats, truth


def test_the_frequency_filter_and_the_revisit(built):
    store, _, plan = built
    vis = load_truth(store, SID)["visibility"].to_pylist()
    assert len(plan.outcomes["segment"]) == 16  # 4 views x 4 clips of 30 s
    for view in ids.VIEWS:
        stats, truth = _kept_and_truth(store, plan, vis, view)
        absent = "couch" if view == "front" else "sofa"  # the MLLM's synonym is the front view's label
        assert stats[absent]["reason"] == "dropped: never detected"
        # the plaza is seen at the start and again at the end: an object of it in the first clip and the last
        seen = {r["instance_id"] for r in vis if r["view"] == view and r["time"] < 30} & {
            r["instance_id"] for r in vis if r["view"] == view and r["time"] >= 90
        }
        assert seen & set().union(*truth.values()), view


def test_counts_per_category_equal_the_truth_across_the_revisit(built):
    """Per view, the count of a concept without a pending review item of reconciliation
    (metadata/review_pending.parquet: the decisions no person has reviewed) equals the truth's but
    for at most one in the whole build, and once an oracle reviewer has resolved the items every
    count is the truth's or over (false splits, never merges: today the right view's benches 6 of 3
    and the back view's 4 of 3, the plaza's revisit not linked; issue 30's target, all right after
    review, is not met: docs/metadata.md). The plaza's objects seen at the start and again at the end were linked,
    not counted twice, or a review item asks whether to link them."""
    store, config, plan = built
    truth_tables = load_truth(store, SID)
    vis = truth_tables["visibility"].to_pylist()

    def read(stage, unit, name):
        return store.read_table(UnitRef(stage, unit, plan.outcomes[stage][unit].key), name)

    silent, off = [], []
    for view in ids.VIEWS:
        vid = ids.video_id(SID, view)
        _, truth = _kept_and_truth(store, plan, vis, view)
        got: dict[str, int] = {}
        for r in table(store, plan, "metadata", vid, "instances.parquet"):
            got[r["concept"]] = got.get(r["concept"], 0) + 1
        ref = UnitRef("metadata", vid, plan.outcomes["metadata"][vid].key)
        pending = (
            {r["concept"] for r in store.read_table(ref, "review_pending.parquet").to_pylist()}
            if store.has_file(ref, "review_pending.parquet")
            else set()
        )
        assert set(got) == set(truth), view
        silent += [(view, c, got[c], len(v)) for c, v in truth.items() if c not in pending and got[c] != len(v)]
        _, reviewed = reviewed_voc(read, SID, view, config, truth_tables)
        off += [(view, c, reviewed[c][-1], len(v)) for c, v in truth.items() if reviewed[c][-1] != len(v)]
        # the plaza's objects seen at the start and again at the end were linked, not counted twice,
        # or a review item asks a person whether to link them
        clips_of: dict[int, set[int]] = {}
        for m in table(store, plan, "reconcile", vid, "members.parquet"):
            clips_of.setdefault(m["instance_id"], set()).add(m["clip_index"])
        asked = any(
            d["review"] and {d["clip_a"], d["clip_b"]} == {0, 3}
            for d in table(store, plan, "reconcile", vid, "merge_decisions.parquet")
        )
        assert any(0 in c and 3 in c for c in clips_of.values()) or asked, view
    assert len(silent) <= 1, silent
    assert all(0 < got - want <= 3 for _, _, got, want in off) and len(off) <= 2, off


def test_candidates_keep_the_mllm_term(built):
    store, _, plan = built
    front = {r["term"]: r for r in table(store, plan, "candidates", f"{SID}_front", "candidates.parquet")}
    assert front["sofa"]["concept"] == "couch" and front["couch"]["origin"] == "mllm"
    right = {r["term"]: r for r in table(store, plan, "candidates", f"{SID}_right", "candidates.parquet")}
    assert right["sofa"]["concept"] == "sofa"  # no proposals file for this view
    kf = table(store, plan, "candidates", f"{SID}_front", "keyframes.parquet")
    assert len(kf) == 16


def test_motion_and_view_agreement(built):
    store, _, plan = built
    for view in ids.VIEWS:
        motion = table(store, plan, "metadata", ids.video_id(SID, view), "motion.parquet")
        assert [m["clip_index"] for m in motion] == [0, 1, 2, 3]
        assert all(m["views_consistent"] for m in motion)
        assert sum(m["state"] == "ok" for m in motion) >= 3


def test_segment_writes_the_next_clips_frames_while_the_model_works(built, monkeypatch):
    """A worker runs a video's clips together (``SEGMENT.group``): while the segmenter works on one
    clip, the next clip's JPEG folder is being written by the feed thread (the segmenter waits for
    it to start: run one clip after the other and it never does), and the clips' outputs are the
    bytes they were."""
    import dataclasses
    import threading

    store, config, plan = built
    vid = ids.video_id(SID, "front")
    clips = sorted(u for u in plan.outcomes["segment"] if ids.split_clip_id(u)[0] == vid)
    assert len(clips) == 4
    fed: dict[str, threading.Event] = {u: threading.Event() for u in clips}
    real_feed = tm.feed_segment

    def feed(job):
        fed[job.unit].set()
        return real_feed(job)

    stage = dataclasses.replace(tm.SEGMENT, feed=feed)
    ahead: list[tuple[str, bool]] = []
    real_backend = engine.Job.backend

    def backend(job, kind, **options):
        segmenter = real_backend(job, kind, **options)
        real_segment = segmenter.segment
        i = clips.index(job.unit)

        def segment(batch, concepts):
            if i + 1 < len(clips):  # the next clip's feed starts while this clip is segmented
                ahead.append((job.unit, fed[clips[i + 1]].wait(timeout=60)))
            return real_segment(batch, concepts)

        segmenter.segment = segment
        return segmenter

    monkeypatch.setattr(engine.Job, "backend", backend)
    again = Plan.load(config, store, STAGES, selection=engine.Selection(frozenset([vid])), force=frozenset(["segment"]))
    engine.run_stages(again, [stage], engine.run_inline(again))
    assert ahead == [(u, True) for u in clips[:-1]]
    for u in clips:
        before, after = plan.outcomes["segment"][u], again.outcomes["segment"][u]
        assert after.state == "computed" and (after.key, after.fingerprint) == (before.key, before.fingerprint)


def test_a_loop_closure_setting_reruns_the_fusion_not_the_views_estimates(built):
    """The views' estimates (view_pose: the GPU pass in production) are keyed on the pose backend and
    its input only; the fusion and the loop closure (pose, CPU) on the whole pose section. So a
    change to pose.loops re-runs pose from the stored estimates and leaves view_pose cached; a
    change to what the backend sees (pose.chunk_frames) re-runs both."""
    store, config, plan = built
    upto = STAGES[: STAGES.index(tm.POSE) + 1]

    def rerun(pose: PoseParams) -> dict[str, engine.Outcome]:
        new = Plan.load(config.model_copy(update={"pose": pose}), store, upto)
        engine.run_stages(new, upto, engine.run_inline(new))
        return {s: new.outcomes[s][SID] for s in ("view_pose", "pose")}

    was = {s: plan.outcomes[s][SID] for s in ("view_pose", "pose")}
    loops = rerun(config.pose.model_copy(update={"loops": LoopParams(min_inliers=60)}))
    assert loops["view_pose"].state == "cached" and loops["view_pose"].key == was["view_pose"].key
    assert loops["pose"].state == "computed" and loops["pose"].key != was["pose"].key
    chunks = rerun(config.pose.model_copy(update={"chunk_frames": 48}))
    assert chunks["view_pose"].state == "computed" and chunks["view_pose"].key != was["view_pose"].key
    assert chunks["pose"].state == "computed"


def test_fix_file_changes_metadata_and_recomputes_only_that_video(built, tmp_path):
    store, config, plan = built
    vid = f"{SID}_front"
    auto = table(store, plan, "reconcile", vid, "instances_auto.parquet")
    benches = sorted(r["instance_id"] for r in auto if r["concept"] == "bench")
    fixes = store.local_root() / "fixes"
    fixes.mkdir(exist_ok=True)
    (fixes / f"{vid}.yaml").write_text(
        f"video_id: {vid}\nfixes:\n"
        f"  - op: merge\n    instances: [{benches[0]}, {benches[1]}]\n"
        f"  - op: rename_concept\n    from: traffic cone\n    to: cone\n"
        f"  - op: motion\n    clip: 1\n    state: none\n"
    )
    before = table(store, plan, "metadata", vid, "instances.parquet")
    plan2 = run(store, config)
    out = outcomes(plan2)
    recomputed = sorted(k for k, o in out.items() if o.state == "computed")
    assert recomputed == [("metadata", vid)]
    assert all(o.state == "cached" for k, o in out.items() if k != ("metadata", vid))
    after = table(store, plan2, "metadata", vid, "instances.parquet")

    def count(rows: list[dict], c: str) -> int:
        return sum(r["concept"] == c for r in rows)

    assert count(after, "bench") == count(before, "bench") - 1
    assert count(after, "cone") == count(before, "traffic cone") and count(after, "traffic cone") == 0
    motion = {m["clip_index"]: m for m in table(store, plan2, "metadata", vid, "motion.parquet")}
    assert motion[1]["state"] == "none" and motion[1]["origin"] == "fix" and motion[1]["angle_deg"] is None
    applied = table(store, plan2, "metadata", vid, "fixes_applied.parquet")
    assert [a["op"] for a in applied] == ["merge", "rename_concept", "motion"]

    # a bad fix file: that unit fails naming file, line and field; nothing else runs; the good
    # output stays in the store
    good = plan2.outcomes["metadata"][vid]
    (fixes / f"{vid}.yaml").write_text(f"video_id: {vid}\nfixes:\n  - op: merge\n    instances: [1, 999]\n")
    plan3 = run(store, config)
    o = plan3.outcomes["metadata"][vid]
    assert o.state == "failed"
    assert f"fixes/{vid}.yaml:4: field 'instances': no instance 999" in o.error
    assert all(x.state == "cached" for k, x in outcomes(plan3).items() if k != ("metadata", vid))
    assert store.is_complete(UnitRef("metadata", vid, good.key))
    assert pq.read_table(store.unit_dir(UnitRef("metadata", vid, good.key)) + "/instances.parquet").num_rows == len(
        after
    )


def test_a_review_item_a_person_renamed_apart_or_removed_a_side_of_is_resolved_everywhere(built):
    """A person renames one side of a review item apart (another name: two objects) and removes a
    side of another: the metadata stage lists neither, nor any other decision those fixes settled,
    as pending or unreviewed, and the review queue counts them done (resolved by the fixes),
    the other items still to do (stages/metadata.py: decided_apart)."""
    from vsi_wild.verify.queue import Queue
    from vsi_wild.verify.review import Review, pair_key

    store, config, plan = built
    # more review items than the fitted threshold leaves on a sample this small: the test needs two
    # with no side in common in one view (the partition, and so every instance id, is the same)
    config = config.model_copy(
        update={"reconcile": config.reconcile.model_copy(update={"review_expected_errors": 0.05})}
    )
    plan = run(store, config)

    def sides_in(of: dict, d: dict) -> tuple[int, int]:
        """The instances a decision's two clip instances belong to (``of``: clip instance -> instance)."""
        return of[(d["clip_a"], d["local_a"])], of[(d["clip_b"], d["local_b"])]

    def two_items(v: str) -> tuple[dict, dict, dict] | None:
        """Two review items of the view with no instance in common (a side of the first apart),
        and the view's clip instance -> instance."""
        of = {
            (m["clip_index"], m["local_id"]): m["instance_id"]
            for m in table(store, plan, "reconcile", v, "members.parquet")
        }
        items = [d for d in table(store, plan, "reconcile", v, "merge_decisions.parquet") if d["review"]]
        for x, y in itertools.permutations(items, 2):
            sx, sy = set(sides_in(of, x)), set(sides_in(of, y))
            if len(sx) == 2 and not sx & sy:
                return x, y, of
        return None

    vid, (renamed_item, removed_item, of) = next(
        (v, got)
        for v in (ids.video_id(SID, view) for view in ids.VIEWS if view != "front")  # front: the test above's
        if (got := two_items(v)) is not None
    )
    decisions = table(store, plan, "reconcile", vid, "merge_decisions.parquet")
    items = [d for d in decisions if d["review"]]

    def sides(d: dict) -> tuple[int, int]:
        return sides_in(of, d)

    renamed = sides(renamed_item)[1]
    removed = sides(removed_item)[0]
    fixes = f"video_id: {vid}\nfixes:\n  - op: rename_concept\n    from: {renamed_item['concept']}\n"
    fixes += f"    to: park {renamed_item['concept']}\n    instances: [{renamed}]\n"
    fixes += f"  - op: remove_instance\n    instance: {removed}\n"
    (store.local_root() / "fixes").mkdir(exist_ok=True)
    (store.local_root() / "fixes" / f"{vid}.yaml").write_text(fixes)

    def settled(d: dict) -> bool:
        a, b = sides(d)
        return removed in (a, b) or (a == renamed) != (b == renamed)

    assert settled(renamed_item) and settled(removed_item)
    plan2 = run(store, config)
    assert plan2.outcomes["metadata"][vid].state == "computed"
    ref = UnitRef("metadata", vid, plan2.outcomes["metadata"][vid].key)
    name = "review_pending.parquet"
    pending = store.read_table(ref, name).to_pylist() if store.has_file(ref, name) else []
    unreviewed = table(store, plan2, "metadata", vid, "unreviewed_decisions.parquet")
    assert {pair_key(d) for d in pending} == {pair_key(d) for d in items if not settled(d)}
    assert {pair_key(d) for d in unreviewed} == {pair_key(d) for d in decisions if not settled(d)}
    items_now = Queue(Review(config, store)).items([vid])
    queued = {i["id"].removeprefix(f"pair:{vid}:"): i for i in items_now if i["kind"] == "pair"}
    assert {k for k, i in queued.items() if i["done"]} == {pair_key(d) for d in items if settled(d)}
    assert all(i["resolved"] and i["by"] is None for i in queued.values() if i["done"])
    # reconciliation derived again after the metadata (a reconcile run alone): the metadata's list no
    # longer speaks for its review items, and only a person's review_pair would mark one done
    row = store.read_status("reconcile", vid)
    store.write_status({**row, "ended_at": store.read_status("metadata", vid)["ended_at"] + dt.timedelta(seconds=1)})
    stale = [i for i in Queue(Review(config, store)).items([vid]) if i["kind"] == "pair"]
    store.write_status(row)
    assert len(stale) == len(queued) and not any(i["done"] for i in stale)
