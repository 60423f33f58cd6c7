"""bench/calibration_reconcile.py's reliability bins and expected calibration error, on numbers
whose answer is known by hand: bins are [lo, hi) but the last is closed, the ECE weighs each bin
by its count."""

from __future__ import annotations

import math

import numpy as np
from conftest import load_bench


def test_reliability_bins_and_ece_by_hand():
    bench = load_bench("calibration_reconcile")
    p = [0.05, 0.05, 0.1, 0.95, 1.0]
    happened = [False, True, False, True, True]
    bins = bench.reliability(p, happened, np.linspace(0.0, 1.0, 11))
    assert [b.n for b in bins] == [2, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    assert (bins[0].mean_p, bins[0].observed) == (0.05, 0.5)
    assert (bins[1].mean_p, bins[1].observed) == (0.1, 0.0)  # 0.1 opens the second bin
    assert math.isclose(bins[9].mean_p, 0.975) and bins[9].observed == 1.0  # 1.0 closes the last
    assert math.isnan(bins[2].mean_p) and math.isnan(bins[2].observed)
    # (2 x 0.45 + 1 x 0.1 + 2 x 0.025) / 5
    assert math.isclose(bench.ece(bins), 0.21)
    assert bench.ece(bench.reliability([0.2, 0.2, 0.2, 0.2, 0.2], [1, 0, 0, 0, 0], [0.0, 0.5, 1.0])) < 1e-12
