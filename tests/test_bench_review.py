"""bench/bench_review.py's truth: on the sample it finds the reconciler's errors (docs/metadata.md:
reconcile v13 leaves false splits in all four views and one false merge), and a fix file merging each
split's instances leaves no split."""

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
    assert {e["kind"] for e in found} <= {"split", "merged"} and any(e["kind"] == "split" for e in found)
    splits = [e for e in found if e["kind"] == "split"]
    for vid in sorted({e["video"] for e in splits}):
        lines = "".join(f"  - op: merge\n    instances: {e['instances']}\n" for e in splits if e["video"] == vid)
        (root / "fixes").mkdir(exist_ok=True)
        (root / "fixes" / f"{vid}.yaml").write_text(f"video_id: {vid}\nfixes:\n{lines}")
    left = bench.errors(Review(config, Store(root)), truth)
    assert [e for e in left if e["kind"] == "split"] == []
    assert len(left) == sum(e["kind"] == "merged" for e in found)  # the false merge stays (a split fix mends it)
