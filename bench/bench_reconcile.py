"""Cross-clip reconciliation measured by the answers it gives, under the errors real models make.

Each seed's sample (``n_per_category`` look-alikes per category, identical within a category) goes
through the engine up to the segment and pose stages with the CPU backends (groundtruth segmenter
with clip-local ids, twoview poses) in one data root under build/bench_reconcile/ (the source id
names seed, count and width; renders are reused). ``--noise LEVEL`` applies the documented error
models of stages/model_errors.py at that level to the segmenter's tracks (the segment stage
re-runs) and to the poses reconciliation reads. Reconciliation then runs as the reconcile stage
runs it (``tasks.metadata.reconcile_view``), with the estimated poses or, with ``--truth-poses``,
the truth's (the same pose errors applied to them).

The truth: every clip instance is mapped to the truth object whose boxes it reproduces (the
truth's own visibility table, independently of reconciliation; a short false track maps to none
and is its own object). The best any reconciler can do with these clip instances is the truth
partition: each concept's instances grouped by object. Printed, summed over the seeds:

    reconcile_false_merges: objects joined beyond one per global instance
    reconcile_false_splits: global instances beyond one per object
    reconcile_silent_false_merges, reconcile_silent_false_splits: those left after an oracle
        reviewer resolved every review item correctly (errors no review item covers)
    reconcile_review_items, reconcile_review_items_per_view_minute
    reconcile_voc_accuracy_auto, reconcile_voc_accuracy_reviewed: the VOC answers (each stream
        checkpoint's count and the total, per view and concept) equal to the truth partition's,
        as exported and after the oracle reviewer
    reconcile_voc_wrong_unflagged: VOC answers as exported that are wrong and not provisional (marked as
        the qa stage marks them: stages/qa/provisional.py at qa.provisional_risk)
    reconcile_voc_provisional_fraction: the fraction of VOC answers marked provisional
    reconcile_voo_accuracy_auto, reconcile_voo_accuracy_reviewed: the same for VOO (the order of
        every 4-concept set whose first or last appearances lie >= qa.voo_min_gap_s apart)
    segmenter_voc_accuracy, segmenter_voo_accuracy: the truth partition's answers against the
        truth's own (the truth visibility table): what the segmenter's errors cost on their own
    reconcile_seconds
    reconcile_inputs_fingerprint: a digest of every output the seeds' reconciliation read (the
        renders, their views, poses and clips, by their manifests): figures are comparable only
        between runs that print the same one (renders differ in their last bits between machines)

With ``--v11 PATH`` (a checkout of commit fcba453: `git worktree add --detach PATH fcba453`) the
same lines prefixed ``reconcile_v11_`` measure that reconciler (its stages/reconcile.py, loaded
from PATH) on the same inputs; its review items are its pairs decided "review" (left apart).

The protocol (issue 30): the association model's parameters are fitted on TRAINING_SEEDS
(bench/fit_reconcile.py); HELD_OUT_SEEDS are measured once per model version, never to choose a
rule. A seed's first run renders it (about 1.5 minutes).

Usage: python bench/bench_reconcile.py [--noise none|moderate|severe] [--seeds 1 2 ...] [--truth-poses]
                                       [--n-per-category 6] [--held-out] [--v11 PATH] [--per-seed]
                                       [--root build/bench_reconcile] [--reconcile '{"review_log_odds": 3}']
                                       [--appearance histogram|open_clip]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import itertools
import json
import os
import sys
import time
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
BENCH_SEEDS = (1, 2, 3, 4, 5, 6, 7, 8)  # `make bench`: a subset of the training seeds
CATEGORIES = ["traffic cone", "trash can", "fire hydrant", "vending machine", "bench", "beach ball"]
FALSE_TRACK = -1  # truth_of: clip instances that reproduce no truth object get ids below this

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")


def bench_config(
    seed: int,
    n_per_category: int,
    width: int,
    reconcile: dict | None = None,
    noise: str = "none",
    appearance: str = "histogram",
    models: dict | None = None,
):
    """Small views and 2 FPS renders (what reconciliation sees at 2 FPS is the same), 30 s clips and
    checkpoints, the model errors of ``noise`` (seeded by the seed); ``appearance``: what
    reconciliation compares (``segment.appearance``: the colour histograms, or an image embedder,
    ``open_clip``, whose weights are read from ``$VSI_WILD_WEIGHTS`` on the GPU when there is one);
    ``models``: settings of the ``models`` section (e.g. another ``open_clip_weights``)."""
    from vsi_wild.config import Config
    from vsi_wild.stages.backends.params import ModelsParams
    from vsi_wild.stages.candidates import CandidatesParams
    from vsi_wild.stages.detect import DetectParams
    from vsi_wild.stages.faces import FaceParams
    from vsi_wild.stages.model_errors import ModelErrorParams
    from vsi_wild.stages.pose import PoseParams
    from vsi_wild.stages.project import ProjectParams
    from vsi_wild.stages.qa.params import QAParams
    from vsi_wild.stages.reconcile import ReconcileParams
    from vsi_wild.stages.sample import SampleParams
    from vsi_wild.stages.segment import SegmentParams

    return Config(
        sample=SampleParams(
            source_id=f"sample-bench-s{seed}-n{n_per_category or 'layout'}-w{width}",
            seed=seed,
            n_per_category=n_per_category or None,
            width=width,
            fps=2.0,
            truth_view_width=320,
            truth_view_height=180,
        ),
        project=ProjectParams(width=320, height=180, preset="ultrafast"),
        faces=FaceParams(detect_every=8),
        models=ModelsParams(**{"device": "cpu" if appearance == "histogram" else "auto", **(models or {})}),
        candidates=CandidatesParams(embedder="minilm", seeds=CATEGORIES),
        detect=DetectParams(backend="groundtruth", max_fraction=0.8),
        segment=SegmentParams(backend="groundtruth", clip_seconds=30.0, appearance=appearance),
        pose=PoseParams(backend="twoview"),
        reconcile=ReconcileParams(**(reconcile or {})),
        model_errors=ModelErrorParams(segmenter=noise, poses=noise, seed=seed),
        qa=QAParams(clip_seconds=30.0),
    )


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


def truth_of_clip_instances(
    segments: list[dict], visibility: list[dict], view: str, min_iou: float = 0.3
) -> dict[tuple[int, int], int]:
    """(clip, local id) -> truth object: the object whose truth box (rescaled) its boxes overlap
    most (at least ``min_iou``: a shrunk, jittered box still finds its object), by majority over its
    sightings; an instance that overlaps none (a false track) gets an id of its own below FALSE_TRACK."""
    at: dict[int, list[dict]] = {}
    for r in visibility:
        if r["view"] == view:
            at.setdefault(int(r["sample_index"]), []).append(r)
    votes: dict[tuple[int, int], dict[int, int]] = {}
    for s in segments:
        box = (s["x0"], s["y0"], s["x1"], s["y1"])
        best, best_iou = None, min_iou
        for t in at.get(int(s["sample_index"]), []):
            sx, sy = s["image_width"] / t["image_width"], s["image_height"] / t["image_height"]
            iou = _iou(box, (t["x0"] * sx, t["y0"] * sy, t["x1"] * sx, t["y1"] * sy))
            if iou > best_iou:
                best, best_iou = t["instance_id"], iou
        v = votes.setdefault((int(s["clip_index"]), int(s["local_id"])), {})
        if best is not None:
            v[best] = v.get(best, 0) + 1
    out = {}
    for n, (k, v) in enumerate(sorted(votes.items())):
        out[k] = max(v, key=lambda t: (v[t], -t)) if v else FALSE_TRACK - 1 - n
    return out


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
    embedding_rows: list[dict] | None  # embeddings.parquet rows of its clips (an image embedder configured)
    clips: list  # segment.clip_spans
    track: object  # its estimated poses (pose.Track)
    truth_track: object  # the same samples with the truth's camera poses
    truth_of: dict[tuple[int, int], int]  # (clip, local id) -> truth object
    objects: dict[int, dict]  # truth object id -> truth_objects.parquet row
    visibility: list[dict]  # the truth's visibility rows of this view
    inputs_fingerprint: str  # sha256 of the manifests of every output read (the render, its views, poses, clips)

    def instances(self) -> list:
        """Fresh clip instances (reconciliation fills theirs in place)."""
        from vsi_wild.tasks import metadata as tm

        return tm.clip_instances_in_view(
            self.row, [dict(r) for r in self.clip_rows], [dict(r) for r in self.segments], self.embedding_rows
        )


def view_inputs(store, config, refs: dict[str, dict[str, str]] | None = None) -> list[ViewInputs]:
    """The four views' inputs of the bench seed ``config`` describes: the outputs of ``refs`` (stage
    -> unit -> cache key, a plan's outcomes), else the store's last completed ones (the seed must
    have run up to the pose stage)."""
    from vsi_wild import ids
    from vsi_wild.stages import pose as po
    from vsi_wild.stages import segment as seg
    from vsi_wild.store import UnitRef
    from vsi_wild.tasks.sample import load_truth, truth_ref

    def done(stage: str, unit: str) -> UnitRef:
        if refs is not None and unit in refs.get(stage, {}):
            return UnitRef(stage, unit, refs[stage][unit])
        st = store.read_status(stage, unit)
        if not st or st["state"] != "done":
            raise SystemExit(f"{stage}:{unit} has not run on {store.url}: run bench_reconcile.py on this seed first")
        return UnitRef(stage, unit, st["key"])

    sid = config.sample.source_id
    truth = load_truth(store, sid)
    read = [truth_ref(store, sid), done("project", sid), done("pose", sid)]
    visibility, truth_poses = truth["visibility"].to_pylist(), truth["poses"].to_pylist()
    objects = {o["instance_id"]: o for o in truth["objects"].to_pylist()}
    views = {r["video_id"]: r for r in store.read_table(done("project", sid), "views.parquet").to_pylist()}
    poses = store.read_table(done("pose", sid), "poses.parquet").to_pylist()
    status = [r for r in store.status_table().to_pylist() if r["stage"] == "segment"]
    out = []
    for view in ids.VIEWS:
        vid = ids.video_id(sid, view)
        row = views[vid]
        clips = seg.clip_spans(float(row["duration_s"]), config.segment.clip_seconds)
        units = [ids.clip_id(vid, c.index) for c in clips]
        units = [u for u in units if u in {r["unit"] for r in status}]
        segments, clip_rows = [], []
        clip_refs = [done("segment", unit) for unit in units]
        embedding_rows: list[dict] | None = None if config.segment.appearance == "histogram" else []
        for ref in clip_refs:
            segments += store.read_table(ref, "segments.parquet").to_pylist()
            clip_rows += store.read_table(ref, "instances.parquet").to_pylist()
            if embedding_rows is not None:
                embedding_rows += store.read_table(ref, "embeddings.parquet").to_pylist()
        track = po.track_from_rows([r for r in poses if r["video_id"] == vid])
        out.append(
            ViewInputs(
                view,
                vid,
                row,
                segments,
                clip_rows,
                embedding_rows,
                clips,
                track,
                truth_track(track, truth_poses, float(row["yaw_deg"])),
                truth_of_clip_instances(segments, visibility, view),
                objects,
                [r for r in visibility if r["view"] == view],
                fingerprint_of(store, [*read, *clip_refs]),
            )
        )
    return out


def fingerprint_of(store, refs) -> str:
    """One digest of the outputs ``refs`` name, by their manifests (every file's sha256): two
    benches read the same inputs exactly when it is equal. Renders and the CPU backends' outputs
    differ in their last bits between machines, and figures on other inputs are not comparable."""
    h = hashlib.sha256()
    for ref in refs:
        h.update(f"{ref.stage}/{ref.unit}\0{store.fingerprint(ref)}\n".encode())
    return h.hexdigest()


def inputs_fingerprint(views: list[tuple[str, str]]) -> str:
    """The digest a run prints of everything it read: (video id, ``ViewInputs.inputs_fingerprint``)
    of every view, in the order read."""
    h = hashlib.sha256()
    for video_id, fingerprint in views:
        h.update(f"{video_id}\0{fingerprint}\n".encode())
    return h.hexdigest()[:16]


def upstream_stages() -> list:
    """The stages a bench seed runs before reconciliation (render to segment and pose)."""
    from vsi_wild.tasks import metadata as tm
    from vsi_wild.tasks.probe import PROBE
    from vsi_wild.tasks.project import PROJECT
    from vsi_wild.tasks.review import REVIEW
    from vsi_wild.tasks.sample import SAMPLE

    return [SAMPLE, PROBE, REVIEW, PROJECT, *(s for s in tm.STAGES if s.name not in ("reconcile", "metadata"))]


def prepared_views(store, config) -> list[ViewInputs] | dict:
    """Run the seed's upstream stages (cached ones are read, a first run renders) and return its
    views' inputs from exactly these outputs; the failed units (stage, unit) -> error instead."""
    from vsi_wild.tasks import engine
    from vsi_wild.tasks.engine import Plan, Selection

    stages = upstream_stages()
    plan = Plan.load(config, store, stages, selection=Selection(frozenset({config.sample.source_id})))
    engine.run_stages(plan, stages, engine.run_inline(plan))
    bad = {(s, u): o.error for s, units in plan.outcomes.items() for u, o in units.items() if o.state == "failed"}
    if bad:
        return bad
    return view_inputs(store, config, {s: {u: o.key for u, o in units.items()} for s, units in plan.outcomes.items()})


# ------------------------------------------------------------------------------------ scoring
def errors_of(groups: list[list[tuple[int, int]]], truth_of: dict) -> tuple[int, int]:
    """(false merges, false splits): objects joined beyond one per global instance, and global
    instances beyond one per object."""
    merges = sum(len({truth_of[k] for k in g}) - 1 for g in groups)
    per_object: dict[int, int] = {}
    for g in groups:
        for o in {truth_of[k] for k in g}:
            per_object[o] = per_object.get(o, 0) + 1
    return merges, sum(n - 1 for n in per_object.values())


def reviewed(
    groups: list[list[tuple[int, int]]], items: list[tuple[tuple, tuple]], truth_of: dict
) -> list[list[tuple[int, int]]]:
    """The global instances once an oracle reviewer has resolved every review item correctly: a
    pair of one object apart is merged (their instances joined), a pair of two objects merged is
    split (the second one's object leaves the instance)."""
    gid = {k: i for i, g in enumerate(groups) for k in g}
    parent = list(range(len(groups)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for a, b in items:
        if truth_of[a] == truth_of[b]:
            ra, rb = root(gid[a]), root(gid[b])
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    merged: dict[int, list] = {}
    for k, i in gid.items():
        merged.setdefault(root(i), []).append(k)
    out = [sorted(g) for g in merged.values()]
    for a, b in items:
        if truth_of[a] == truth_of[b]:
            continue
        for g in out:
            if a in g and b in g:
                leave = [k for k in g if truth_of[k] == truth_of[b]]
                out = [x for x in out if x is not g] + [[k for k in g if k not in leave], leave]
                break
    return [g for g in out if g]


def truth_groups(keys: list[tuple[int, int]], concept_of: dict, truth_of: dict) -> list[list[tuple[int, int]]]:
    out: dict[tuple, list] = {}
    for k in keys:
        out.setdefault((concept_of[k], truth_of[k]), []).append(k)
    return [sorted(g) for _, g in sorted(out.items())]


def answers(groups: list[list[tuple[int, int]]], by_key: dict, rules) -> tuple[dict, dict]:
    """(VOC answers: concept -> counts at the checkpoints, concept times: concept -> (first, last))."""
    from vsi_wild.stages.reconcile import answers as ans

    clusters = [[by_key[k] for k in g] for g in groups]
    return ans.voc_answers(clusters, rules), ans.concept_times(clusters, rules)


def voo_sets(times: dict[str, tuple[float, float]], gap: float) -> list[tuple[int, tuple[str, ...]]]:
    """(which, 4 concepts) whose first (which 0) or last (1) appearances are pairwise >= gap apart."""
    out = []
    for w in (0, 1):
        for s in itertools.combinations(sorted(times), 4):
            t = sorted(times[c][w] for c in s)
            if all(b - a >= gap and b > a for a, b in zip(t, t[1:], strict=False)):
                out.append((w, s))
    return out


def compare(got: tuple[dict, dict], want: tuple[dict, dict], sets: list) -> tuple[int, int, int, int]:
    """(VOC answers right, VOC answers, VOO answers right, VOO answers) of ``got`` against ``want``:
    each VOC checkpoint count and the total; each VOO set's order."""
    voc_got, times_got = got
    voc_want, times_want = want
    right = total = 0
    for c, counts in voc_want.items():
        g = voc_got.get(c, [0] * len(counts))
        right += sum(x == y for x, y in zip(g, counts, strict=True)) + (g[-1] == counts[-1])
        total += len(counts) + 1
    vr = 0
    for w, s in sets:
        order = sorted(s, key=lambda c: times_want[c][w])
        vr += all(c in times_got for c in s) and sorted(s, key=lambda c: times_got[c][w]) == order
    return right, total, vr, len(sets)


def truth_answers(vi: ViewInputs, concepts: set[str], min_px: float, rules) -> tuple[dict, dict]:
    """The truth's own answers for the view (its visibility table, masks of at least ``min_px``
    pixels, the concepts the clip instances hold): what a perfect segmenter and reconciler give."""
    from vsi_wild.stages.reconcile.answers import AnswerRules
    from vsi_wild.stages.segment import SAMPLE_STEP

    assert isinstance(rules, AnswerRules)
    first: dict[str, dict[int, float]] = {}
    seen: dict[int, list[tuple[int, float, float]]] = {}
    cat: dict[int, str] = {}
    for r in vi.visibility:
        if r["pixels"] < min_px or r["category"] not in concepts:
            continue
        o = int(r["instance_id"])
        cat[o] = r["category"]
        t = float(r["time"])
        first.setdefault(r["category"], {})
        first[r["category"]][o] = min(first[r["category"]].get(o, t), t)
        side = min(r["x1"] - r["x0"], r["y1"] - r["y0"]) * vi.row["width"] / r["image_width"]
        seen.setdefault(o, []).append((int(r["sample_index"]), t, side))
    cps = rules.checkpoints()
    voc = {c: [sum(1 for t in ts.values() if t <= cp + 1e-9) for cp in cps] for c, ts in first.items()}
    times: dict[str, tuple[float, float]] = {}
    for o, s in seen.items():
        runs: list[list] = []
        for k, t, side in sorted(s):
            if side < rules.min_visible_px:
                continue
            if runs and k == runs[-1][1] + 1:
                runs[-1][1], runs[-1][3] = k, t
            else:
                runs.append([k, k, t, t])
        real = [r for r in runs if (r[1] - r[0] + 1) * SAMPLE_STEP >= rules.min_visible_s - 1e-9]
        if real:
            f, last = times.get(cat[o], (real[0][2], real[-1][3]))
            times[cat[o]] = (min(f, real[0][2]), max(last, real[-1][3]))
    return voc, times


@dataclass
class VocQuestion:
    """One VOC question of a view as the qa stage marks it (``voc_questions``)."""

    concept: str
    total: bool  # the total question; else the stream question (one answer per checkpoint)
    risk: float  # provisional.answer_risk: the bound on P(any of its answers wrong)
    carrying: list  # the provisional.AtRisk decisions that bound sums
    provisional: bool  # marked as the qa stage marks it (review items, or the risk at the level)
    wrong: list[bool]  # each of its answers against the truth partition's


def voc_questions(
    members: list[dict], decisions: list[dict], video_id: str, by_key: dict, rules, got: dict, want: dict, level: float
) -> list[VocQuestion]:
    """One view's VOC questions (per concept, the stream question and the total question), marked
    as the qa stage marks them (``stages/qa/provisional.py``, from the decisions as the metadata
    stage lists them without fixes), with their answers against the truth's: each checkpoint's
    answer is the stream question's, the total the total question's; an instance is seen at its
    clip instances' times (``answers.voc_answers``)."""
    from vsi_wild.stages import fixes as fx
    from vsi_wild.stages import metadata as meta
    from vsi_wild.stages.qa import provisional
    from vsi_wild.stages.qa.readings import Seen

    none = fx.FixSet.empty(video_id)
    times: dict[int, set[float]] = {}
    for m in members:
        times.setdefault(int(m["instance_id"]), set()).update((float(m["first_time"]), float(m["last_time"])))
    concept = {int(m["instance_id"]): by_key[(int(m["clip_index"]), int(m["local_id"]))].concept for m in members}
    seen = {i: Seen(i, concept[i], tuple(sorted(ts))) for i, ts in times.items()}
    risks = provisional.at_risk(meta.unreviewed_decisions(decisions, members, none, members), seen)
    pending: dict[str, list[dict]] = {}
    for d in meta.pending_reviews(decisions, members, none, members):
        pending.setdefault(d["concept"], []).append(d)
    cps = rules.checkpoints()
    out = []
    for c, counts in want.items():
        g = got.get(c, [0] * len(counts))
        for total, query, wrong in (
            (False, cps, [x != y for x, y in zip(g, counts, strict=True)]),
            (True, [rules.duration_s], [g[-1] != counts[-1]]),
        ):
            risk, carrying = provisional.answer_risk(risks, c, query)
            flag, _ = provisional.voc_provisional(pending.get(c, []), risk, carrying, level)
            out.append(VocQuestion(c, total, risk, carrying, flag, wrong))
    return out


def provisional_answers(
    members: list[dict], decisions: list[dict], video_id: str, by_key: dict, rules, got: dict, want: dict, level: float
) -> tuple[int, int]:
    """(VOC answers wrong and not provisional, VOC answers provisional) of one view (``voc_questions``)."""
    unflagged_wrong = flagged = 0
    for q in voc_questions(members, decisions, video_id, by_key, rules, got, want, level):
        unflagged_wrong += sum(w and not q.provisional for w in q.wrong)
        flagged += q.provisional * len(q.wrong)
    return unflagged_wrong, flagged


class Tally:
    def __init__(self, provisional: bool = True):
        self.provisional = provisional  # the reconciler's decisions have posteriors to mark questions by
        self.v = dict.fromkeys(
            (
                "merges",
                "splits",
                "silent_merges",
                "silent_splits",
                "review",
                "voc_auto",
                "voc_reviewed",
                "voc_total",
                "voc_wrong_unflagged",
                "voc_provisional",
                "voo_auto",
                "voo_reviewed",
                "voo_total",
                "seconds",
            ),
            0.0,
        )

    def add(self, other: dict) -> None:
        for k, x in other.items():
            self.v[k] += x

    def lines(self, prefix: str, view_minutes: float) -> list[str]:
        v = self.v

        def acc(a: float, n: float) -> str:
            return f"{a / n:.4f}" if n else "nan"

        provisional = (
            [
                f"{prefix}voc_wrong_unflagged: {v['voc_wrong_unflagged']:.0f}",
                f"{prefix}voc_provisional_fraction: {acc(v['voc_provisional'], v['voc_total'])}",
            ]
            if self.provisional
            else []
        )
        return [
            f"{prefix}false_merges: {v['merges']:.0f}",
            f"{prefix}false_splits: {v['splits']:.0f}",
            f"{prefix}silent_false_merges: {v['silent_merges']:.0f}",
            f"{prefix}silent_false_splits: {v['silent_splits']:.0f}",
            f"{prefix}review_items: {v['review']:.0f}",
            f"{prefix}review_items_per_view_minute: {v['review'] / view_minutes:.3f}",
            f"{prefix}voc_accuracy_auto: {acc(v['voc_auto'], v['voc_total'])}",
            f"{prefix}voc_accuracy_reviewed: {acc(v['voc_reviewed'], v['voc_total'])}",
            *provisional,
            f"{prefix}voo_accuracy_auto: {acc(v['voo_auto'], v['voo_total'])}",
            f"{prefix}voo_accuracy_reviewed: {acc(v['voo_reviewed'], v['voo_total'])}",
            f"{prefix}voc_answers: {v['voc_total']:.0f}",
            f"{prefix}voo_answers: {v['voo_total']:.0f}",
            f"{prefix}seconds: {v['seconds']:.1f}",
        ]


def measure(
    members: list[dict],
    decisions: list[dict],
    vi: ViewInputs,
    by_key: dict,
    rules,
    sets: list,
    want: tuple[dict, dict],
    provisional_risk: float | None = None,
) -> dict:
    """One view's figures for one reconciler's members and decision rows; with ``provisional_risk``
    (``qa.provisional_risk``) the VOC answers marked provisional too (``provisional_answers``)."""
    groups_of: dict[int, list] = {}
    for m in members:
        groups_of.setdefault(m["instance_id"], []).append((int(m["clip_index"]), int(m["local_id"])))
    groups = [sorted(g) for _, g in sorted(groups_of.items())]
    items = [
        ((int(d["clip_a"]), int(d["local_a"])), (int(d["clip_b"]), int(d["local_b"])))
        for d in decisions
        if (d["review"] if "review" in d and d["review"] is not None else d["decision"] == "review")
    ]
    after = reviewed(groups, items, vi.truth_of)
    merges, splits = errors_of(groups, vi.truth_of)
    silent_merges, silent_splits = errors_of(after, vi.truth_of)
    got = answers(groups, by_key, rules)
    va, vt, oa, ot = compare(got, want, sets)
    vr, _, orr, _ = compare(answers(after, by_key, rules), want, sets)
    unflagged_wrong, flagged = (
        provisional_answers(members, decisions, vi.video_id, by_key, rules, got[0], want[0], provisional_risk)
        if provisional_risk is not None
        else (0, 0)
    )
    return {
        "voc_wrong_unflagged": unflagged_wrong,
        "voc_provisional": flagged,
        "merges": merges,
        "splits": splits,
        "silent_merges": silent_merges,
        "silent_splits": silent_splits,
        "review": len(items),
        "voc_auto": va,
        "voc_reviewed": vr,
        "voc_total": vt,
        "voo_auto": oa,
        "voo_reviewed": orr,
        "voo_total": ot,
    }


def load_v11(path: Path):
    """reconcile v11's module (stages/reconcile.py of a checkout of commit fcba453)."""
    file = path / "stages" / "reconcile.py"
    if not file.is_file():
        raise SystemExit(f"--v11 {path}: no stages/reconcile.py there (git worktree add --detach {path} fcba453)")
    spec = importlib.util.spec_from_file_location("reconcile_v11", file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def add_noise_argument(ap: argparse.ArgumentParser) -> None:
    """``--noise LEVEL``: the error model's level, as every reconciliation bench script takes it."""
    from vsi_wild.stages.model_errors import LEVELS

    ap.add_argument(
        "--noise",
        choices=LEVELS,
        default="none",
        help="level of the simulated segmenter and pose errors (stages/model_errors.py)",
    )


def add_training_density_argument(ap: argparse.ArgumentParser, several: bool = False) -> None:
    """``--n-per-category N``: how many look-alikes per category the training renders hold, as the
    scripts that read the training seeds take it (``several``: a list, pooled)."""
    ap.add_argument(
        "--n-per-category",
        type=int,
        nargs="+" if several else None,
        default=[TRAINING_N_PER_CATEGORY] if several else TRAINING_N_PER_CATEGORY,
        help="look-alikes per category of the training renders"
        + ("; several are pooled" if several else "")
        + f" (default {TRAINING_N_PER_CATEGORY}, the bench's; the held-out set has {HELD_OUT_N_PER_CATEGORY})",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_noise_argument(ap)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(BENCH_SEEDS))
    ap.add_argument(
        "--held-out",
        action="store_true",
        help=f"the held-out set: seeds {HELD_OUT_SEEDS[0]}-{HELD_OUT_SEEDS[-1]}, "
        f"{HELD_OUT_N_PER_CATEGORY} per category (measure once per model version)",
    )
    ap.add_argument(
        "--n-per-category",
        type=int,
        default=TRAINING_N_PER_CATEGORY,
        help="uniform count per category; 0: the default sample's layout",
    )
    ap.add_argument("--truth-poses", action="store_true", help="the truth's camera poses instead of twoview's")
    ap.add_argument("--width", type=int, default=640, help="equirectangular width of the rendered samples")
    ap.add_argument("--root", type=Path, default=REPO / "build" / "bench_reconcile")
    ap.add_argument("--v11", type=Path, default=None, help="also measure reconcile v11 from this checkout of fcba453")
    ap.add_argument("--per-seed", action="store_true", help="print each seed's figures too")
    ap.add_argument(
        "--appearance",
        default="histogram",
        help="segment.appearance: histogram (CPU) or an image embedder (open_clip: weights from $VSI_WILD_WEIGHTS)",
    )
    ap.add_argument("--models", type=json.loads, default={}, help="models section settings (JSON), e.g. weight paths")
    ap.add_argument(
        "--reconcile",
        type=json.loads,
        default={},
        help="reconcile parameters to measure instead of the defaults (JSON)",
    )
    args = ap.parse_args()
    if args.held_out:
        args.seeds, args.n_per_category = list(HELD_OUT_SEEDS), HELD_OUT_N_PER_CATEGORY

    from vsi_wild.stages import model_errors as me
    from vsi_wild.store import Store
    from vsi_wild.tasks import metadata as tm

    v11 = load_v11(args.v11) if args.v11 else None
    store = Store(args.root)
    totals, totals_v11, seg = Tally(), Tally(provisional=False), [0, 0, 0, 0]
    read: list[tuple[str, str]] = []
    view_minutes = 0.0
    failed = False
    for seed in args.seeds:
        config = bench_config(
            seed, args.n_per_category, args.width, args.reconcile, args.noise, args.appearance, args.models
        )
        views = prepared_views(store, config)
        if isinstance(views, dict):
            print(f"reconcile_seed{seed}: error {views}", file=sys.stderr)
            failed = True
            continue
        seed_tally, seed_v11 = Tally(), Tally(provisional=False)
        for vi in views:
            read.append((vi.video_id, vi.inputs_fingerprint))
            rules = tm.answer_rules(config, vi.row)
            view_minutes += float(vi.row["duration_s"]) / 60.0
            track = vi.truth_track if args.truth_poses else vi.track
            instances = vi.instances()
            by_key = {c.key: c for c in instances}
            concept_of = {c.key: c.concept for c in instances}
            want = answers(truth_groups(sorted(by_key), concept_of, vi.truth_of), by_key, rules)
            sets = voo_sets(want[1], config.qa.voo_min_gap_s)
            truth_own = truth_answers(vi, set(concept_of.values()), config.segment.min_area, rules)
            r, n, vr, vn = compare(want, truth_own, voo_sets(truth_own[1], config.qa.voo_min_gap_s))
            seg = [seg[0] + r, seg[1] + n, seg[2] + vr, seg[3] + vn]
            t0 = time.perf_counter()
            result = tm.reconcile_view(config, vi.video_id, vi.row, instances, vi.clips, track)
            fig = measure(result.members, result.decisions, vi, by_key, rules, sets, want, config.qa.provisional_risk)
            fig["seconds"] = time.perf_counter() - t0
            seed_tally.add(fig)
            if v11 is not None:
                errs = config.model_errors
                poses = me.perturb_track(track, errs.poses, me.rng_for(errs.seed, vi.video_id, "poses"))
                old = [
                    v11.ClipInstance(
                        c.clip,
                        c.local,
                        c.concept,
                        c.first_time,
                        c.last_time,
                        c.appearance,
                        c.mean_area,
                        dict(c.samples),
                    )
                    for c in vi.instances()
                ]
                t0 = time.perf_counter()
                res = v11.reconcile(
                    vi.video_id, old, vi.clips, v11.ReconcileParams(), poses, camera_height=config.pose.ground_height()
                )
                fig = measure(res.members, res.decisions, vi, by_key, rules, sets, want)
                fig["seconds"] = time.perf_counter() - t0
                seed_v11.add(fig)
        if args.per_seed:
            print(
                "\n".join(
                    f"{line.split(':')[0]}_seed{seed}:{line.split(':', 1)[1]}"
                    for line in seed_tally.lines("reconcile_", 8.0)[:6]
                ),
                flush=True,
            )
        totals.add(seed_tally.v)
        totals_v11.add(seed_v11.v)
    print("\n".join(totals.lines("reconcile_", max(view_minutes, 1e-9))))
    if v11 is not None:
        print("\n".join(totals_v11.lines("reconcile_v11_", max(view_minutes, 1e-9))))
    print(f"segmenter_voc_accuracy: {seg[0] / max(seg[1], 1):.4f}")
    print(f"segmenter_voo_accuracy: {seg[2] / max(seg[3], 1):.4f}")
    print(f"reconcile_view_minutes: {view_minutes:.1f}")
    print(f"reconcile_inputs_fingerprint: {inputs_fingerprint(read)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
