"""Shared test setup: offline model hubs, a private Prefect home, small media helpers."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Offline everywhere: no test may reach a model hub; Prefect state stays inside the test session.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
# ultralytics reads its settings folder when imported, which test modules do while being collected,
# before any fixture runs: one folder per test process, removed when it exits
if "YOLO_CONFIG_DIR" not in os.environ:
    os.environ["YOLO_CONFIG_DIR"] = tempfile.mkdtemp(prefix="vsi-yolo-")
    atexit.register(shutil.rmtree, os.environ["YOLO_CONFIG_DIR"], True)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _private_homes(tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("homes")
    os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
    os.environ.setdefault("MPLCONFIGDIR", str(home / "mpl"))


def load_bench(name: str):
    """The module bench/<name>.py (the benchmarks are scripts, not a package), registered under its name."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def make_video(
    path: Path,
    width: int = 256,
    height: int = 128,
    fps: float = 8,
    seconds: float = 3,
    source: str = "testsrc2",
    extra: list[str] | None = None,
) -> Path:
    """A small H.264 test video made by ffmpeg's lavfi sources."""
    cmd = [
        "ffmpeg",
        "-v",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        f"{source}=size={width}x{height}:rate={fps}:duration={seconds}",
        *(extra or []),
        "-c:v",
        "libx264",
        "-pix_fmt",
        "yuv420p",
        str(path),
    ]
    subprocess.run(cmd, check=True)
    return path


# A short, small sample through the whole DAG on CPU backends: several units per stage (4 views,
# 2 clips each), about a minute or two of work. Tests format it with their own data root.
SMALL_SAMPLE_CONFIG = """
run: {{data_root: {root}, workers: 2}}
sample: {{source_id: sample-small, duration_s: 16, width: 512, fps: 8}}
project: {{width: 320, height: 180}}
candidates: {{embedder: minilm}}
detect: {{backend: groundtruth}}
segment: {{backend: groundtruth, clip_seconds: 8, appearance: histogram}}
pose: {{backend: twoview}}
metadata: {{motion_clip_seconds: 8}}
qa: {{clip_seconds: 8}}
"""


def small_sample_config(path: Path, root: Path) -> Path:
    path.write_text(SMALL_SAMPLE_CONFIG.format(root=root))
    return path


def vsi_wild(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 1800
) -> subprocess.CompletedProcess:
    """Run the installed CLI as a user would (a separate process)."""
    exe = Path(sys.executable).with_name("vsi-wild")
    return subprocess.run(
        [str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


# ------------------------------------------------------------------------------ browser tests
# Pages are driven in Debian's chromium through pytest-playwright's `page` / `browser` fixtures
# (`playwright install` cannot download a browser here: the launch points at the system binary).
# Screenshots go to $VSI_WILD_SCREENSHOTS, to be looked at (default: the tests' tmp folder, which
# pytest removes when the session passes: tmp_path_retention_policy in pyproject.toml).
def chromium_executable() -> str:
    import shutil

    for candidate in (os.environ.get("CHROME"), "/usr/lib/chromium/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("no chromium: apt-get install chromium (the Makefile's setup does)")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": chromium_executable(), "args": ["--no-sandbox"]}


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = Path(os.environ.get("VSI_WILD_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d


# ------------------------------------------------------------------------------ the sample store
@pytest.fixture(scope="session")
def sample_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """configs/sample.yaml through the whole DAG once per session (`vsi-wild run`, in its own
    process: a browser test's event loop may already run in this one): the data root and the
    run's output. Tests read it; a test that writes copies it first (`copy_root`)."""
    root = tmp_path_factory.mktemp("sample-root")
    result = vsi_wild("run", "-c", str(REPO / "configs" / "sample.yaml"), "--data-root", str(root))
    assert result.returncode == 0, result.stdout + result.stderr
    return root, result.stdout


def copy_root(src: Path, dst: Path) -> Path:
    """A private copy of a data root, files hard-linked: the store never writes a file in place
    (new files are renamed over old ones), so the copy's writes leave the original as it was."""
    import shutil

    shutil.copytree(src, dst, symlinks=True, copy_function=os.link)
    return dst


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Browser tests last, and every module's tests together in file order.

    pytest groups the tests that share pytest-playwright's session-scoped browser parameter across
    modules; that split test_verify.py, whose module-scoped data root was made twice (a test then
    missed the fix file an earlier one wrote). And once a browser test has started Playwright's event
    loop in this process, a Prefect flow run in process (the CLI through CliRunner) gets coroutines
    back: those tests must come first."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    browser_modules = {module(i) for i in items if {"page", "browser", "context"} & set(getattr(i, "fixturenames", ()))}
    position = {id(i): n for n, i in enumerate(sorted(items, key=lambda i: (module(i), i.location[1] or 0)))}
    items.sort(key=lambda i: (module(i) in browser_modules, position[id(i)]))
