"""bench/loop_closure.py on the session's sample: the CPU pose backend's matching recognises the
places the loop comes back to (cameras within 1 m) and no place 5 m or more away; the revisits
the pose stage found and closed (its loops.parquet) join places within metres of each other by
the truth, their offsets measured to centimetres; and the closed track stays near the truth."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO


def test_revisits_match_and_distant_places_do_not_and_the_stages_loop_edges_are_revisits(sample_root):
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "loop_closure.py"), str(sample_root[0]), "--per-bin", "4", "--edges"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {
        (float(lo), float(hi)): (int(n), int(k))
        for lo, hi, n, k in re.findall(r"^loop_pairs_([\d.]+)_([\d.inf]+)m: pairs (\d+), .* in (\d+),", out, re.M)
    }
    assert found[(0.0, 1.0)] == (4, 4), out
    far = [nk for (lo, _hi), nk in found.items() if lo >= 5.0]
    assert len(far) == 3 and all(n == 4 and k == 0 for n, k in far), out
    edges = re.search(r"^loop_edges: found (\d+), kept (\d+); .* distance ([\d.]+) / ([\d.]+)$", out, re.M)
    assert edges and int(edges[2]) > 0 and float(edges[4]) < 3.0, out
    offsets = re.search(r"^loop_edges_offset_error_m: ([\d.]+) / ([\d.]+) \((\d+) measured\)", out, re.M)
    assert offsets and int(offsets[3]) > 0 and float(offsets[2]) < 0.2, out
    turns = re.search(r"^loop_edges_turn_error_deg: ([\d.]+) / ", out, re.M)
    assert turns and float(turns[1]) < 2.0, out


def test_the_pose_stage_closes_the_samples_loop(sample_root):
    """The sample's walk ends 0.4 m from where it began; chained step by step the track ended 3 m
    off and 3.4 m from the truth (p90) before the pose stage closed its loop."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "pose_track_error.py"), str(sample_root[0])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    err = re.search(r"^track_position_error_m: ([\d.]+) / ([\d.]+) / ([\d.]+)", out, re.M)
    assert err and float(err[2]) < 2.0 and float(err[3]) < 2.5, out
    yaw = re.search(r"^track_yaw_error_deg: ([\d.]+) / ([\d.]+) / ([\d.]+)", out, re.M)
    assert yaw and float(yaw[3]) < 3.0, out
    # the views' disagreement on a step's length ranks the fused steps' errors (0.60 on the sample)
    spread = re.search(r"^view_spread_step_error_spearman: (-?[\d.]+)", out, re.M)
    assert spread and float(spread[1]) > 0.3, out
