"""Helpers of the deployment tests: commands read from README.md ("Run on a cluster"), a copy of the project, a
config for the pipeline's current stages, artifact digests, and process hygiene."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "README.md"  # its "Run on a cluster" section
BIN = Path(sys.executable).parent


def doc_block(marker: str) -> list[str]:
    """The command lines of the fenced block right after the HTML comment containing ``marker``."""
    text = DOC.read_text()
    i = text.index(marker)
    m = re.search(r"```bash\n(.*?)```", text[i:], re.S)
    assert m, f"no bash block after {marker!r} in {DOC}"
    return [line.strip() for line in m.group(1).splitlines() if line.strip() and not line.startswith("#")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_project(dst: Path) -> Path:
    """The project's files as git sees them (tracked and new, not ignored), mtimes kept."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    return dst


def small_sample_yaml(data_root: str = "data/out") -> str:
    """The small generated sample through the whole DAG on CPU backends (tests/conftest.py): the
    deployment tests exercise the machinery, not the sample's length, and stay within CI's time."""
    from conftest import SMALL_SAMPLE_CONFIG

    return SMALL_SAMPLE_CONFIG.format(root=data_root)


def artifact_digests(root: Path) -> dict[tuple[str, str, str], str]:
    """(stage, unit, file) -> sha256 of every file of every completed output under a data root,
    hashed here from the bytes on disk (not read from the manifests)."""
    out = {}
    for manifest in sorted((root / "artifacts").glob("*/*/*/_manifest.parquet")):
        unit_dir = manifest.parent
        stage, unit = unit_dir.parent.parent.name, unit_dir.parent.name
        for f in sorted(unit_dir.rglob("*")):
            if f.is_file() and f.name != "_manifest.parquet":
                out[(stage, unit, f.relative_to(unit_dir).as_posix())] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def status_rows(root: str | Path) -> dict[tuple[str, str], dict]:
    from vsi_wild.store import Store

    return {(r["stage"], r["unit"]): r for r in Store(root).status_table().to_pylist()}


def processes_with_env(name: str, value: str) -> list[psutil.Process]:
    """Live processes whose environment has ``name=value`` (how the tests find what they started)."""
    found = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and p.pid != os.getpid() and p.environ().get(name) == value:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
