"""bench/loop_closure.py on the session's sample: the CPU pose backend's matching recognises the
places the loop comes back to (cameras within 1 m) and no place 5 m or more away; the loops it
finds where the estimated track allows them join revisits only, and closing them brings the
track's far errors and the loop's end back towards the truth."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO


def test_revisits_match_and_distant_places_do_not_and_closing_them_straightens_the_track(sample_root):
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "loop_closure.py"), str(sample_root[0]), "--per-bin", "4", "--graph"],
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
    edges = re.search(
        r"^loop_graph_edges: candidate pairs \d+, loop edges (\d+), .* distance ([\d.]+) / ([\d.]+)$", out, re.M
    )
    assert edges and int(edges[1]) > 0 and float(edges[3]) < 5.0, out
    err = re.search(r"^loop_graph_track_error_m: [\d.]+ / ([\d.]+) / [\d.]+ -> [\d.]+ / ([\d.]+) / ", out, re.M)
    assert err and float(err[2]) < float(err[1]), out
    gap = re.search(r"^loop_graph_end_gap_m: ([\d.]+) -> ([\d.]+) \(truth ([\d.]+)\)", out, re.M)
    assert gap and abs(float(gap[2]) - float(gap[3])) < abs(float(gap[1]) - float(gap[3])), out
