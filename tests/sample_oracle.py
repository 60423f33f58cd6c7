"""What the embedded sample's truth says the QA rules must produce, derived from the truth tables
(TRUTH_VISIBILITY, TRUTH_POSES) and the config alone, never through the QA code. Shared by
tests/test_qa_sample.py and tests/test_sample_oracle.py."""

from __future__ import annotations

import itertools
import math

import pyarrow.compute as pc

VIEW_YAW = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}

# What the default sample (stages/sample/world.py DEFAULT_LAYOUT) shows of the reconciler today
RECONCILE_SPLITS = ("reconciliation of the default sample with the CPU pose backend: 0 false merges and 5 false "
                    "splits against the truth (3 of 24 (view, category) VOC totals too high); the twoview track's "
                    "error (1.1 m median, 3.4 m p90) lays look-alikes near each other's places, and such pairs "
                    "are left apart for review (4 of the 5 splits are review pairs a reviewer's merge mends); with "
                    "the truth poses 0 / 2, 0 after review: issue 14 part 6")


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
    """The truth pixels a sighting under ``reading`` (a qa Sighting) needs: its share of the view, and
    never fewer than the segment stage keeps (the metadata has nothing smaller)."""
    v = truth["visibility"]
    tw, th = v["image_width"][0].as_py(), v["image_height"][0].as_py()
    return max(min_pixels(config, truth), reading.min_area_frac * tw * th)


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
            if any(times[b] - times[a] < qa.voo_min_gap_s - 1e-9 for a, b in zip(order, order[1:])):
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
    return {c for c, ks in present.items() if len(ks) >= d.min_frames and d.min_fraction <= len(ks) / n <= d.max_fraction}


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
    return {frozenset(s) for s in itertools.combinations(sorted(times), 4)
            if all(abs(times[a] - times[b]) >= gap_s - 1e-9 for a, b in itertools.combinations(s, 2))}
