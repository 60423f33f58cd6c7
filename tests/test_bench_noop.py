"""bench/bench_noop.py's root builder, reduced to two sources: a no-op run on it computes nothing.

The benchmark builds its cached root with the engine's own plan and cache keys; if a stage's units,
keys or outputs change, this test fails instead of the benchmark timing a run that computes.
"""

from __future__ import annotations

import shutil

import pytest
from conftest import load_bench

from vsi_wild.store import Store
from vsi_wild.tasks import registry


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_noop")


@pytest.fixture(scope="module")
def built(bench, tmp_path_factory):
    """Two sources of 4 views, 60 clips: every stage of the DAG but the sample and the search."""
    return bench.build_root(tmp_path_factory.mktemp("noop"), 2, 60)


def test_reduced_root_has_every_stage_cached(built):
    _, root, units = built
    status = Store(root).status_table().to_pylist()
    assert len(status) == units and all(r["state"] == "done" for r in status)
    by_stage = {}
    for r in status:
        by_stage[r["stage"]] = by_stage.get(r["stage"], 0) + 1
    # no search (ids asked by name), no sample (disabled): every other stage of the DAG
    assert set(by_stage) == {s.name for s in registry.STAGES} - {"sample", "search"}
    assert by_stage["download"] == 2 and by_stage["candidates"] == 8 and by_stage["segment"] == 60


def test_noop_in_process_computes_nothing(bench, built, tmp_path):
    config, root, units = built
    copy = tmp_path / "out"
    shutil.copytree(root, copy, symlinks=True)
    # every unit cached (check_noop raises otherwise) and nothing submitted (_refuse raises)
    bench.noop_in_process(config, copy, units)


@pytest.mark.slow
def test_noop_cli_computes_nothing(bench, built, tmp_path):
    config, root, units = built
    copy = tmp_path / "out"
    shutil.copytree(root, copy, symlinks=True)
    assert bench.noop_cli(config, copy, units) > 0
