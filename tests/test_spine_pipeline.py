"""The pipeline as a user runs it: the CLI, the Prefect flow, caching, bad input, help texts.

The whole DAG runs once per module on a small generated sample (CPU backends); each test works on
its own copy of that data root, so tests do not disturb each other.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from conftest import REPO, make_video, small_sample_config
from typer.testing import CliRunner

from vsi_wild.cli import app
from vsi_wild.store import Store
from vsi_wild.tasks import registry

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def table_counts(output: str) -> dict[str, list[int]]:
    """stage -> [computed, cached, skipped, failed] from the run summary table."""
    rows = {}
    for line in output.splitlines():
        cells = line.replace("│", " ").split()
        if len(cells) == 6 and cells[0] in registry.BY_NAME:
            rows[cells[0]] = [int(x) for x in cells[1:5]]
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A data root where the whole DAG has run on the small sample."""
    base = tmp_path_factory.mktemp("built")
    cfg = small_sample_config(base / "c.yaml", base / "out")
    r = cli("run", "-c", str(cfg), "-q")
    assert r.exit_code == 0, r.output
    counts = table_counts(r.output)
    assert {s.name for s in registry.STAGES} - {"search", "download"} <= set(counts), counts
    assert all(c[3] == 0 and c[2] == 0 for c in counts.values()), counts
    return base / "out"


@pytest.fixture
def copy_of(built, tmp_path) -> tuple[Path, Path]:
    root = tmp_path / "out"
    shutil.copytree(built, root, symlinks=True)
    return small_sample_config(tmp_path / "c.yaml", root), root


def test_second_run_executes_no_stage_function(copy_of, monkeypatch):
    cfg, _ = copy_of

    def forbidden(job):
        raise AssertionError(f"stage function executed: {job.stage.name}:{job.unit}")

    for name, st in list(registry.BY_NAME.items()):
        monkeypatch.setitem(registry.BY_NAME, name, dataclasses.replace(st, run=forbidden))
    r = cli("run", "-c", str(cfg), "-q")
    assert r.exit_code == 0, r.output
    counts = table_counts(r.output)
    assert counts and all(
        computed == 0 and cached > 0 and skipped == 0 and failed == 0
        for computed, cached, skipped, failed in counts.values()
    ), counts
    assert "exports:" in r.output and "VMR" in r.output


def _truncated(tmp_path: Path) -> tuple[Path, Path]:
    full = make_video(tmp_path / "full.mp4", 256, 128, 8, 4, extra=["-movflags", "+faststart"])
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    return bad, full


def test_truncated_video_beside_the_sample_fails_alone(copy_of, tmp_path):
    cfg, root = copy_of
    bad, full = _truncated(tmp_path)
    assert cli("add", str(bad), "-c", str(cfg)).exit_code == 0
    r = cli("run", "-c", str(cfg), "-q")
    assert r.exit_code == 1, r.output
    assert "truncated" in r.output and "bad.mp4" in r.output
    store = Store(root)
    bad_id = next(s for s in store.registry()["source_id"].to_pylist() if s.startswith("local-bad"))
    rows = store.status_table().to_pylist()
    failed = [(x["stage"], x["unit"]) for x in rows if x["state"] == "failed"]
    assert failed == [("probe", bad_id)]
    assert "truncated" in store.read_status("probe", bad_id)["error"]
    assert all(x["state"] == "done" for x in rows if x["unit"] != bad_id)
    counts = table_counts(r.output)
    assert counts["probe"] == [0, 1, 0, 1], r.output
    # nothing is recomputed but the report, whose cache key holds the losses it lists
    assert {s for s, c in counts.items() if c[0]} == {"report"}, r.output
    assert bad_id in (root / "report.md").read_text()
    st = cli("status", "-c", str(cfg), "--failed")
    assert bad_id in st.output and "truncated" in st.output

    # replaced by a good file: the probe retries only that unit, and it passes
    shutil.copyfile(full, bad)
    r = cli("run", "-c", str(cfg), "-q", "--only", "probe")
    assert r.exit_code == 0, r.output
    assert table_counts(r.output)["probe"] == [1, 1, 0, 0]
    assert store.read_status("probe", bad_id)["attempts"] == 2


def test_removed_bad_file_is_retried_alone_with_a_clear_error(copy_of, tmp_path):
    cfg, root = copy_of
    bad, _ = _truncated(tmp_path)
    cli("add", str(bad), "-c", str(cfg))
    assert cli("run", "-c", str(cfg), "-q").exit_code == 1
    bad.unlink()
    r = cli("run", "-c", str(cfg), "-q")
    assert r.exit_code == 1
    assert "file not found" in r.output and "vsi-wild remove" in r.output
    counts = table_counts(r.output)
    assert counts["probe"] == [0, 1, 0, 1], r.output
    assert {s for s, c in counts.items() if c[0]} <= {"report"}, r.output
    bad_id = next(s for s in Store(root).registry()["source_id"].to_pylist() if s.startswith("local-bad"))
    assert cli("remove", bad_id, "-c", str(cfg)).exit_code == 0
    assert cli("run", "-c", str(cfg), "-q").exit_code == 0


def test_help_explains_every_command():
    top = cli("--help")
    assert top.exit_code == 0
    for word in ("run", "status", "add", "sample", "crawl", "review", "360"):
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


def test_a_relative_config_is_found_in_the_project_folder_from_anywhere(tmp_path, monkeypatch):
    """Outside the project folder, the default `configs/sample.yaml` is read from the project folder
    (VSI_WILD_HOME, else the checkout of an editable install); a file in neither is an error that
    says where it looked and what to do."""
    from vsi_wild.config import ConfigError, load_config

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VSI_WILD_HOME", raising=False)
    assert load_config("configs/sample.yaml") == load_config(REPO / "configs" / "sample.yaml")  # the checkout's
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    monkeypatch.setenv("VSI_WILD_HOME", str(elsewhere))
    looked = f"configs/sample.yaml \\(in {tmp_path} or the project folder {elsewhere}\\); "
    with pytest.raises(ConfigError, match=looked + ".*set VSI_WILD_HOME"):
        load_config("configs/sample.yaml")
    with pytest.raises(ConfigError, match="not found: /nowhere/c.yaml; run from"):
        load_config("/nowhere/c.yaml")
    monkeypatch.setenv("VSI_WILD_HOME", str(REPO))
    assert load_config("configs/sample.yaml") == load_config(REPO / "configs" / "sample.yaml")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "sample.yaml").write_text("run: {workers: 3}\n")
    assert load_config("configs/sample.yaml").run.workers == 3  # the working directory's comes first
