"""bench/loop_closure.py on the session's sample: the CPU pose backend's matching recognises the
places the loop comes back to (cameras within 1 m) and no place 5 m or more away."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO


def test_revisits_match_and_distant_places_do_not(sample_root):
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "loop_closure.py"), str(sample_root[0]), "--per-bin", "4"],
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
