"""bench/bench_review.py's truth: on the sample it finds the metadata's errors, a false split made
by a fix file among them (reconcile v17 leaves the sample's instances as the truth has them), and a
fix file merging each split's instances leaves no split."""

from __future__ import annotations

import glob
import os

import pyarrow.parquet as pq
from conftest import REPO, copy_root, load_bench

from vsi_wild.config import load_config
from vsi_wild.store import Store
from vsi_wild.verify.review import Review


def test_the_truth_finds_the_splits_and_merging_them_leaves_no_error(sample_root, tmp_path):
    bench = load_bench("bench_review")
    root = copy_root(sample_root[0], tmp_path / "data")
    config = load_config(REPO / "configs" / "sample.yaml")
    # a false split made on purpose: the last clip member of the front view's first instance of
    # several members (one object by the truth: reconciliation joined them) split out as its own
    vid = "sample-walk_front"
    path = max(glob.glob(str(root / "artifacts" / "reconcile" / vid / "*" / "members.parquet")), key=os.path.getmtime)
    members = pq.read_table(path).to_pylist()
    sizes = {i: sum(m["instance_id"] == i for m in members) for i in {m["instance_id"] for m in members}}
    joined = min(i for i, n in sizes.items() if n >= 2)
    last = max((m for m in members if m["instance_id"] == joined), key=lambda m: m["first_time"])
    split_op = f"  - op: split\n    clip: {last['clip_index']}\n    local_id: {last['local_id']}\n"
    (root / "fixes").mkdir(exist_ok=True)
    (root / "fixes" / f"{vid}.yaml").write_text(f"video_id: {vid}\nfixes:\n{split_op}")
    review = Review(config, Store(root))
    truth = bench.Truth(review, config)
    found = bench.errors(review, truth)
    assert {e["kind"] for e in found} <= {"split", "merged"}
    assert any(e["kind"] == "split" and e["video"] == vid and joined in e["instances"] for e in found), found
    splits = [e for e in found if e["kind"] == "split"]
    for v in sorted({e["video"] for e in splits}):
        lines = split_op if v == vid else ""
        lines += "".join(f"  - op: merge\n    instances: {e['instances']}\n" for e in splits if e["video"] == v)
        (root / "fixes" / f"{v}.yaml").write_text(f"video_id: {v}\nfixes:\n{lines}")
    left = bench.errors(Review(config, Store(root)), truth)
    assert [e for e in left if e["kind"] == "split"] == []
    assert len(left) == sum(e["kind"] == "merged" for e in found)  # a false merge stays (a split fix mends it)
