"""Resume after SIGKILL: a run killed in the middle of a stage, run again, finishes; the units that
had finished are not recomputed; the final artifacts are byte-identical to an uninterrupted run's."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import small_sample_config

from vsi_wild.store import Store, UnitRef

pytestmark = pytest.mark.slow


def _cli(cfg: Path, **popen) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("vsi-wild")
    return subprocess.Popen(
        [str(exe), "run", "-c", str(cfg), "-q"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )


def _states(root: Path) -> dict[tuple[str, str], dict]:
    st = Store(root)
    return {(r["stage"], r["unit"]): r for r in st.status_table().to_pylist()} if (root / "status").exists() else {}


def _artifact_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file of every complete output, read from disk (not from the manifests)."""
    st = Store(root)
    out = {}
    for (stage, unit), row in _states(root).items():
        if row["state"] != "done":
            continue
        ref = UnitRef(stage, unit, row["key"])
        for f in st.files(ref):
            out[f"{stage}/{unit}/{row['key']}/{f}"] = hashlib.sha256(
                (Path(st.unit_dir(ref)) / f).read_bytes()
            ).hexdigest()
    return out


def test_sigkill_mid_stage_then_resume_gives_identical_artifacts(tmp_path):
    ref_root, root = tmp_path / "uninterrupted", tmp_path / "killed"
    for r in (ref_root, root):
        small_sample_config(r.parent / f"{r.name}.yaml", r)
    ref = _cli(tmp_path / "uninterrupted.yaml")
    out, _ = ref.communicate(timeout=1800)
    assert ref.returncode == 0, out

    proc = _cli(tmp_path / "killed.yaml", start_new_session=True)
    killed_in = None
    deadline = time.time() + 1800
    while time.time() < deadline and proc.poll() is None:
        states = _states(root)
        by_stage: dict[str, list[str]] = {}
        for (stage, _), row in states.items():
            by_stage.setdefault(stage, []).append(row["state"])
        for stage, st in by_stage.items():
            if stage not in ("sample", "probe", "review") and "done" in st and "running" in st:
                killed_in = stage
        if killed_in:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    proc.wait(timeout=60)
    assert killed_in, "the run ended before a stage was caught with units done and running"
    assert proc.returncode == -signal.SIGKILL
    before = {k: r for k, r in _states(root).items() if r["state"] == "done"}
    interrupted = [k for k, r in _states(root).items() if r["state"] == "running"]
    assert interrupted and any(k[0] == killed_in for k in before)

    again = _cli(tmp_path / "killed.yaml")
    out, _ = again.communicate(timeout=1800)
    assert again.returncode == 0, out
    after = _states(root)
    # finished units were not recomputed; interrupted ones were, once
    for k, row in before.items():
        assert after[k]["attempts"] == row["attempts"] and after[k]["key"] == row["key"], k
    for k in interrupted:
        assert after[k]["state"] == "done"
    # the same outputs, byte for byte, as the uninterrupted run
    want, got = _artifact_hashes(ref_root), _artifact_hashes(root)
    assert want and got == want
    assert not list((root / "tmp").iterdir())  # the killed run's scratch space was cleaned
