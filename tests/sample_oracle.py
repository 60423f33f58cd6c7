"""What the embedded sample's truth says the QA rules must produce, derived from the truth tables
(TRUTH_VISIBILITY, TRUTH_POSES) and the config alone, never through the QA code. Shared by
tests/test_qa_sample.py and tests/test_sample_oracle.py."""

from __future__ import annotations

import itertools
import math

import pyarrow.compute as pc

VIEW_YAW = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}


def min_pixels(config, truth) -> float:
    """segment.min_area (view pixels) in the truth's pixels."""
    v = truth["visibility"]
    tw, th = v["image_width"][0].as_py(), v["image_height"][0].as_py()
    return config.segment.min_area * (tw * th) / (config.project.width * config.project.height)


def visible(truth, view, min_px: float = 1) -> list[dict]:
    """(time, instance_id, category) of every truth mask of ``view`` with at least ``min_px`` pixels."""
    v = truth["visibility"]
    v = v.filter(pc.and_(pc.equal(v["view"], view), pc.greater_equal(v["pixels"], min_px)))
    return v.select(["time", "instance_id", "category"]).to_pylist()


def appearance_times(vis: list[dict], which: str, min_visible_s: float = 0.0, step: float = 0.5) -> dict[str, float]:
    """category -> its first ("first") or last ("last") visible time, counting only sightings: runs
    of an instance's consecutive 2 FPS timestamps (``step`` apart) at least ``min_visible_s`` long
    (``step`` per timestamp)."""
    times: dict[int, list[float]] = {}
    category: dict[int, str] = {}
    for v in vis:
        times.setdefault(v["instance_id"], []).append(v["time"])
        category[v["instance_id"]] = v["category"]
    out: dict[str, float] = {}
    for iid, ts in times.items():
        runs: list[list[float]] = []
        for t in sorted(ts):
            if runs and t - runs[-1][1] <= step * 1.5:
                runs[-1][1] = t
            else:
                runs.append([t, t])
        runs = [r for r in runs if r[1] - r[0] + step >= min_visible_s - 1e-9]
        if runs:
            c, t = category[iid], runs[0][0] if which == "first" else runs[-1][1]
            out[c] = (min if which == "first" else max)(out.get(c, t), t)
    return out


def reading_pixels(config, truth, reading) -> float:
    """The truth pixels a sighting under ``reading`` (a qa Sighting) needs: its share of the view, at
    least one pixel (masks under segment.min_area reach the readings as specks)."""
    v = truth["visibility"]
    tw, th = v["image_width"][0].as_py(), v["image_height"][0].as_py()
    return max(1.0, reading.min_area_frac * tw * th)


def stable_voo_sets(truth, view, config, which: str) -> tuple[dict[str, float], set[frozenset[str]]]:
    """The kept concepts' appearance times under the first of ``qa.voo_readings``, and the 4-concept
    sets whose order is the same and whose consecutive appearances are >= ``qa.voo_min_gap_s``
    apart under every reading."""
    qa, keep = config.qa, kept(truth, view, config)
    per_reading = []
    for reading in qa.voo_readings:
        vis = visible(truth, view, reading_pixels(config, truth, reading))
        per_reading.append({c: t for c, t in appearance_times(vis, which, reading.min_visible_s).items() if c in keep})
    base = per_reading[0]

    def stable(s: frozenset[str]) -> bool:
        order = sorted(s, key=lambda c: (base[c], c))
        for times in per_reading:
            if any(c not in times for c in s) or sorted(s, key=lambda c: (times[c], c)) != order:
                return False
            if any(times[b] - times[a] < qa.voo_min_gap_s - 1e-9 for a, b in zip(order, order[1:], strict=False)):
                return False
        return True

    return base, {s for s in valid_voo_sets(base, qa.voo_min_gap_s) if stable(s)}


def kept(truth, view, config) -> set[str]:
    """The detect stage's frequency filter on the truth (the groundtruth detector sees every pixel)."""
    d = config.detect
    v = truth["visibility"]
    v = v.filter(pc.equal(v["view"], view)).to_pylist()
    n = math.ceil(config.sample.duration_s * 2 - 1e-9)  # 2 FPS timestamps k / 2 < duration
    present: dict[str, set[int]] = {}
    for r in v:
        present.setdefault(r["category"], set()).add(r["sample_index"])
    return {
        c for c, ks in present.items() if len(ks) >= d.min_frames and d.min_fraction <= len(ks) / n <= d.max_fraction
    }


def instances_seen(truth, view, config) -> dict[str, dict[int, float]]:
    """Kept category -> truth instance -> the first time it is seen in ``view`` (a mask the segment
    stage accepts)."""
    keep = kept(truth, view, config)
    out: dict[str, dict[int, float]] = {}
    for v in visible(truth, view, min_pixels(config, truth)):
        if v["category"] in keep:
            seen = out.setdefault(v["category"], {})
            seen[v["instance_id"]] = min(seen.get(v["instance_id"], v["time"]), v["time"])
    return out


def valid_voo_sets(times: dict[str, float], gap_s: float) -> set[frozenset[str]]:
    """The 4-concept sets whose times are pairwise at least ``gap_s`` apart."""
    return {
        frozenset(s)
        for s in itertools.combinations(sorted(times), 4)
        if all(abs(times[a] - times[b]) >= gap_s - 1e-9 for a, b in itertools.combinations(s, 2))
    }


def reviewed_voc(read, source: str, view: str, config, truth) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """(VOC counts per concept at every checkpoint as reconciled, the same once an oracle reviewer
    has resolved every review item correctly) for one view video of a built data root. ``read(stage,
    unit, file)`` reads a current output. The clip instances' truth objects come from their boxes
    and the truth's visibility table (bench_reconcile.truth_of_clip_instances), independently of
    reconciliation; the reviewer merges the review items that are one object and splits those that
    are two (bench_reconcile.reviewed)."""
    from conftest import load_bench

    from vsi_wild import ids
    from vsi_wild.tasks import metadata as tm

    br = load_bench("bench_reconcile")
    vid = ids.video_id(source, view)
    row = next(r for r in read("project", source, "views.parquet").to_pylist() if r["video_id"] == vid)
    members = read("reconcile", vid, "members.parquet").to_pylist()
    decisions = read("reconcile", vid, "merge_decisions.parquet").to_pylist()
    clips = sorted({m["clip_index"] for m in members})
    segments, clip_rows = [], []
    for c in clips:
        segments += read("segment", ids.clip_id(vid, c), "segments.parquet").to_pylist()
        clip_rows += read("segment", ids.clip_id(vid, c), "instances.parquet").to_pylist()
    instances = tm.clip_instances_in_view(row, clip_rows, [dict(s) for s in segments])
    by_key = {c.key: c for c in instances}
    truth_of = br.truth_of_clip_instances(segments, truth["visibility"].to_pylist(), view)
    rules = tm.answer_rules(config, row)
    groups: dict[int, list] = {}
    for m in members:
        groups.setdefault(m["instance_id"], []).append((m["clip_index"], m["local_id"]))
    auto = [sorted(g) for _, g in sorted(groups.items())]
    items = [((d["clip_a"], d["local_a"]), (d["clip_b"], d["local_b"])) for d in decisions if d["review"]]
    return br.answers(auto, by_key, rules)[0], br.answers(br.reviewed(auto, items, truth_of), by_key, rules)[0]
