"""Questions with one right answer, measured against the truth: how many exported answers a
reasonable reading of the question changes.

Three samples go through the whole DAG (``vsi-wild run``, CPU backends, each in its own data root
under build/bench_ambiguity/): ``configs/sample.yaml``'s sample, and two held-out renders that only
change the renderer's parameters (``HELD_OUT``: seed, objects per category, walk length; fixed before
any stability rule was written, never changed after). Each is exported twice: with
``qa.stable_answers`` off (the questions the pipeline asked before the readings existed) and on.

Every exported answer is then derived from the sample's truth tables (TRUTH_VISIBILITY's pixel
counts, TRUTH_POSES), independently of the QA code, under each reading of the question:

- VOC: each count asked (every streaming checkpoint and every final total), counting the truth
  instances of the concept seen *at all* (any pixel) or seen *clearly* (``qa.voc_readings``' area:
  50 px of a 640x360 view) by the query time;
- VOO: the order of the 4 concepts' first or last appearances, an appearance being a *sustained*
  sighting (any pixel, ``voo_readings``' 1 s without a break) or a clear *glimpse* (one frame);
- VMR: the true direction of travel relative to the view's heading at every 2 FPS moment of the
  evidence window, judged ``qa.vmr_judgement_deg`` either way;
- VPO: the capture order of the 4 anchors, each anchor read as its moment or as any moment of another
  visit of its place (the camera back within ``qa.vpo_min_position_frac`` of the truth trajectory's
  extent after leaving), as a viewer who recognises the place but not the visit would
  (``ambiguous_items_by_visit_VPO``); and each rotated view dated by what it shows
  (``ambiguous_items_by_view_VPO``, ``vpo_views``): it must show clearly an object (by the truth's fixed
  views: its box centre inside the rotated view's field, 50 px of a 640x360 view) or a poster (each
  poster's texture is its own; rendered from the sample's world with the posters labelled, ``Posters``)
  that the question's video showed (any pixel) only between the anchors before and after it and no
  other view shows (``ambiguous_items_by_objects_VPO``: the same with objects alone).

An item is ambiguous when two readings give different answers. Prints, over the three samples:

    ambiguous_items_<task>: items whose answer differs between readings (target 0)
    items_<task>: items asked (VOC: counts; the others: questions)
    questions_<task>: release questions asked
    questions_<task>_unchecked, ambiguous_items_<task>_unchecked: the same with stable_answers off
    questions_ratio_<task>: questions / questions_unchecked (target >= 0.8)
    balanced_out_<task>, balanced_out_unchecked_<task>: release questions the export's answer balance
        (stages/qa/balance.py) left out after the readings
    offered_ratio_<task>: the same ratio before the answer balance (questions + balanced_out): the
        readings' own cost. The two differ where the balance acts on one build and not the other: a
        group of fewer than qa.answer_balance_min_n questions is left alone, so the readings can take
        a group under that floor and more questions are asked with them than without
    ambiguous_items_by_visit_VPO, ambiguous_items_by_view_VPO: VPO's ambiguous items per reading
        (ambiguous_items_by_objects_VPO: the view reading with the truth's objects alone; not in
        ambiguous_items_VPO, which counts the visit and the view reading)
    wrong_items_<task>: items whose graded answer no reading gives (metadata errors: e.g. a
        reconciliation split over-counts; not ambiguity)
and per sample the same with a ``_<sample>`` suffix. Exits 1 when a run fails.

Measured (this machine's render, the three samples together; unchecked -> checked; pose v8, its
loops closed, reconcile v16, metadata v8, qa v14; v15 only words the skipped rows): VOC 5/269 ->
0/287 counts ambiguous (the readings read the segmenter's specks, the masks under segment.min_area:
README "one right answer"), 51 -> 55 questions: more with the readings than without, as the answer
balance leaves out 11 of s908's totals without them and none with them (a group under
qa.answer_balance_min_n is left alone); it leaves out 10 of s907's either way; before the balance,
72 -> 65 (offered_ratio 0.90). The 5 wrong VOC items (3 on s907, 2 on s908, none on the sample) count
instances the metadata split or joined, not a reading.
VOO 3/45 -> 0/39; VMR 0/92 -> 0/92 (the loop's steady moves lie on the 8 directions: the rule is
exercised by tests/test_qa_readings.py); VPO 33/36 -> 0/24 by the visit reading (0.67 of the
questions). s907 asks none: it walks its loop again, every place of its first 30 s is visited at
its end, and no anchor set exists in its metadata (measured on the poses before the loop closure:
of the 2,849,585 sets of 4 of a view's 297 candidates that the gap and place conditions allow,
none keeps every anchor's other visits on its side of the others, as an enumeration of them all
shows, and so does the pipeline's own search, ``vpo.search_set``: every pair checked once, 43,956
checks a view; the candidates no other visit reaches span 36.5-109 s, less than the 90 s that 4
anchors 30 s apart need). The sample's 6 questions whose frame at 9-9.5 s the plaza's return
(110-115 s) revisits are re-drawn now that the pose stage closes its loop (its return 1.3 m from
its start on the track as by the truth; 4.7 m before). s908's 2 questions with a frame at 9.5 s
(its place passed again at 111.5-113 s, 4.94 m away by the truth: the edge of the 4.95 m radius
that a tenth of the bounding box's diagonal gave) are re-drawn since the reading allows for the
metadata's own distance error (qa.vpo_visit_error_frac, sized on the training renders; 0/24 with
it alone, qa v12, as with the radius a tenth of the diameter too, 4.64 m here, qa v13). By the view reading,
20 of the 24 VPO questions asked have a view that neither an object nor a poster dates
(ambiguous_items_by_view_VPO 20/24, 32/36 unchecked; by objects alone 24/24, measured again with pose
v8: the views' estimates stored apart, the same poses): the rotated views turned to a street's asphalt
and bricks, a hall's bare wall, or a plaza the loop crosses at both ends show nothing of their own; with
--qa-set vpo_min_landmarks=1 (measured before the loop closure) the pipeline asked 2 (sample 0,
s907 0, s908 2), 1 of them undatable by the truth.

Usage: python bench/bench_ambiguity.py [--root build/bench_ambiguity] [--only sample s907 s908] [--qa-set KEY=VALUE]
The first run renders the three samples (~10 CPU-minutes); later runs reuse them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from functools import cached_property
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")

TASKS = ("VMR", "VPO", "VOO", "VOC")
VIEW_YAW = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}
DIRECTIONS = {
    "forward": 0,
    "forward-right": 45,
    "right": 90,
    "backward-right": 135,
    "backward": 180,
    "backward-left": 225,
    "left": 270,
    "forward-left": 315,
}

# (name, sample parameters over configs/sample.yaml's): chosen before the rules, never changed after.
HELD_OUT = (
    ("s907", {"source_id": "sample-ambiguity-s907", "seed": 907, "n_per_category": 4, "duration_s": 150.0, "fps": 2.0}),
    ("s908", {"source_id": "sample-ambiguity-s908", "seed": 908, "n_per_category": 6, "duration_s": 120.0, "fps": 2.0}),
)
SAMPLES = (("sample", {}), *HELD_OUT)
CLEAR_FRAC = 50 / (640 * 360)  # "seen clearly": the readings' 50 px of a 640x360 view
BALANCE_REASON = "answer balance:"  # how stages/qa/balance.py's QA_SKIPPED rows begin


def build(
    root: Path, overrides: dict, stable: bool, qa_sets: tuple[str, ...] = ()
) -> tuple[list[dict], dict[str, int]]:
    """``vsi-wild run`` on configs/sample.yaml with the sample's overrides (the stages before qa
    cached after the first run), then qa and export again (forced: the code as it is now), each
    export without a previous ledger; the exported rows, and per task how many release questions
    the answer balance left out (``BALANCE_REASON``: the export's selection, after the readings)."""
    sets = [f"sample.{k}={v}" for k, v in overrides.items()] + [f"qa.stable_answers={str(stable).lower()}"]
    sets += [f"qa.{s}" for s in qa_sets] if stable else []
    cmd = [
        str(Path(sys.executable).with_name("vsi-wild")),
        "run",
        "-c",
        str(REPO / "configs" / "sample.yaml"),
        "--data-root",
        str(root),
        "-q",
    ]
    for s in sets:
        cmd += ["--set", s]
    for extra in ([], ["--only", "qa,export", "--force"]):
        # each export from scratch: the question ledger an export leaves (<root>/ledger) would carry the
        # other setting's selection into this one (a question left out stays out)
        shutil.rmtree(root / "ledger", ignore_errors=True)
        proc = subprocess.run(cmd + extra, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd + extra)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    import pyarrow.parquet as pq

    balanced: dict[str, int] = defaultdict(int)
    for r in pq.read_table(root / "exports" / "skipped.parquet").to_pylist():
        balanced[r["task_type"]] += r["reason"].startswith(BALANCE_REASON)
    return pq.read_table(root / "exports" / "qa.parquet").to_pylist(), dict(balanced)


# ----------------------------------------------------------------------------- the truth, per reading
class Truth:
    def __init__(self, tables: dict, params):
        self.params = params
        vis = tables["visibility"].to_pylist()
        self.size = (vis[0]["image_width"], vis[0]["image_height"]) if vis else (0, 0)
        self.pixels = self.size[0] * self.size[1]
        self.seen: dict[tuple[str, str], dict[int, list[tuple[float, int]]]] = defaultdict(lambda: defaultdict(list))
        for v in vis:
            self.seen[(v["view"], v["category"])][v["instance_id"]].append((v["time"], v["pixels"]))
        self.poses = sorted(tables["poses"].to_pylist(), key=lambda p: p["time"])
        # per 2 FPS sample: instance -> (bearing from the panorama's heading, elevation, pixels) in the
        # fixed view that shows most of it (its box centre through that view's pinhole)
        self.bearings: dict[int, dict[int, tuple[float, float, int]]] = defaultdict(dict)
        for v in vis:
            f = v["image_width"] / 2  # the sample's views are 90° wide
            u, w = (v["x0"] + v["x1"]) / 2 - v["image_width"] / 2, v["image_height"] / 2 - (v["y0"] + v["y1"]) / 2
            at = (VIEW_YAW[v["view"]] + math.degrees(math.atan2(u, f)), math.degrees(math.atan2(w, math.hypot(u, f))))
            here = self.bearings[v["sample_index"]]
            if v["pixels"] > here.get(v["instance_id"], (0, 0, -1))[2]:
                here[v["instance_id"]] = (*at, v["pixels"])

    # sightings: (min pixels, min seconds visible without a break) -> the 2 FPS times that count
    def sighted(self, view: str, concept: str, min_frac: float, min_s: float) -> dict[int, list[float]]:
        out = {}
        min_px = max(1.0, min_frac * self.pixels)
        for iid, at in self.seen[(view, concept)].items():
            times = sorted(t for t, px in at if px >= min_px - 1e-9)
            runs: list[list[float]] = []
            for t in times:
                if runs and t - runs[-1][-1] <= 0.75:
                    runs[-1].append(t)
                else:
                    runs.append([t])
            ok = [t for r in runs if len(r) * 0.5 >= min_s - 1e-9 for t in r]
            if ok:
                out[iid] = ok
        return out

    def count(self, view: str, concept: str, t: float, reading) -> int:
        seen = self.sighted(view, concept, reading.min_area_frac, reading.min_visible_s)
        return sum(1 for ts in seen.values() if ts[0] <= t + 1e-9)

    def appearance(self, view: str, concept: str, which: str, reading) -> float | None:
        seen = self.sighted(view, concept, reading.min_area_frac, reading.min_visible_s)
        if not seen:
            return None
        return min(ts[0] for ts in seen.values()) if which == "first" else max(ts[-1] for ts in seen.values())

    # poses
    def pose_at(self, t: float) -> dict:
        lo, hi = 0, len(self.poses) - 1
        while lo < hi:  # first pose at or after t
            mid = (lo + hi) // 2
            if self.poses[mid]["time"] < t:
                lo = mid + 1
            else:
                hi = mid
        cands = [self.poses[i] for i in (lo - 1, lo) if 0 <= i < len(self.poses)]
        return min(cands, key=lambda p: abs(p["time"] - t))

    def direction(self, view: str, t: float) -> float | None:
        """Travel direction relative to the view's heading at t (from t - 0.5 s to t + 0.5 s, one-sided
        at the video's ends), degrees clockwise; None when the camera hardly moves."""
        first, last = self.poses[0]["time"], self.poses[-1]["time"]
        a, b = self.pose_at(max(first, t - 0.5)), self.pose_at(min(last, t + 0.5))
        dx, dy = b["x"] - a["x"], b["y"] - a["y"]
        if math.hypot(dx, dy) < 0.1 * max(b["time"] - a["time"], 1e-9):  # under 0.1 m/s: standing
            return None
        return math.degrees(math.atan2(dx, dy)) - (self.pose_at(t)["yaw_deg"] + VIEW_YAW[view])

    @cached_property
    def extent(self) -> float:
        """The truth track's diameter on the ground (qa.vpo_min_position_frac's extent); every VPO
        question reads it, all pairs of poses once."""
        return max(math.hypot(a["x"] - b["x"], a["y"] - b["y"]) for a in self.poses for b in self.poses)


class Posters:
    """The scene's posters, what dates a rotated view besides the truth's objects: each has a texture
    of its own (stages/sample/world.py POSTER_SLOTS), the one thing on a wall a viewer can tell apart.
    The truth tables hold objects only, so the sample's world is built again (``build_world``, the
    sample's own parameters) with each poster's quad labelled, and its label buffers rendered: each
    fixed view's at every 2 FPS pose of the truth (when the video showed each poster) and each
    rotated view's at its anchor (what the view shows)."""

    LABEL = 1 << 22  # a poster's label here: LABEL + its slot (objects: their ids; faces: 1 << 20 + id)

    def __init__(self, sample, truth: Truth):
        from dataclasses import replace

        from vsi_wild.stages.sample.render import Camera, Renderer
        from vsi_wild.stages.sample.world import QUAD, build_world

        world = build_world(sample.seed, sample.route, sample.n_per_category, sample.faces)
        slot = {world.atlas.index(n): int(n[len("poster") :]) for n in world.atlas.names if n.startswith("poster")}
        labels = world.plabel.copy()
        for k in range(len(labels)):
            tex = int(world.mtex[world.pmat[k, 0]])
            if world.ptype[k] == QUAD and tex in slot:
                labels[k] = self.LABEL + slot[tex]
        self.renderer = Renderer(replace(world, plabel=labels))
        self.camera = Camera
        self.size = truth.size
        self.clear = CLEAR_FRAC * truth.size[0] * truth.size[1]
        self.truth = truth
        # (view, poster) -> the 2 FPS times the fixed view shows it (any pixel)
        self.seen: dict[str, dict[int, list[float]]] = {v: defaultdict(list) for v in VIEW_YAW}
        cams = {v: Camera.view(*truth.size, 90.0, yaw) for v, yaw in VIEW_YAW.items()}
        for pose in truth.poses:
            if abs(pose["time"] * 2 - round(pose["time"] * 2)) > 1e-6:
                continue  # the 2 FPS moments only
            for v, cam in cams.items():
                for lab, _n in self._labels(cam, pose).items():
                    self.seen[v][lab].append(pose["time"])

    def _labels(self, cam, pose: dict) -> dict[int, int]:
        _, ids = self.renderer.render(cam, pose["x"], pose["y"], pose["z"], pose["yaw_deg"], want_rgb=False)
        labs, counts = np.unique(ids[ids >= self.LABEL], return_counts=True)
        return {int(a): int(c) for a, c in zip(labs, counts, strict=True)}

    def shown(self, t: float, yaw_deg: float, hfov_deg: float) -> set[int]:
        """The posters the view of the panorama at ``t`` turned to ``yaw_deg`` shows clearly."""
        cam = self.camera.view(*self.size, hfov_deg, yaw_deg)
        return {lab for lab, n in self._labels(cam, self.truth.pose_at(t)).items() if n >= self.clear}


def label(angle: float) -> str:
    """The nearest of the 8 directions (largest cosine)."""
    return max(DIRECTIONS, key=lambda k: math.cos(math.radians(angle - DIRECTIONS[k])))


# ----------------------------------------------------------------------------- items
def items(
    rows: list[dict], truth: Truth, posters: Posters | None = None
) -> list[tuple[str, bool, bool, tuple[str, ...]]]:
    """(task, ambiguous, wrong, the readings that make it ambiguous where a task tells them apart)
    per item of the release rows and the VOC stream rows."""
    p = truth.params
    out = []
    for r in rows:
        task, view = r["task_type"], r["view"]
        if task == "VOC" and r["split"] in ("release", "voc_stream"):
            for qt, ans in zip(r["query_times"], r["answers"], strict=True):
                counts = {truth.count(view, r["concepts"][0], qt, rd) for rd in p.voc_readings}
                out.append((task, len(counts) > 1, int(ans) not in counts, ()))
        elif r["split"] != "release":
            continue
        elif task == "VOO":
            orders = set()
            for rd in p.voo_readings:
                times = {c: truth.appearance(view, c, r["subtype"], rd) for c in r["concepts"]}
                orders.add(
                    None if None in times.values() else " → ".join(sorted(r["concepts"], key=lambda c: (times[c], c)))
                )
            out.append((task, len(orders) > 1, r["answer_text"] not in orders, ()))
        elif task == "VMR":
            t, w = r["frame_times"][0], p.vmr_evidence_s
            # the evidence window's 2 FPS moments that the video shows (its last frame is before duration_s)
            lo, hi = max(0.0, t - w), min(r["duration_s"], t + w, truth.poses[-1]["time"])
            labels = set()
            for k in range(math.ceil(lo * 2 - 1e-9), math.floor(hi * 2 + 1e-9) + 1):
                a = truth.direction(view, k / 2)
                labels |= (
                    {None} if a is None else {label(a + d) for d in (-p.vmr_judgement_deg, 0.0, p.vmr_judgement_deg)}
                )
            out.append((task, len(labels) > 1, r["answer_text"] not in labels, ()))
        elif task == "VPO":
            by_visit, wrong = vpo_item(r, truth)
            by_objects = vpo_views(r, truth)
            by_view = by_objects and (posters is None or vpo_views(r, truth, posters))
            why = (
                (("visit",) if by_visit else ()) + (("view",) if by_view else ()) + (("objects",) if by_objects else ())
            )
            out.append((task, by_visit or by_view, wrong, why))
    return out


def vpo_views(r: dict, truth: Truth, posters: Posters | None = None) -> bool:
    """A rotated view that does not show its place: ambiguous unless every view shows clearly (the
    readings' 50 px of a 640x360 view, its box centre inside the view's field) an object that the
    question's video showed (any pixel) only between the anchors before and after it, and that no
    other view of the question shows. Read from the truth's fixed views, not the metadata. With
    ``posters``, a poster so shown (rendered: ``Posters``) dates a view as an object does."""
    times, view = r["frame_times"], r["view"]
    half_w = r["render_hfov_deg"] / 2
    w, h = truth.size
    half_h = math.degrees(math.atan(math.tan(math.radians(half_w)) * h / w))
    clear = CLEAR_FRAC * w * h

    def shown(t: float, offset: float) -> set[int]:
        axis = VIEW_YAW[view] + offset  # the view's bearing from the panorama's heading, as the truth's are
        return {
            iid
            for iid, (az, el, px) in truth.bearings[round(t * 2)].items()
            if px >= clear and abs((az - axis + 180) % 360 - 180) < half_w and abs(el) < half_h
        }

    seen: dict[int, list[float]] = {}
    for (v, _c), per in truth.seen.items():
        if v == view:
            for iid, at in per.items():
                seen[iid] = [t for t, _px in at]
    views = [shown(t, o) for t, o in zip(times, r["render_offset_deg"], strict=True)]
    if posters is not None:
        for i, (t, yaw) in enumerate(zip(times, r["render_yaw_deg"], strict=True)):
            views[i] |= posters.shown(t, yaw, r["render_hfov_deg"])
        seen.update(posters.seen[view])
    ranked = sorted(times)
    for i, t in enumerate(times):
        k = ranked.index(t)
        lo = ranked[k - 1] if k else -math.inf
        hi = ranked[k + 1] if k + 1 < len(ranked) else math.inf
        others = set().union(*(views[j] for j in range(len(times)) if j != i))
        if not any(lo < min(seen[x]) and max(seen[x]) < hi for x in views[i] - others if x in seen):
            return True
    return False


def vpo_item(r: dict, truth: Truth) -> tuple[bool, bool]:
    """Each anchor read as its own moment or as any moment of another visit of its place (the
    camera back within the place radius after leaving it): ambiguous when such a moment of one
    anchor lies on the other side of another anchor."""
    radius = truth.params.vpo_min_position_frac * truth.extent
    times = r["frame_times"]
    readings = []
    for t in times:
        here = truth.pose_at(t)
        near = [math.hypot(p["x"] - here["x"], p["y"] - here["y"]) < radius for p in truth.poses]
        i = truth.poses.index(here)
        lo, hi = i, i
        while lo > 0 and near[lo - 1]:
            lo -= 1
        while hi < len(near) - 1 and near[hi + 1]:
            hi += 1
        readings.append([t] + [p["time"] for j, p in enumerate(truth.poses) if near[j] and not lo <= j <= hi])
    truth_answer = " → ".join(f"Frame {i + 1}" for i in sorted(range(4), key=lambda i: times[i]))
    ambiguous = any(
        (times[a] < times[b]) != (x < y)
        for a in range(4)
        for b in range(4)
        if a != b
        for x in readings[a]
        for y in (times[b],)
    )
    return ambiguous, r["answer_text"] != truth_answer


# ----------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=REPO / "build" / "bench_ambiguity")
    ap.add_argument("--only", nargs="+", choices=[n for n, _ in SAMPLES], default=[n for n, _ in SAMPLES])
    ap.add_argument(
        "--qa-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a qa parameter for the checked build (e.g. vpo_min_landmarks=1); the unchecked build keeps the config's",
    )
    args = ap.parse_args()
    from vsi_wild.config import load_config
    from vsi_wild.store import Store
    from vsi_wild.tasks.sample import load_truth

    params = load_config(REPO / "configs" / "sample.yaml").qa
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    failed = 0
    for name, overrides in SAMPLES:
        if name not in args.only:
            continue
        root = args.root / name
        try:
            before, balanced_before = build(root, overrides, stable=False)
            after, balanced_after = build(root, overrides, stable=True, qa_sets=tuple(args.qa_set))
        except RuntimeError as e:
            print(f"ambiguity_{name}: error {e}", file=sys.stderr)
            failed += 1
            continue
        store = Store(root)
        (source,) = store.registry()["source_id"].to_pylist()
        truth = Truth(load_truth(store, source), params)
        sample = load_config(REPO / "configs" / "sample.yaml", {f"sample.{k}": v for k, v in overrides.items()}).sample
        posters = Posters(sample, truth)
        figures: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for label_, rows, balanced in (("", after, balanced_after), ("_unchecked", before, balanced_before)):
            for task in TASKS:
                figures[task][f"balanced_out{label_}"] += balanced.get(task, 0)
            for task, ambiguous, wrong, why in items(rows, truth, posters):
                figures[task][f"ambiguous_items{label_}"] += ambiguous
                if task == "VPO":  # each reading apart (an item may fall under both)
                    for kind in ("visit", "view", "objects"):
                        figures[task][f"ambiguous_items_by_{kind}{label_}"] += kind in why
                figures[task][f"items{label_}"] += 1
                figures[task][f"wrong_items{label_}"] += wrong
            for r in rows:
                if r["split"] == "release":
                    figures[r["task_type"]][f"questions{label_}"] += 1
        for task in TASKS:
            for k, v in sorted(figures[task].items()):
                print(f"{k}_{task}_{name}: {v}")
                totals[task][k] += v
        skipped = json.loads((root / "exports" / "counts.json").read_text()).get("readings_dropped", {})
        print(f"readings_dropped_{name}: {json.dumps(skipped, sort_keys=True)}", flush=True)
    for task in TASKS:
        f = totals[task]
        for k in (
            "ambiguous_items",
            "items",
            "questions",
            "wrong_items",
            "ambiguous_items_unchecked",
            "items_unchecked",
            "questions_unchecked",
            "wrong_items_unchecked",
            "balanced_out",
            "balanced_out_unchecked",
        ):
            print(f"{k}_{task}: {f[k]}")
        if task == "VPO":
            for k in sorted(k for k in f if k.startswith("ambiguous_items_by_")):
                print(f"{k}_{task}: {f[k]}")
        ratio = f["questions"] / f["questions_unchecked"] if f["questions_unchecked"] else float("nan")
        print(f"questions_ratio_{task}: {ratio:.2f}")
        offered, offered_unchecked = (
            f["questions"] + f["balanced_out"],
            f["questions_unchecked"] + f["balanced_out_unchecked"],
        )
        print(f"offered_ratio_{task}: {offered / offered_unchecked if offered_unchecked else float('nan'):.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
