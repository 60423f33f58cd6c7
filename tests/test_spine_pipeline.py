"""The pipeline as a user runs it: the CLI, the Prefect flow, caching, bad input, help texts."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import make_video
from vsi_wild.cli import app
from vsi_wild.store import Store
from vsi_wild.tasks import registry

runner = CliRunner()


def cli(*args: str):
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result


@pytest.fixture
def local_sources(tmp_path: Path):
    """A config with no sample, and three local 2:1 videos, one of them truncated."""
    cfg = tmp_path / "c.yaml"
    # local files need no human review in these tests (the review gate has its own tests)
    cfg.write_text(f"run: {{data_root: {tmp_path / 'out'}, workers: 2}}\nsample: null\n"
                   "review: {require_decision: false}\n")
    good = [make_video(tmp_path / f"good{i}.mp4", 256, 128, 8, 2 + i) for i in range(2)]
    full = make_video(tmp_path / "bad_full.mp4", 256, 128, 8, 4, extra=["-movflags", "+faststart"])
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    return cfg, good, bad, full


def test_truncated_video_fails_alone_and_only_it_is_retried(local_sources, tmp_path):
    cfg, good, bad, full = local_sources
    assert cli("add", *map(str, good), str(bad), "-c", str(cfg)).exit_code == 0
    r = cli("run", "-c", str(cfg), "-q")
    assert r.exit_code == 1, r.output
    assert "truncated" in r.output and "bad.mp4" in r.output
    store = Store(tmp_path / "out")
    rows = {r["unit"]: r for r in store.status_table().to_pylist() if r["stage"] == "probe"}
    bad_id = next(u for u in rows if "bad" in u)
    assert rows[bad_id]["state"] == "failed" and "truncated" in rows[bad_id]["error"]
    assert all(r["state"] == "done" for u, r in rows.items() if u != bad_id)
    # `vsi-wild status` shows it
    st = cli("status", "-c", str(cfg), "--failed")
    assert bad_id in st.output and "truncated" in st.output
    # the bad file is replaced: the re-run retries only that unit, and it passes
    shutil.copyfile(full, bad)
    r = cli("run", "-c", str(cfg))
    assert r.exit_code == 0, r.output
    line = next(l for l in r.output.splitlines() if "probe" in l)
    assert [int(x) for x in line.replace("│", " ").split()[1:5]] == [1, 2, 0, 0]  # computed, cached, skipped, failed
    assert store.read_status("probe", bad_id)["attempts"] == 2


def test_removed_bad_file_is_retried_alone_with_a_clear_error(local_sources, tmp_path):
    cfg, good, bad, _ = local_sources
    cli("add", str(good[0]), str(bad), "-c", str(cfg))
    assert cli("run", "-c", str(cfg), "-q").exit_code == 1
    bad.unlink()
    r = cli("run", "-c", str(cfg), "-q")
    assert r.exit_code == 1
    assert "file not found" in r.output and "vsi-wild remove" in r.output
    line = next(l for l in r.output.splitlines() if "probe" in l)
    assert [int(x) for x in line.replace("│", " ").split()[1:5]] == [0, 1, 0, 1]
    # unregistering it makes the run clean
    bad_id = next(r["source_id"] for r in Store(tmp_path / "out").registry().to_pylist() if "bad" in r["source_id"])
    assert cli("remove", bad_id, "-c", str(cfg)).exit_code == 0
    assert cli("run", "-c", str(cfg), "-q").exit_code == 0


def test_second_run_executes_no_stage_function(local_sources, monkeypatch):
    cfg, good, _, _ = local_sources
    cli("add", *map(str, good), "-c", str(cfg))
    first = cli("run", "-c", str(cfg), "-q")
    assert first.exit_code == 0, first.output

    def forbidden(job):
        raise AssertionError(f"stage function executed: {job.stage.name}:{job.unit}")

    for name, st in list(registry.BY_NAME.items()):
        monkeypatch.setitem(registry.BY_NAME, name, dataclasses.replace(st, run=forbidden))
    second = cli("run", "-c", str(cfg), "-q")
    assert second.exit_code == 0, second.output
    for line in second.output.splitlines():
        cells = line.replace("│", " ").split()
        if cells and cells[0] in registry.BY_NAME and len(cells) == 6:
            computed, cached, skipped, failed = map(int, cells[1:5])
            assert computed == 0 and failed == 0 and skipped == 0, line


def test_help_explains_every_command():
    top = cli("--help")
    assert top.exit_code == 0
    for word in ("run", "status", "add", "sample", "360"):
        assert word in top.output
    for cmd, words in {
        "run": ("--only", "--from", "--videos", "--force", "--data-root", "cached"),
        "status": ("--failed", "stages"),
        "add": ("PATHS", "probe"),
        "sample": ("--seed", "--duration", "--width", "--fps", "truth"),
        "remove": ("SOURCE_IDS",),
        "sources": ("probe",),
    }.items():
        r = cli(cmd, "--help")
        assert r.exit_code == 0, cmd
        for w in words:
            assert w.lower() in r.output.lower(), f"{cmd} --help lacks {w!r}"


def test_bad_config_is_a_clear_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run: {wrokers: 3}\n")
    r = cli("run", "-c", str(cfg))
    assert r.exit_code == 2
    assert "run.wrokers" in r.output and str(cfg) in r.output
    r = cli("run", "-c", str(tmp_path / "missing.yaml"))
    assert r.exit_code == 2 and "not found" in r.output
    r = cli("run", "-c", str(cfg), "--only", "nosuchstage")
    assert r.exit_code == 2
