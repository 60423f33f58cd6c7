"""bench/bench_review.py's truth: on the sample it finds the reconciler's false splits of the right
view (sample_oracle.RECONCILE_SPLITS), and a fix file merging each split's instances leaves none."""

from __future__ import annotations

from conftest import REPO, copy_root, load_bench
from vsi_wild.config import load_config
from vsi_wild.store import Store
from vsi_wild.verify.review import Review


def test_the_truth_finds_the_splits_and_merging_them_leaves_no_error(sample_root, tmp_path):
    bench = load_bench("bench_review")
    root = copy_root(sample_root[0], tmp_path / "data")
    config = load_config(REPO / "configs" / "sample.yaml")
    review = Review(config, Store(root))
    truth = bench.Truth(review, config)
    found = bench.errors(review, truth)
    assert {e["kind"] for e in found} == {"split"} and len(found) == 5
    assert {e["video"] for e in found} == {"sample-walk_right"}
    vid = "sample-walk_right"
    (root / "fixes").mkdir()
    lines = "".join(f"  - op: merge\n    instances: {e['instances']}\n" for e in found)
    (root / "fixes" / f"{vid}.yaml").write_text(f"video_id: {vid}\nfixes:\n{lines}")
    assert bench.errors(Review(config, Store(root)), truth) == []
