"""The same bytes on any machine: a source projected by a process that may use one CPU and by one
that may use every CPU gives the same view videos (x264's thread count is pinned by
``project.encoder_threads``; its automatic count follows the CPUs a process may use). The control:
with the encoder left to its automatic count, the two processes disagree, so the test can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from project_media import ffmpeg

SCRIPT = """
import hashlib, json, os, sys
from vsi_wild.stages.faces import FaceParams, make_detector
from vsi_wild.stages.project import ProjectParams, project_source
cpus, src, out, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
params = ProjectParams(width=320, height=192, **({"encoder_threads": threads} if threads else {}))
if not threads:  # the control: the encoder's automatic thread count
    params = params.model_copy(update={"encoder_threads": 0})
views, _ = project_source(src, out, params, make_detector(FaceParams()), source_id="local-aff-0001")
print(json.dumps({r["video_id"]: hashlib.sha256(open(os.path.join(out, r["path"]), "rb").read()).hexdigest()
                  for r in views.to_pylist()}))
"""


def _project(tmp: Path, src: Path, cpus: set[int], threads: int) -> dict[str, str]:
    out = tmp / f"out-{'-'.join(map(str, sorted(cpus)))}-{threads}"
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(map(str, sorted(cpus))), str(src), str(out), str(threads)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_views_are_the_same_bytes_under_any_cpu_limit(tmp_path):
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("this process may use one CPU only: nothing to compare it with")
    src = tmp_path / "pano.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=512x256:rate=10:duration=2", "-pix_fmt", "yuv420p", str(src))
    one, every = {min(cpus)}, set(cpus)
    pinned_one, pinned_every = _project(tmp_path, src, one, 2), _project(tmp_path, src, every, 2)
    assert len(pinned_one) == 4 and pinned_one == pinned_every
    auto_one, auto_every = _project(tmp_path, src, one, 0), _project(tmp_path, src, every, 0)
    assert auto_one != auto_every  # the automatic count does depend on the CPUs: the pin is what holds
