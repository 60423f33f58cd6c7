"""bench_reconcile's inputs fingerprint: equal exactly when the outputs read are byte for byte the
same (two data roots written apart), whatever else the roots hold."""

from __future__ import annotations

import pyarrow as pa
from conftest import load_bench

from vsi_wild.store import Store, UnitRef


def _write(store: Store, ref: UnitRef, poses: list[float]) -> None:
    with store.writer(ref) as w:
        w.write_table("poses.parquet", pa.table({"x": poses}))


def test_the_fingerprint_follows_the_bytes_read():
    bench = load_bench("bench_reconcile")
    refs = [UnitRef("pose", "s1", "k1"), UnitRef("segment", "s1_front@0000", "k2")]
    roots = {}
    for name, last in (("a", 0.5), ("b", 0.5), ("c", 0.5000001)):
        roots[name] = store = Store(f"memory://bench-inputs-{name}/root")
        _write(store, refs[0], [0.0, 0.25, last])
        _write(store, refs[1], [1.0])
    _write(roots["b"], UnitRef("pose", "s2", "k9"), [7.0])  # an output not read changes nothing
    fp = {name: bench.fingerprint_of(store, refs) for name, store in roots.items()}
    assert fp["a"] == fp["b"]
    assert fp["a"] != fp["c"]  # one pose's last bits
    assert bench.fingerprint_of(roots["a"], refs[:1]) != fp["a"]  # a clip fewer
    assert bench.fingerprint_of(roots["a"], refs[::-1]) != fp["a"]  # the views' order is part of what was read
    # the run's digest over its views: a view's other bytes, or another view, is another digest
    run = bench.inputs_fingerprint([("s1_front", fp["a"]), ("s1_right", fp["b"])])
    assert run == bench.inputs_fingerprint([("s1_front", fp["b"]), ("s1_right", fp["a"])])  # a and b read alike
    assert run != bench.inputs_fingerprint([("s1_front", fp["c"]), ("s1_right", fp["b"])])
    assert run != bench.inputs_fingerprint([("s1_front", fp["a"])])
