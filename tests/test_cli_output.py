"""The CLI's output into a pipe: `--json` is one JSON object per line and nothing is wrapped, however
narrow the terminal ($COLUMNS) is. Runs the installed `vsi-wild` as a separate process."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import vsi_wild

from vsi_wild import schema
from vsi_wild.store import Store

NARROW = {"COLUMNS": "20", "LINES": "10"}
# Longer than any terminal; ends in what rich would read as markup (JSON keeps it as text).
LONG_TEXT = "truncated: moov atom not found " + "x" * 300
LONG_ERROR = LONG_TEXT + " [red]text[/]"
GOOD, BAD = "local-good-0123456789abcdef", "local-bad-0123456789abcdef0123456789"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A data root with two registered sources, a running and a failed probe, a done review."""
    store = Store(tmp_path / "out")
    for sid in (GOOD, BAD):
        row = {n: None for n in schema.SOURCE.names}
        row.update(source_id=sid, origin="local", path=f"/nonexistent/{sid}.mp4")
        store.register_source(row)
    t = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    for stage, unit, state, error in (
        ("probe", GOOD, "running", None),
        ("probe", BAD, "failed", LONG_ERROR),
        ("review", GOOD, "done", None),
    ):
        store.write_status(
            {
                "stage": stage,
                "unit": unit,
                "state": state,
                "key": "k" * 32,
                "fingerprint": None,
                "error": error,
                "error_class": "bad_input" if error else None,
                "retryable": None,
                "attempts": 1,
                "started_at": t,
                "ended_at": t,
                "duration_s": 0.5,
                "host": "h",
                "pipeline_version": "0",
            }
        )
    return tmp_path / "out"


def test_status_json_is_one_object_per_line_into_a_narrow_pipe(root):
    r = vsi_wild("status", "--data-root", str(root), "--json", env=NARROW)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    want = [json.loads(json.dumps(x, default=str)) for x in Store(root).status_table().to_pylist()]
    assert rows == want and len(rows) == 3
    assert LONG_ERROR in [x["error"] for x in rows]


def test_status_table_is_not_wrapped_into_a_narrow_pipe(root):
    r = vsi_wild("status", "--data-root", str(root), env=NARROW)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = next(line for line in lines if "unit" in line)
    assert "probe" in header and "revi" in header, r.stdout
    assert [line.split()[1] for line in lines if line.startswith("│")] == [BAD, GOOD], r.stdout
    assert any(line.startswith(f"failed probe:{BAD} (attempts 1): {LONG_TEXT}") for line in lines), r.stdout


def test_sources_table_is_not_wrapped_into_a_narrow_pipe(root):
    r = vsi_wild("sources", "--data-root", str(root), env=NARROW)
    assert r.returncode == 0, r.stderr
    rows = [line.split("│")[1:-1] for line in r.stdout.splitlines() if line.startswith("│")]
    assert [[c.strip() for c in row] for row in rows] == [
        [BAD, "local", "", "", "", f"failed: {LONG_TEXT} text"],
        [GOOD, "local", "", "", "", "running"],
    ], r.stdout


def test_stages_json_is_one_object_per_stage_into_a_narrow_pipe():
    from vsi_wild.tasks import registry

    r = vsi_wild("stages", "--json", env=NARROW)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["stage"] for x in rows] == [s.name for s in registry.STAGES]
    assert all(x["description"] == s.description for x, s in zip(rows, registry.STAGES, strict=True))


# A native teardown that aborts after Python has finalised, as Arrow's thread pool now and then did
# after a finished `vsi-wild sources` (SIGABRT, "terminate called without an active exception"):
# libc's abort registered with __cxa_atexit runs where (and as) the C++ runtime's static destructors do.
NATIVE_ABORT_AT_EXIT = """
import atexit, ctypes, sys
libc = ctypes.CDLL(None)
getattr(libc, "__cxa_atexit")(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)
atexit.register(lambda: print("python atexit ran", file=sys.stderr, flush=True))
"""


@pytest.mark.parametrize("through_main", [True, False])
def test_a_native_abort_after_finalisation_does_not_fail_a_finished_command(root, through_main):
    """`main` ends the process once Python's exit work is done (threads, atexit handlers, streams),
    so a native library's teardown cannot turn a finished command into a crash; without it the same
    teardown aborts the process (the control: the test can fail)."""
    import subprocess
    import sys

    call = "from vsi_wild.cli import main; main()" if through_main else "from vsi_wild.cli import app; app()"
    code = NATIVE_ABORT_AT_EXIT + f"sys.argv = ['vsi-wild', 'status', '--data-root', {str(root)!r}, '--json']\n" + call
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "python atexit ran" in r.stderr
    if through_main:
        assert r.returncode == 0, r.stderr
        assert len([json.loads(line) for line in r.stdout.splitlines()]) == 3
    else:
        assert r.returncode == -6, (r.returncode, r.stderr)


def test_main_keeps_the_commands_exit_code_and_its_whole_output_into_a_pipe(root):
    """Usage errors exit 2 with typer's message; a large output arrives whole through a pipe."""
    r = vsi_wild("no-such-command")
    assert r.returncode == 2 and "No such command" in r.stderr
    r = vsi_wild("status", "--data-root", str(root / "missing"), "--json")
    assert r.returncode == 0, r.stderr
    r = vsi_wild("stages", "--help", env=NARROW)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("─╯"), r.stdout[-300:]


def _commands(command, path=()):
    """(argv path, click command) of every command and subcommand of the CLI."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


def test_every_placeholder_of_a_help_text_is_shown_by_help():
    """The help is rendered as markdown, where a bare `<version>` is an HTML tag and vanishes
    ("its folder releases//."): every `<name>` written in a command's or an option's help is in
    what `--help` prints."""
    import re

    import typer.main
    from typer.testing import CliRunner

    from vsi_wild.cli import app

    placeholder = re.compile(r"<[A-Za-z_][A-Za-z_ ]*>")
    runner = CliRunner()
    checked = 0
    for path, command in _commands(typer.main.get_command(app)):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        wanted = sorted({m for t in texts for m in placeholder.findall(t)})
        if not wanted:
            continue
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert shown.exit_code == 0, shown.output
        flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", shown.output).split())
        missing = [w for w in wanted if w not in flat]
        assert not missing, (path, missing)
        checked += len(wanted)
    assert checked >= 5  # the walk reached the commands that write placeholders


def test_sources_json_is_one_object_per_source_into_a_narrow_pipe(root):
    """Every registered source with its row and its probe's state (the long error whole, its
    markup-like text kept as text), then a removed one."""
    r = vsi_wild("remove", GOOD, "--reason", "blurry", "--data-root", str(root))
    assert r.returncode == 0, r.stderr
    r = vsi_wild("sources", "--data-root", str(root), "--json", env=NARROW)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["source_id"], x["removed"]) for x in rows] == [(BAD, False), (GOOD, True)], rows
    bad, good = rows
    assert bad["probe_state"] == "failed" and bad["probe_error"] == LONG_ERROR
    assert set(schema.SOURCE.names) <= set(bad) and bad["path"] == f"/nonexistent/{BAD}.mp4"
    assert good["reason"] == "blurry" and good["removed_at"]


@pytest.mark.parametrize("command", [("verify",), ("fixes", "check")])
def test_the_review_commands_refuse_a_data_root_that_is_not_there(tmp_path, command):
    """A mistyped --data-root is an error naming it, not an empty app served over a folder made
    for the occasion."""
    missing = tmp_path / "no-such-root"
    r = vsi_wild(*command, "--data-root", str(missing), timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"no data root at {missing}" in " ".join(r.stderr.split()), r.stderr
    assert not missing.exists()
