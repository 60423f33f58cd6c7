"""An environment with lmms-eval for the release tests, built once and cached.

lmms-eval (0.7.3, from PyPI) pins `av<16` and `wandb==0.25.0` (so `protobuf<7`); the pipeline encodes
its view videos with PyAV 18, whose bundled FFmpeg/x264 make the bytes every cache key depends on, so
lmms-eval cannot share the project's environment. It gets its own venv layered on the project's
(a .pth file puts the project's site-packages after the venv's own, so torch, datasets and
transformers are not installed twice), into which pip installs lmms-eval with what it needs that
the project lacks or pins otherwise (av 15, protobuf 6, ...): the project's environment is not
touched. Cached under $VSI_WILD_CACHE (default ~/.cache/vsi-wild), keyed by the lmms-eval version and
the project's site-packages.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

LMMS_EVAL = "lmms-eval==0.7.3"


def lmms_eval_python() -> Path:
    # every site-packages folder this interpreter sees (a worktree's venv reaches the shared one through a .pth)
    base = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    key = hashlib.sha256("\n".join([LMMS_EVAL, sys.version, *base]).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("VSI_WILD_CACHE", Path.home() / ".cache" / "vsi-wild"))
    env = cache / f"lmms-eval-{key}"
    python = env / "bin" / "python"
    if (env / ".complete").is_file():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    site_dir = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site_dir / "_vsi_wild_base.pth").write_text("".join(f"{p}\n" for p in base))
    res = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-cache-dir", LMMS_EVAL],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    if res.returncode != 0:
        raise RuntimeError(f"could not install {LMMS_EVAL} into {env}: {res.stderr[-2000:]}")
    (env / ".complete").write_text(LMMS_EVAL + "\n")
    return python
