"""The reviewer's cost on the embedded sample: a scripted reviewer in chromium (Playwright) walks the
review queue (/queue) of the whole sample from the keyboard and the mouse, deciding every item the
way the sample's truth says, and fixes every metadata error the truth reveals.

Errors the truth reveals (per view video, the metadata after the fix files, each observation
matched to the truth mask of its timestamp by box overlap, an instance to the truth object most of
its observations match):

- split: one truth object that is k > 1 instances (k - 1 errors), merged instances of two objects,
  a missed object (seen enough to be segmented, of a kept category), an instance of no object;
- VMR: a motion clip whose direction sector is not the truth's at its pivot (truth 5 degrees or more
  from a sector edge).

The reviewer's decisions: a review pair, merge when both sides are one truth object, else keep
apart; a VOC or VOO question, first split out of an instance a clip member (shown under it) the
truth says is another object than its other members (its `split out` button), then click the
instances the truth says are one object and merge them (`m`), then accept (`y`); a VMR clip, its
truth sector's key when the automatic one is wrong, else `y`; anything else `y` or `s`. Every key
press and click is an action; each split and each merge is one fix.

Prints (`name: value`):

    review_errors_found: errors the truth reveals before the walk
    review_errors_reachable_fraction: of them, fixed by the walk through the queue (the truth
        recomputed on the saved fix files, errors matched by the truth objects they concern);
        target 1.0. What is left is listed on a `#` line
    review_actions_per_error: actions from an error's queue item to its fix, mean over the fixes
        (a split or merge each; a crossed false merge takes a split and the merges it leaves); target <= 3
    review_actions_max_per_error: the most any error took
    review_actions_per_video_minute: every action of the walk (all items) per minute of video
    review_items: queue items walked
    review_walk_s: wall time of the walk (this shared machine: a figure, not a target)

Usage: python bench/bench_review.py [--root DATA_ROOT] (default: `vsi-wild run` of
configs/sample.yaml into a temporary folder; a given root is copied, never written)
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "sample.yaml"
VIEW_YAW = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}
MATCH_IOU = 0.3


# ------------------------------------------------------------------------------ the truth
def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


class Truth:
    """The sample's truth for one data root: objects per view and timestamp, poses, kept categories."""

    def __init__(self, review, config):
        from vsi_wild.tasks.sample import load_truth

        self.config = config
        self.tables = load_truth(review.store, config.sample.source_id)
        vis = self.tables["visibility"].to_pylist()
        tw, th = vis[0]["image_width"], vis[0]["image_height"]
        self.scale = config.project.width / tw
        min_px = config.segment.min_area * (tw * th) / (config.project.width * config.project.height)
        self.by_k: dict[tuple[str, int], list[dict]] = defaultdict(list)
        self.seen: dict[str, dict[int, str]] = defaultdict(dict)  # view -> object -> category (segmentable)
        n = math.ceil(config.sample.duration_s * 2 - 1e-9)
        present: dict[tuple[str, str], set[int]] = defaultdict(set)
        for v in vis:
            self.by_k[(v["view"], v["sample_index"])].append(v)
            present[(v["view"], v["category"])].add(v["sample_index"])
        d = config.detect
        for v in vis:
            ks = present[(v["view"], v["category"])]
            kept = len(ks) >= d.min_frames and d.min_fraction <= len(ks) / n <= d.max_fraction
            if v["pixels"] >= min_px and kept:
                self.seen[v["view"]][v["instance_id"]] = v["category"]
        self.poses = sorted(self.tables["poses"].to_pylist(), key=lambda p: p["time"])

    def object_of(self, view: str, o: dict) -> int | None:
        best, who = 0.0, None
        for v in self.by_k.get((view, o["sample_index"]), []):
            s = self.scale
            x = iou((o["x0"], o["y0"], o["x1"], o["y1"]), (v["x0"] * s, v["y0"] * s, v["x1"] * s, v["y1"] * s))
            if x > best:
                best, who = x, v["instance_id"]
        return who if best >= MATCH_IOU else None

    def objects(self, view: str, observations: list[dict]) -> dict[int, int | None]:
        """instance -> the truth object most of its observations match (None: none)."""
        votes: dict[int, Counter] = defaultdict(Counter)
        for o in observations:
            if o["x0"] is not None:
                votes[o["instance_id"]][self.object_of(view, o)] += 1
        return {i: c.most_common(1)[0][0] for i, c in votes.items()}

    def sector(self, view: str, t: float) -> str | None:
        """VMR's label of the camera's direction at t (None within 5 degrees of a sector edge)."""
        from vsi_wild.stages.qa.vmr import SECTORS

        def at(x):
            return min(self.poses, key=lambda p: abs(p["time"] - x))

        a, b = at(t - 1.0), at(t + 1.0)
        dx, dy = b["x"] - a["x"], b["y"] - a["y"]
        if math.hypot(dx, dy) < 1e-6:
            return None
        angle = (math.degrees(math.atan2(dx, dy)) - at(t)["yaw_deg"] - VIEW_YAW[view]) % 360.0
        within = (angle + 22.5) % 45.0  # where in its sector, 0..45
        return SECTORS[int(((angle + 22.5) % 360) // 45)] if min(within, 45.0 - within) >= 5.0 else None


def errors(review, truth: Truth) -> list[dict]:
    """The errors the truth reveals in the metadata the saved fix files give (a dry run each)."""
    from vsi_wild.stages.qa.vmr import sector
    from vsi_wild.verify import fixfile

    out = []
    for vid, row in sorted(review.catalog.views().items()):
        view = row["view"]
        data, _ = fixfile.read(review.fix_path(vid))
        derived = review.dry_run(vid, review.render(vid, fixfile.fixes_of(data)))
        objects = truth.objects(view, derived.observations)
        concept = {r["instance_id"]: r["concept"] for r in derived.instances}
        of_object: dict[int, list[int]] = defaultdict(list)
        for i, o in objects.items():
            if o is None:
                out.append({"video": vid, "kind": "spurious", "instances": [i]})
            else:
                of_object[o].append(i)
        for o, ids in of_object.items():
            for extra in sorted(ids)[1:]:
                out.append({"video": vid, "kind": "split", "object": o, "instances": [min(ids), extra]})
        for o, category in truth.seen[view].items():
            if o not in of_object:
                out.append({"video": vid, "kind": "missed", "object": o, "category": category})
        by_inst = defaultdict(Counter)
        for ob in derived.observations:
            if ob["x0"] is not None:
                by_inst[ob["instance_id"]][truth.object_of(view, ob)] += 1
        for i, c in by_inst.items():
            two = [o for o, n in c.items() if o is not None and n >= 2]
            if len(two) >= 2:
                out.append(
                    {
                        "video": vid,
                        "kind": "merged",
                        "instances": [i],
                        "objects": sorted(two),
                        "concept": concept.get(i),
                    }
                )
        for m in derived.motion:
            if m["state"] == "ok" and m["pivot_time"] is not None:
                want = truth.sector(view, m["pivot_time"])
                if want is not None and sector(m["angle_deg"]) != want:
                    out.append({"video": vid, "kind": "vmr", "clip": m["clip_index"], "truth": want})
    return out


def member_objects(review, truth: Truth, vid: str) -> dict[tuple[int, int], int | None]:
    """Each clip-local member's truth object: its automatic instance's observations in its clip."""
    view = review.catalog.video(vid)["view"]
    _, members = review.decisions(vid)
    cs = review.config.segment.clip_seconds
    obs = defaultdict(list)
    for o in review.auto_inputs(vid).observations:
        obs[o["instance_id"]].append(o)
    out = {}
    for m in members:
        c = Counter(
            truth.object_of(view, o)
            for o in obs[m["instance_id"]]
            if m["clip_index"] * cs <= o["time"] < (m["clip_index"] + 1) * cs and o["x0"] is not None
        )
        out[(m["clip_index"], m["local_id"])] = c.most_common(1)[0][0] if c else None
    return out


def current_objects(review, truth: Truth, vid: str) -> dict[int, int | None]:
    from vsi_wild.verify import fixfile

    data, _ = fixfile.read(review.fix_path(vid))
    derived = review.dry_run(vid, review.render(vid, fixfile.fixes_of(data)))
    return truth.objects(review.catalog.video(vid)["view"], derived.observations)


def false_merge(instances: list[dict], objects: dict[tuple[int, int], int | None]) -> str | None:
    """The clip member to split out of the first instance the page shows whose members are
    different truth objects: one whose object is not the one most of its members are (ties: the
    earliest member's), as "clip:local"; None when every instance's members are one object."""
    for inst in instances:
        ms = [(m["clip"], m["local_id"]) for m in inst.get("members") or []]
        seen = Counter(objects.get(k) for k in ms if objects.get(k) is not None)
        if len(seen) >= 2:
            keep = seen.most_common(1)[0][0]
            clip, local = next(k for k in ms if objects.get(k) not in (keep, None))
            return f"{clip}:{local}"
    return None


# ------------------------------------------------------------------------------ the walk
def walk(base: str, review, truth: Truth) -> dict:
    from playwright.sync_api import sync_playwright

    from vsi_wild.stages.qa.vmr import SECTORS, sector

    chromium = os.environ.get("CHROME") or shutil.which("chromium") or "/usr/lib/chromium/chromium"
    actions, per_fix, items = 0, [], 0
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{base}/queue")
        page.wait_for_function("window.pageReady === true", timeout=120_000)
        t0 = time.time()
        while True:
            page.wait_for_function("!Z.busy", timeout=120_000)
            d = page.evaluate("Z.detail")
            if d is None:
                break
            items += 1
            vid, kind = d["video_id"], d["kind"]

            def press(key: str) -> None:
                nonlocal actions
                actions += 1
                page.keyboard.press(key)

            if kind == "pair":
                members = member_objects(review, truth, vid)
                p_ = d["pair"]
                a, b_ = members.get((p_["clip_a"], p_["local_a"])), members.get((p_["clip_b"], p_["local_b"]))
                same = a is not None and a == b_
                if same and not p_["merged"]:
                    per_fix.append(1)
                press("m" if same else "a")
            elif kind == "question" and d.get("instances"):
                split = false_merge(d["instances"], member_objects(review, truth, vid))
                if split is not None and page.locator(f'figure.member[data-member="{split}"] button.split').count():
                    # two objects in one instance: its clip member of the other object split out (1 action)
                    before = actions
                    actions += 1
                    page.click(f'figure.member[data-member="{split}"] button.split')
                    page.wait_for_function(
                        "Z.detail && !Z.busy && Z.detail.instances.some(i => i.members.length === 1 "
                        f"&& `${{i.members[0].clip}}:${{i.members[0].local_id}}` === {split!r})",
                        timeout=120_000,
                    )
                    per_fix.append(actions - before)
                    continue  # the same item again: the split-out member may now be another's duplicate
                objects = current_objects(review, truth, vid)
                groups = defaultdict(list)
                for i in d["instances"]:
                    groups[objects.get(i["instance_id"])].append(i["instance_id"])
                dup = next((ids for o, ids in groups.items() if o is not None and len(ids) >= 2), None)
                if dup is not None:  # the count is wrong: merge the instances of one object (3 actions)
                    before = actions
                    for i in sorted(dup)[:2]:
                        actions += 1
                        page.click(f'figure.inst[data-instance="{i}"] > :first-child')  # its picture
                    press("m")
                    page.wait_for_function(
                        "Z.detail && !Z.busy && !Z.detail.instances.some(i "
                        f"=> i.instance_id === {max(sorted(dup)[:2])})",
                        timeout=120_000,
                    )
                    per_fix.append(actions - before)
                    continue  # the same item again, one instance fewer
                press("y")
            elif kind == "question":
                press("y")
            elif kind == "clip":
                m = d["motion"]
                want = (
                    truth.sector(review.catalog.video(vid)["view"], m["pivot_time"])
                    if m["state"] == "ok" and m["pivot_time"] is not None
                    else None
                )
                if want is not None and sector(m["angle_deg"]) != want:
                    press(str(SECTORS.index(want) + 1))
                    per_fix.append(1)
                else:
                    press("y")
            else:
                press("s")
            page.wait_for_function(f"Z.detail === null || Z.detail.id !== {d['id']!r}", timeout=120_000)
        walk_s = time.time() - t0
        page_actions = page.evaluate("ACTIONS")
        b.close()
    return {"actions": actions, "page_actions": page_actions, "per_fix": per_fix, "items": items, "walk_s": walk_s}


def serve(root: Path, config):
    import uvicorn

    from vsi_wild.store import Store
    from vsi_wild.verify.server import create_app

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    srv = uvicorn.Server(
        uvicorn.Config(
            create_app(config, Store(root), reviewer="bench"), host="127.0.0.1", port=port, log_level="error"
        )
    )
    threading.Thread(target=srv.run, daemon=True).start()
    while not srv.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", srv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, help="a data root of configs/sample.yaml (copied; default: run the pipeline)")
    args = ap.parse_args()
    from vsi_wild.config import load_config
    from vsi_wild.store import Store
    from vsi_wild.verify.review import Review

    config = load_config(CONFIG)
    with tempfile.TemporaryDirectory(prefix="bench-review-") as tmp:
        root = Path(tmp) / "data"
        if args.root:
            shutil.copytree(args.root, root, symlinks=True, copy_function=os.link)
        else:
            run = subprocess.run(
                [
                    str(Path(sys.executable).with_name("vsi-wild")),
                    "run",
                    "-c",
                    str(CONFIG),
                    "--data-root",
                    str(root),
                    "-q",
                ],
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                print(run.stdout[-2000:], run.stderr[-2000:], file=sys.stderr)
                print("review_errors_found: error")
                return 1
        review = Review(config, Store(root))
        truth = Truth(review, config)
        before = errors(review, truth)
        base, srv = serve(root, config)
        try:
            w = walk(base, review, truth)
        finally:
            srv.should_exit = True
        after = errors(Review(config, Store(root)), truth)
        minutes = sum(float(r["duration_s"]) for r in review.catalog.views().values()) / 60.0

    # an error is the same before and after by what the truth says of it (instance ids move with fixes)
    def key(e):
        return (e["video"], e["kind"], e.get("object"), tuple(e.get("objects", [])), e.get("clip"))

    left = Counter(key(e) for e in after)
    n_fixed = sum(max(0, n - left[k]) for k, n in Counter(key(e) for e in before).items())
    print(
        f"review_errors_found: {len(before)}  # "
        + ", ".join(f"{k} {n}" for k, n in sorted(Counter(e["kind"] for e in before).items()))
    )
    print(f"review_errors_reachable_fraction: {n_fixed / len(before) if before else 1.0:.3f}")
    print(f"review_actions_per_error: {sum(w['per_fix']) / len(w['per_fix']) if w['per_fix'] else 0.0:.2f}")
    print(f"review_actions_max_per_error: {max(w['per_fix'], default=0)}")
    print(
        f"review_actions_per_video_minute: {w['actions'] / minutes:.1f}  # {w['actions']} actions "
        f"(the page counted {w['page_actions']}) over {minutes:.0f} video minutes"
    )
    print(f"review_items: {w['items']}")
    print(f"review_walk_s: {w['walk_s']:.0f}")
    if after:
        print(
            "# left after the walk: "
            + "; ".join(
                f"{e['video']} {e['kind']} {e.get('instances') or e.get('clip') or e.get('object')}" for e in after
            )
        )
    return 0  # a measurement: the figures say whether the targets are met


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # Arrow's teardown can abort a finished process (see vsi_wild/process_exit.py)
