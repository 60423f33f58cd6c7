"""exit_process ends a command as the interpreter would (threads joined, atexit run, streams flushed,
the code kept), and `python -m vsi_wild.deploy` ends through it with its own exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

_SCRIPT = r"""
import atexit, sys, threading, time
from pathlib import Path
from vsi_wild.process_exit import exit_process
out = Path(sys.argv[1])
def late_writer():  # a non-daemon thread still working when the command returns
    time.sleep(0.3)
    (out / "thread").write_text("done")
threading.Thread(target=late_writer).start()
atexit.register(lambda: (out / "atexit").write_text("ran"))
sys.stdout.write("no newline, buffered")  # a pipe's stdout is block-buffered: lost without a flush
exit_process({code})
"""


@pytest.mark.parametrize("code, rc, stderr", [(None, 0, ""), (3, 3, ""), ("bad input: x.yaml", 1, "bad input: x.yaml")])
def test_exit_process_ends_as_the_interpreter_would_with_the_commands_code(tmp_path, code, rc, stderr):
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(code=repr(code)), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == rc, r.stderr
    assert r.stdout == "no newline, buffered"
    assert r.stderr.strip() == stderr
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"


def test_deploy_module_ends_through_exit_process_with_its_exit_codes(tmp_path):
    """`yaml --check` loads the stage registry (pyarrow) and returns 0 or 1 from main(): both codes
    must reach the shell, and the message its stderr, through exit_process."""

    def check(home: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "vsi_wild.deploy", "yaml", "--check"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env={**os.environ, "VSI_WILD_HOME": str(home)},
        )

    current = check(REPO)
    assert current.returncode == 0 and current.stderr == "", current.stderr
    (tmp_path / "prefect.yaml").write_text("stale: true\n")
    stale = check(tmp_path)
    assert stale.returncode == 1
    assert f"{tmp_path / 'prefect.yaml'} is stale" in stale.stderr
