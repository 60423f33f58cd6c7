"""How far reconciliation's located instances are from their objects, in their location uncertainties.

For the bench seeds that `bench_reconcile.py` has run (same root, same options), every clip instance
is located as reconciliation locates it (``stages.reconcile.locate.locate_instances``, with the
estimated poses; its uncertainty is the root mean square of its covariance's axes), and its truth object's footprint is
carried into the estimated ground plane by the similarity (a reflection allowed) that best lays the
truth's camera centres onto the estimated ones within 20 s of the instance's sightings: drift over
the walk is taken out, as reconciliation's layout alignment and drift allowance take it out. The
error is how far the located position lies outside that footprint. Prints, for the instances seen
only in part (``ClipInstance.seen_in_part``: every box cut off by the image's side or bottom), of
those the ones whose every box is cut off at the side and the others, the instances never cut off
at the side or bottom, and all:

    location_error_over_uncertainty_<group>_p50 / _p90 / _p95, location_instances_<group>
    location_error_over_range_<group>_p50
    location_error_part_factor: the in-part median over the never-cut median; _side_factor,
        _bottom_factor: the same for the two kinds of in-part instances (a box cut off by the image
        border is located as loosely as half its visible size: ``locate._pixel_sigmas``)

Usage: python bench/location_error.py [--seeds 29 30 31 32 33 34] [--n-per-category 6] [--width 640]
                                      [--root build/bench_reconcile]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reconcile import REPO, ViewInputs, bench_config, prepared_views  # noqa: E402  the bench folder goes on sys.path first

WINDOW_S = 20.0


def _similarity(src: np.ndarray, dst: np.ndarray) -> tuple[complex, complex, float]:
    """z -> m z + t laying ``src`` (n, 2) onto ``dst`` by least squares, and its mean residual."""
    a, b = src[:, 0] + 1j * src[:, 1], dst[:, 0] + 1j * dst[:, 1]
    ca, cb = a.mean(), b.mean()
    den = float((np.abs(a - ca) ** 2).sum())
    m = complex(((b - cb) * np.conj(a - ca)).sum() / den) if den > 1e-9 else 1.0 + 0j
    t = complex(cb - m * ca)
    return m, t, float(np.abs(m * a + t - b).mean())


def _outside(p: complex, obj: dict, m: complex, t: complex, mirror: bool) -> float:
    """How far ``p`` (estimated ground plane) lies outside the object's footprint (truth world,
    axis-aligned), measured in the truth world."""
    z = (p - t) / m
    x, y = (z.real, -z.imag) if mirror else (z.real, z.imag)
    dx = max(abs(x - obj["x"]) - obj["size_x"] / 2.0, 0.0)
    dy = max(abs(y - obj["y"]) - obj["size_y"] / 2.0, 0.0)
    return float(np.hypot(dx, dy)) * abs(m)


def errors(vi: ViewInputs, camera_height: float) -> list[dict]:
    """Each located instance of one view: its error and uncertainty (pose units), range, and
    whether it was seen only in part (every box cut off at the side, or at the side or bottom) or
    never cut off at the side or bottom."""
    from vsi_wild.stages import reconcile as rc
    from vsi_wild.stages.reconcile import locate as loc

    params = rc.ReconcileParams()
    track = vi.track
    instances = vi.instances()
    rc.mark_occluded_bottoms(ci.samples for ci in instances)
    basis = loc.ground_basis(track)
    loc.locate_instances(
        instances, track, basis, camera_height, params.min_ray_spread_deg, params.pixel_error, params.level_views
    )
    est = np.array([basis @ c for c in track.C])
    tru = vi.truth_track.C[:, :2]  # the truth's camera at each of the track's samples (z up)
    valid = track.valid_rows()
    out = []
    for ci in instances:
        if ci.where is None or ci.where.how == "ray" or vi.truth_of.get(ci.key, -1) not in vi.objects:
            continue
        times = [o.time for o in ci.samples.values()]
        rows = [i for i in valid if min(times) - WINDOW_S <= track.times[i] <= max(times) + WINDOW_S]
        if len(rows) < 5:
            continue
        m, t, res = _similarity(tru[rows], est[rows])
        mm, mt, mres = _similarity(tru[rows] * [1.0, -1.0], est[rows])
        mirror = mres < res
        if mirror:
            m, t = mm, mt
        err = _outside(complex(*ci.where.xy), vi.objects[vi.truth_of[ci.key]], m, t, mirror)
        side = [o.cut_at_side() for o in ci.samples.values()]
        bottom = [o.cut_at_bottom() for o in ci.samples.values()]
        in_part = all(a or b for a, b in zip(side, bottom, strict=True))
        out.append(
            {
                "error": err,
                "sigma": float(np.sqrt(np.trace(ci.where.cov) / 2.0)),
                "range": ci.where.range,
                "in_part": in_part,
                "at_side": all(side),
                "whole": not any(side) and not any(bottom),
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[29, 30, 31, 32, 33, 34])
    ap.add_argument("--n-per-category", type=int, default=6)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--root", type=Path, default=REPO / "build" / "bench_reconcile")
    args = ap.parse_args()

    from vsi_wild.store import Store

    store = Store(args.root)
    rows: list[dict] = []
    for seed in args.seeds:
        config = bench_config(seed, args.n_per_category, args.width)
        views = prepared_views(store, config)
        if isinstance(views, dict):
            raise SystemExit(f"seed {seed}: {views}")
        for vi in views:
            rows += errors(vi, config.pose.ground_height())
    medians = {}
    for group, keep in (
        ("in_part", lambda r: r["in_part"]),
        ("in_part_at_side", lambda r: r["at_side"]),
        ("in_part_at_bottom", lambda r: r["in_part"] and not r["at_side"]),
        ("never_cut", lambda r: r["whole"]),
        ("all", lambda r: True),
    ):
        sel = [r for r in rows if keep(r) and r["sigma"] > 0]
        print(f"location_instances_{group}: {len(sel)}")
        if not sel:
            continue
        z = np.array([r["error"] / r["sigma"] for r in sel])
        for q in (50, 90, 95):
            print(f"location_error_over_uncertainty_{group}_p{q}: {np.percentile(z, q):.2f}")
        print(f"location_error_over_range_{group}_p50: {np.median([r['error'] / r['range'] for r in sel]):.3f}")
        medians[group] = float(np.median(z))
    if medians.get("never_cut"):
        for group, name in (("in_part", "part"), ("in_part_at_side", "side"), ("in_part_at_bottom", "bottom")):
            if group in medians:
                print(f"location_error_{name}_factor: {medians[group] / medians['never_cut']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
