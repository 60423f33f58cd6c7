"""bench/bench_verify.py's synthetic store, at the sample's size, is a store the stages could have
written: every output file each stage declares (schema.ARTIFACTS) is there with its schema, and the
verification app serves its page from it. (The benchmark failed for months unnoticed: the app came to
read reconcile's merge_decisions.parquet, which the synthetic store did not have.)"""

from __future__ import annotations

import pytest
from conftest import load_bench

from vsi_wild import schema
from vsi_wild.store import Store, UnitRef


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_verify")


@pytest.fixture(scope="module")
def root(bench, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-verify")
    bench.build(root, 240, 24, 2_000)
    return root


def test_every_declared_output_of_the_synthetic_stages_is_there_with_its_schema(root):
    store = Store(root)
    units = store.status_table().to_pylist()
    assert {u["stage"] for u in units} == {"project", "segment", "reconcile", "metadata"}
    for u in units:
        ref = UnitRef(u["stage"], u["unit"], u["key"])
        files = store.files(ref)
        for a in schema.ARTIFACTS[u["stage"]]:
            if a.optional or a.is_pattern:
                continue
            assert a.name in files, f"{u['stage']} {u['unit']}: declared output {a.name} missing"
            if a.schema is not None:
                diff = schema.schema_difference(store.read_table(ref, a.name).schema, a.schema)
                assert diff is None, f"{u['stage']} {u['unit']} {a.name}: {diff}"


def test_the_app_serves_the_synthetic_video_with_its_review_pairs(bench, root):
    from fastapi.testclient import TestClient

    client = TestClient(bench._app(root))
    r = client.get(f"/api/videos/{bench.VID}")
    assert r.status_code == 200, r.text[:500]
    pairs = r.json()["review_pairs"]
    # one decision per instance and the next of its concept (instances 1..4 of 24), every third left for review
    assert [(p["instance_a"], p["instance_b"]) for p in pairs] == [(3, 23)]
    assert client.get(f"/api/videos/{bench.VID}/masks?k=10").json()["masks"]
