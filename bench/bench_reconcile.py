"""Cross-clip reconciliation against the truth, over several sample seeds with many look-alikes.

Each seed's sample (``n_per_category`` objects per category, which look identical within a
category) goes through the engine up to the segment and pose stages with the CPU backends
(groundtruth detector and segmenter with clip-local ids, twoview poses), in one data root under
build/bench_reconcile/ (the source id names seed, count and width; the engine's cache keys hold
every parameter, so the renders and upstream outputs are reused). The reconcile stage is then run
again (forced: it measures the code as it is now) and its members are compared with the
truth: every clip-local instance is mapped to the truth object whose box it reproduces, in the
truth's own visibility table, independently of reconciliation. Prints per seed and in total:

    reconcile_false_merges_seed<s>: global instances that join different objects (extra objects joined)
    reconcile_false_splits_seed<s>: objects spread over several global instances (extra instances)
    reconcile_review_pairs_seed<s>: pairs left apart for a reviewer (decision "review")
    reconcile_false_merges_total, reconcile_false_splits_total, reconcile_review_pairs_total,
    reconcile_review_pairs_same_object_total (of those, pairs that are one object),
    reconcile_false_splits_after_review_seed<s> / _total: the false splits left once a reviewer has
        merged the review pairs that are one object (the splits no proposal points at)
    reconcile_seconds (the reconcile stage's units, all seeds)
    reconcile_truth_poses_false_merges_total, reconcile_truth_poses_false_splits_total: the same
        reconciliation with the truth's camera poses in place of the CPU backend's (the errors the
        reconciler makes by itself; the difference is the pose backend's share)

The target is 0 false merges; the command exits non-zero when there are more than
``--max-false-merges`` (0: a regression guard; met on seeds 1-60 since reconcile v8, which were
worked out on them; reconcile v11 makes 1 in the 544 views of seeds 1-136, a pose error, and none
on the 16 seeds rendered after it was fixed: docs/metadata.md) or a stage failed. ``location_error.py`` measures the located instances' errors on the same root. A
seed's first run renders its sample (about 1.5 minutes); later runs reuse it. Each seed plans its
own source alone (a broken unit of one seed fails no other, and reconcile re-runs for the seed
measured only).

Usage: python bench/bench_reconcile.py [--seeds 1 2 3 4 5 6 7 8] [--n-per-category 6] [--width 640]
                                       [--root build/bench_reconcile] [--max-false-merges 0]
                                       [--reconcile '{"pixel_error": 1}']
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The protocol, fixed before the association model was written (issue 30): its parameters are fitted
# on the training seeds only; the held-out set (other seeds, more look-alikes per category than the
# training renders) is rendered once and measured once per model version, never to choose a rule.
TRAINING_SEEDS = tuple(range(1, 17))
TRAINING_N_PER_CATEGORY = 6
HELD_OUT_SEEDS = tuple(range(1001, 1033))
HELD_OUT_N_PER_CATEGORY = 8
CATEGORIES = ["traffic cone", "trash can", "fire hydrant", "vending machine", "bench", "beach ball"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")


def bench_config(seed: int, n_per_category: int, width: int, reconcile: dict | None = None):
    """Small views and 2 FPS renders (what reconciliation sees at 2 FPS is the same), 30 s clips."""
    from vsi_wild.config import Config
    from vsi_wild.stages.backends.params import ModelsParams
    from vsi_wild.stages.candidates import CandidatesParams
    from vsi_wild.stages.detect import DetectParams
    from vsi_wild.stages.faces import FaceParams
    from vsi_wild.stages.pose import PoseParams
    from vsi_wild.stages.project import ProjectParams
    from vsi_wild.stages.reconcile import ReconcileParams
    from vsi_wild.stages.sample import SampleParams
    from vsi_wild.stages.segment import SegmentParams

    return Config(
        sample=SampleParams(source_id=f"sample-bench-s{seed}-n{n_per_category or 'layout'}-w{width}", seed=seed,
                            n_per_category=n_per_category or None, width=width,
                            fps=2.0, truth_view_width=320, truth_view_height=180),
        project=ProjectParams(width=320, height=180, preset="ultrafast"),
        faces=FaceParams(detect_every=8),
        models=ModelsParams(device="cpu"),
        candidates=CandidatesParams(embedder="minilm", seeds=CATEGORIES),
        detect=DetectParams(backend="groundtruth", max_fraction=0.8),
        segment=SegmentParams(backend="groundtruth", clip_seconds=30.0),
        pose=PoseParams(backend="twoview"),
        reconcile=ReconcileParams(**(reconcile or {})),
    )


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


def truth_of_clip_instances(segments: list[dict], visibility: list[dict], view: str) -> dict[tuple[int, int], int]:
    """(clip, local id) -> truth object: the object whose truth box (rescaled) its boxes overlap
    most, by majority over its sightings."""
    at: dict[int, list[dict]] = {}
    for r in visibility:
        if r["view"] == view:
            at.setdefault(int(r["sample_index"]), []).append(r)
    votes: dict[tuple[int, int], dict[int, int]] = {}
    for s in segments:
        box = (s["x0"], s["y0"], s["x1"], s["y1"])
        best, best_iou = None, 0.5
        for t in at.get(int(s["sample_index"]), []):
            sx, sy = s["image_width"] / t["image_width"], s["image_height"] / t["image_height"]
            iou = _iou(box, (t["x0"] * sx, t["y0"] * sy, t["x1"] * sx, t["y1"] * sy))
            if iou > best_iou:
                best, best_iou = t["instance_id"], iou
        if best is not None:
            v = votes.setdefault((int(s["clip_index"]), int(s["local_id"])), {})
            v[best] = v.get(best, 0) + 1
    return {k: max(v, key=lambda t: (v[t], -t)) for k, v in votes.items()}


def score(members: list[dict], truth_of: dict[tuple[int, int], int]) -> tuple[int, int]:
    """(false merges, false splits): objects joined beyond one per global instance, and global
    instances beyond one per object."""
    objects_of: dict[int, set[int]] = {}
    instances_of: dict[int, set[int]] = {}
    for m in members:
        key = (int(m["clip_index"]), int(m["local_id"]))
        if key not in truth_of:
            raise ValueError(f"clip instance {key} matches no truth object")
        objects_of.setdefault(m["instance_id"], set()).add(truth_of[key])
        instances_of.setdefault(truth_of[key], set()).add(m["instance_id"])
    return (sum(len(o) - 1 for o in objects_of.values()), sum(len(i) - 1 for i in instances_of.values()))


def after_review(members: list[dict], decisions: list[dict], truth_of: dict[tuple[int, int], int]) -> list[dict]:
    """``members`` once a reviewer has merged every review pair that is one object (and rejected
    the others): the instances such a pair joins become one."""
    instance_of = {(int(m["clip_index"]), int(m["local_id"])): m["instance_id"] for m in members}
    parent: dict = {}

    def root(i):
        while parent.get(i, i) != i:
            i = parent[i]
        return i

    for d in decisions:
        a, b = (int(d["clip_a"]), int(d["local_a"])), (int(d["clip_b"]), int(d["local_b"]))
        if d["decision"] == "review" and truth_of[a] == truth_of[b] and a in instance_of and b in instance_of:
            ra, rb = root(instance_of[a]), root(instance_of[b])
            if ra != rb:
                parent[rb] = ra
    return [{**m, "instance_id": root(m["instance_id"])} for m in members]


def truth_track(track, truth_poses: list[dict], view_yaw_deg: float):
    """``track`` (a view's estimated poses) with the truth's camera poses at its samples: the
    truth's world (z up, the camera ``z`` above the ground), level views turned by the view's yaw."""
    import dataclasses

    import numpy as np

    at = {round(float(r["time"]), 3): r for r in truth_poses}
    Rs, Cs = [], []
    for t in track.times:
        r = at[round(float(t), 3)]
        h = np.radians(r["yaw_deg"] + view_yaw_deg)
        right, forward = np.array([np.cos(h), -np.sin(h), 0.0]), np.array([np.sin(h), np.cos(h), 0.0])
        Rs.append(np.stack([right, [0.0, 0.0, -1.0], forward]))
        Cs.append([r["x"], r["y"], r["z"]])
    return dataclasses.replace(track, R=np.array(Rs), C=np.array(Cs), valid=np.ones(len(Rs), dtype=bool))


@dataclass
class ViewInputs:
    """What reconciliation of one view video of a bench seed reads, with the truth to score it."""

    view: str
    video_id: str
    row: dict  # its views.parquet row
    segments: list[dict]  # segments.parquet rows of its clips
    clip_rows: list[dict]  # instances.parquet rows of its clips
    clips: list  # segment.clip_spans
    track: object  # its estimated poses (pose.Track)
    truth_track: object  # the same samples with the truth's camera poses
    truth_of: dict[tuple[int, int], int]  # (clip, local id) -> truth object
    objects: dict[int, dict]  # truth object id -> truth_objects.parquet row

    def instances(self) -> list:
        """Fresh clip instances (reconciliation fills theirs in place)."""
        from vsi_wild.tasks import metadata as tm

        return tm.clip_instances_in_view(self.row, [dict(r) for r in self.clip_rows], [dict(r) for r in self.segments])


def view_inputs(store, config) -> list[ViewInputs]:
    """The four views' inputs of the bench seed ``config`` describes, read from the store's last
    completed outputs of each stage (the seed must have run up to the pose stage)."""
    from vsi_wild import ids
    from vsi_wild.stages import pose as po
    from vsi_wild.stages import segment as seg
    from vsi_wild.store import UnitRef
    from vsi_wild.tasks.sample import load_truth

    def done(stage: str, unit: str) -> UnitRef:
        st = store.read_status(stage, unit)
        if not st or st["state"] != "done":
            raise SystemExit(f"{stage}:{unit} has not run on {store.url}: run bench_reconcile.py on this seed first")
        return UnitRef(stage, unit, st["key"])

    sid = config.sample.source_id
    truth = load_truth(store, sid)
    visibility, truth_poses = truth["visibility"].to_pylist(), truth["poses"].to_pylist()
    objects = {o["instance_id"]: o for o in truth["objects"].to_pylist()}
    views = {r["video_id"]: r for r in store.read_table(done("project", sid), "views.parquet").to_pylist()}
    poses = store.read_table(done("pose", sid), "poses.parquet").to_pylist()
    status = [r for r in store.status_table().to_pylist() if r["stage"] == "segment"]
    out = []
    for view in ids.VIEWS:
        vid = ids.video_id(sid, view)
        segments, clip_rows = [], []
        for unit in sorted(r["unit"] for r in status if r["unit"].startswith(vid + "@")):
            segments += store.read_table(done("segment", unit), "segments.parquet").to_pylist()
            clip_rows += store.read_table(done("segment", unit), "instances.parquet").to_pylist()
        row = views[vid]
        track = po.track_from_rows([r for r in poses if r["video_id"] == vid])
        out.append(ViewInputs(view, vid, row, segments, clip_rows,
                              seg.clip_spans(float(row["duration_s"]), config.segment.clip_seconds), track,
                              truth_track(track, truth_poses, float(row["yaw_deg"])),
                              truth_of_clip_instances(segments, visibility, view), objects))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7, 8])
    ap.add_argument("--n-per-category", type=int, default=6, help="uniform count per category; 0: the default sample's layout")
    ap.add_argument("--width", type=int, default=640, help="equirectangular width of the rendered samples")
    ap.add_argument("--root", type=Path, default=REPO / "build" / "bench_reconcile")
    ap.add_argument("--max-false-merges", type=int, default=0, help="more than this in total fails the bench")
    ap.add_argument("--reconcile", type=json.loads, default={},
                    help='reconcile parameters to measure instead of the defaults (JSON, e.g. \'{"pixel_error": 1}\')')
    args = ap.parse_args()

    from vsi_wild.stages import reconcile as rc
    from vsi_wild.store import Store, UnitRef
    from vsi_wild.tasks import engine
    from vsi_wild.tasks import metadata as tm
    from vsi_wild.tasks.engine import Plan, Selection
    from vsi_wild.tasks.probe import PROBE
    from vsi_wild.tasks.project import PROJECT
    from vsi_wild.tasks.review import REVIEW
    from vsi_wild.tasks.sample import SAMPLE

    stages = [SAMPLE, PROBE, REVIEW, PROJECT, *(s for s in tm.STAGES if s.name != "metadata")]
    totals = {"merges": 0, "splits": 0, "review": 0, "review_same": 0, "reviewed_splits": 0, "truth_merges": 0,
              "truth_splits": 0}
    seconds = 0.0
    failed = False
    store = Store(args.root)
    for seed in args.seeds:
        config = bench_config(seed, args.n_per_category, args.width, args.reconcile)
        # this seed's source alone: the registry holds every seed's, and planning them all re-ran
        # every seed's reconcile at each seed (and let one broken unit fail every later seed)
        plan = Plan.load(config, store, stages, force=frozenset({"reconcile"}),
                         selection=Selection(frozenset({config.sample.source_id})))
        engine.run_stages(plan, stages, engine.run_inline(plan))
        seconds += sum(o.seconds for o in plan.outcomes.get("reconcile", {}).values())
        bad = {(s, u): o.error for s, units in plan.outcomes.items() for u, o in units.items() if o.state == "failed"}
        if bad:
            print(f"reconcile_seed{seed}: error {bad}", file=sys.stderr)
            failed = True
            continue
        merges = splits = review = review_same = truth_merges = truth_splits = reviewed_splits = 0
        for vi in view_inputs(store, config):
            truth_of = vi.truth_of
            # the same reconciliation with the truth's poses
            ideal = rc.reconcile(vi.video_id, vi.instances(), vi.clips, config.reconcile, vi.truth_track,
                                 camera_height=config.pose.ground_height())
            m, s = score(ideal.members, truth_of)
            truth_merges, truth_splits = truth_merges + m, truth_splits + s
            ref = UnitRef("reconcile", vi.video_id, plan.outcomes["reconcile"][vi.video_id].key)
            members = store.read_table(ref, "members.parquet").to_pylist()
            decisions = store.read_table(ref, "merge_decisions.parquet").to_pylist()
            m, s = score(members, truth_of)
            for d in decisions:
                if d["decision"] == "review":
                    review += 1
                    review_same += truth_of[(d["clip_a"], d["local_a"])] == truth_of[(d["clip_b"], d["local_b"])]
            merges, splits = merges + m, splits + s
            reviewed_splits += score(after_review(members, decisions, truth_of), truth_of)[1]
        print(f"reconcile_false_merges_seed{seed}: {merges}")
        print(f"reconcile_false_splits_seed{seed}: {splits}")
        print(f"reconcile_review_pairs_seed{seed}: {review}")
        print(f"reconcile_false_splits_after_review_seed{seed}: {reviewed_splits}")
        print(f"reconcile_truth_poses_false_merges_seed{seed}: {truth_merges}")
        print(f"reconcile_truth_poses_false_splits_seed{seed}: {truth_splits}", flush=True)
        for name, v in (("merges", merges), ("splits", splits), ("review", review), ("review_same", review_same),
                        ("reviewed_splits", reviewed_splits),
                        ("truth_merges", truth_merges), ("truth_splits", truth_splits)):
            totals[name] += v
    print(f"reconcile_false_merges_total: {totals['merges']}")
    print(f"reconcile_false_splits_total: {totals['splits']}")
    print(f"reconcile_review_pairs_total: {totals['review']}")
    print(f"reconcile_review_pairs_same_object_total: {totals['review_same']}")
    print(f"reconcile_false_splits_after_review_total: {totals['reviewed_splits']}")
    print(f"reconcile_seconds: {seconds:.0f}")
    print(f"reconcile_truth_poses_false_merges_total: {totals['truth_merges']}")
    print(f"reconcile_truth_poses_false_splits_total: {totals['truth_splits']}")
    return 1 if failed or totals["merges"] > args.max_false_merges else 0


if __name__ == "__main__":
    sys.exit(main())
