"""Run vsi-wild as its users do: a Prefect server, work pools, deployments and workers.

    python -m vsi_wild.deploy yaml [--check]   write prefect.yaml from the stage registry (or check it)
    python -m vsi_wild.deploy up               server, pools, `gpu` limit, `prefect deploy`, workers
    python -m vsi_wild.deploy down             stop every process `up` started
    python -m vsi_wild.deploy status           what is running

`make deploy` / `make deploy-stop` call `up` / `down`. Everything `up` starts lives under one
folder (``--dir``, default ``.deploy/``): the server's SQLite database and home, logs, the pids,
and ``env`` (``source .deploy/env`` points the `prefect` CLI at this server). Processes are started
in their own sessions and carry a marker in their environment, so that `down` stops them and every
process they started (flow runs, Dask clusters), and nothing else.

prefect.yaml is generated (``yaml``) so that every stage in ``tasks/registry.STAGES`` has its
deployments; a test checks that the committed file is current.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

PREFECT_YAML = "prefect.yaml"
MARKER = "VSI_WILD_DEPLOY_ID"  # set in the environment of every process `up` starts
POOLS = {
    "cpu": "stages that need no GPU, and runs of the embedded sample (CPU backends)",
    "gpu": "GPU stages and production runs of the whole DAG (one worker per GPU)",
}
GPU_TAG = "gpu"  # the tag of GPU stages' task runs (flows/build.py); its limit = number of GPUs
CONFIGS = {"sample": "configs/sample.yaml", "default": "configs/default.yaml"}
INCREMENTAL_CRON = "0 3 * * *"


# ----------------------------------------------------------------------------------- prefect.yaml
def deployments() -> list[dict[str, Any]]:
    """Every deployment: the whole DAG (sample, default, incremental) and each stage's flow
    (sample, default), in registry order."""
    from vsi_wild.flows import stages as stage_flows
    from vsi_wild.tasks import registry

    def one(
        name: str,
        flow_fn: Any,
        pool: str,
        config: str,
        description: str,
        tags: list[str],
        schedules: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        return {
            "name": name,
            "entrypoint": f"{flow_fn.fn.__module__}:{flow_fn.fn.__name__}",
            "description": description,
            "tags": list(dict.fromkeys(["vsi-wild", *tags])),
            "parameters": {"config": config},
            "enforce_parameter_schema": True,
            # one run at a time per deployment: two runs on one data root would compute twice
            "concurrency_limit": 1,
            "work_pool": {"name": pool, "work_queue_name": "default", "job_variables": {}},
            "schedules": schedules or [],
        }

    from vsi_wild.flows.build import build_vsi_wild

    out = [
        one(
            "sample",
            build_vsi_wild,
            "cpu",
            CONFIGS["sample"],
            "The whole DAG on the embedded sample (CPU backends): what `make run` does.",
            ["dag", "sample"],
        ),
        one(
            "default",
            build_vsi_wild,
            "gpu",
            CONFIGS["default"],
            "The whole DAG with the production config (GPU backends) on every registered source.",
            ["dag", "production"],
        ),
        one(
            "incremental",
            build_vsi_wild,
            "gpu",
            CONFIGS["default"],
            "Scheduled production run: crawls new sources; every unit already built comes from the "
            "cache, so only new sources (and what depends on them) are computed. The schedule is off "
            "until switched on (`prefect deployment schedule resume` or the UI).",
            ["dag", "production", "scheduled"],
            schedules=[{"cron": INCREMENTAL_CRON, "timezone": "UTC", "active": False}],
        ),
    ]
    for st in registry.STAGES:
        fn = stage_flows.FLOWS[st.name]
        what = st.description or fn.description or st.name
        out.append(
            one(
                "sample",
                fn,
                "cpu",
                CONFIGS["sample"],
                f"Stage {st.name} alone on the embedded sample: {what}.",
                ["stage", st.name, "sample"],
            )
        )
        out.append(
            one(
                "default",
                fn,
                "gpu" if st.gpu else "cpu",
                CONFIGS["default"],
                f"Stage {st.name} alone with the production config: {what}. Recomputes only "
                "the units whose inputs changed (e.g. after a fix file was edited).",
                ["stage", st.name, "production"] + (["gpu"] if st.gpu else []),
            )
        )
    return out


def render_prefect_yaml() -> str:
    doc = {
        "name": "vsi-wild",
        "prefect-version": "3.9.1",
        "build": None,
        "push": None,
        # Flow runs start in the project folder (configs/ and relative data roots resolve there).
        # `make deploy` sets VSI_WILD_HOME for its workers; the Docker image sets it to /opt/vsi-wild.
        "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $VSI_WILD_HOME }}"}}],
        "deployments": deployments(),
    }
    header = (
        "# Generated by `python -m vsi_wild.deploy yaml` from tasks/registry.py and flows/: edit those,\n"
        "# then regenerate (tests/test_deploy_yaml.py fails while this file is stale).\n"
        "# Run one: prefect deployment run build-vsi-wild/sample "
        "--watch   (see README.md, section 'Run on a cluster')\n"
    )
    return header + yaml.safe_dump(doc, sort_keys=False, width=110, allow_unicode=True)


# ----------------------------------------------------------------------------------- processes
class Deployment:
    """The processes of one `up`, recorded in ``<dir>/state.json``."""

    def __init__(self, directory: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 4200):
        self.dir = Path(directory).resolve()
        self.host = host
        self.port = port
        self.home = self.dir / "prefect"
        self.logs = self.dir / "logs"
        self.state_file = self.dir / "state.json"

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}/api"

    # -------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        if self.state_file.is_file():
            return json.loads(self.state_file.read_text())
        return {"id": uuid.uuid4().hex, "processes": {}}

    def _save(self, state: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def env(self, state: dict[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "PREFECT_API_URL": self.api_url,
                "PREFECT_HOME": str(self.home),
                "VSI_WILD_HOME": str(project_dir()),
                MARKER: state["id"],
                "DO_NOT_TRACK": "1",
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            }
        )
        env.setdefault("PREFECT_WORKER_QUERY_SECONDS", "5")
        env.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
        env.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
        return env

    def alive(self, name: str, state: dict[str, Any]) -> bool:
        pid = state["processes"].get(name)
        return pid is not None and _group_alive(pid)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], state: dict[str, Any]) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        # Own session: SIGINT at its default (prefect stops on the SIGTERM we send) and one
        # process group to signal, however the caller (make, a test, a shell) was started. The
        # child keeps its own copy of the log's descriptor.
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=project_dir(),
                start_new_session=True,
            )
        state["processes"][name] = proc.pid
        self._save(state)
        return proc.pid

    # -------------------------------------------------------------- up
    def up(self, gpus: int | None = None, say: Any = print) -> dict[str, Any]:
        state = self.state()
        self.home.mkdir(parents=True, exist_ok=True)
        env = self.env(state)
        try:
            self._server(state, env, say)
            n_gpus = detect_gpus() if gpus is None else gpus
            self._pools(env, n_gpus, say)
            say("deploying (prefect --no-prompt deploy --all) ...")
            _prefect(["--no-prompt", "deploy", "--all"], env)
            self._workers(state, env, n_gpus, say)
        except BaseException:
            say(f"deploy failed: stopping what was started (logs in {self.logs})")
            self.down(say=lambda *_: None)
            raise
        self._write_env_file()
        state["api_url"] = self.api_url
        state["gpus"] = n_gpus
        self._save(state)
        rel = os.path.relpath(self.dir, Path.cwd())
        say("")
        say(f"Prefect server: http://{self.host}:{self.port}  (UI and API; state in {rel}/)")
        say(f"work pools: cpu, gpu; tag '{GPU_TAG}' limited to {max(1, n_gpus)} concurrent task runs")
        say("Run the pipeline on the embedded sample:")
        say(f"  source {rel}/env && prefect deployment run build-vsi-wild/sample --watch")
        say("Stop everything: make deploy-stop")
        return state

    def _server(self, state: dict[str, Any], env: dict[str, str], say: Any) -> None:
        if self.alive("server", state) and _healthy(self.api_url):
            say(f"server already running at {self.api_url}")
            return
        if _port_in_use(self.host, self.port):
            raise DeployError(
                f"port {self.port} on {self.host} is in use by another program: "
                "choose another with DEPLOY_PORT=... (make deploy DEPLOY_PORT=4300)"
            )
        say(f"starting the Prefect server on {self.host}:{self.port} ...")
        db = env.get("PREFECT_API_DATABASE_CONNECTION_URL", f"SQLite {self.home / 'prefect.db'}")
        say(f"  database: {db.split('@')[-1]}")
        self._spawn(
            "server",
            [sys.executable, "-m", "prefect", "server", "start", "--host", self.host, "--port", str(self.port)],
            env,
            state,
        )
        deadline = time.monotonic() + float(os.environ.get("DEPLOY_SERVER_TIMEOUT", "180"))
        while not _healthy(self.api_url):
            if not self.alive("server", state):
                raise DeployError(f"the Prefect server exited:\n{_tail(self.logs / 'server.log')}")
            if time.monotonic() > deadline:
                raise DeployError(
                    f"the Prefect server did not answer at {self.api_url}/health:\n{_tail(self.logs / 'server.log')}"
                )
            time.sleep(0.5)

    def _pools(self, env: dict[str, str], gpus: int, say: Any) -> None:
        """Work pools cpu and gpu (process type) and the `gpu` tag's limit, through the API (what
        `prefect work-pool create NAME --type process` and `prefect concurrency-limit create gpu N`
        do, without starting the CLI three more times)."""
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
        from prefect.exceptions import ObjectAlreadyExists
        from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings
        from prefect.workers.process import ProcessWorker

        # No GPU: GPU stages run on CPU (the sample's backends), still one at a time.
        limit = max(1, gpus)
        settings = {PREFECT_API_URL: self.api_url, PREFECT_HOME: str(self.home)}
        with temporary_settings(updates=settings), get_client(sync_client=True) as client:
            template = ProcessWorker.get_default_base_job_template()
            for pool, description in POOLS.items():
                try:
                    client.create_work_pool(
                        WorkPoolCreate(name=pool, type="process", description=description, base_job_template=template)
                    )
                except ObjectAlreadyExists:
                    client.update_work_pool(pool, WorkPoolUpdate(description=description))
            client.create_concurrency_limit(tag=GPU_TAG, concurrency_limit=limit)
        say(f"work pools cpu and gpu (process); concurrency limit of tag '{GPU_TAG}' = {limit}")

    def _workers(self, state: dict[str, Any], env: dict[str, str], gpus: int, say: Any) -> None:
        py = [sys.executable, "-m", "prefect", "worker", "start", "--type", "process"]
        if not self.alive("worker-cpu", state):
            self._spawn("worker-cpu", [*py, "--pool", "cpu", "--name", f"cpu-{socket.gethostname()}"], env, state)
        # One gpu worker per GPU, each seeing its own device; one flow run at a time on it. A
        # worker is long-lived; its flow runs load each model once per run (per-process model
        # cache), whatever the number of units.
        for i in range(max(1, gpus)):
            name = f"worker-gpu{i}"
            if self.alive(name, state):
                continue
            wenv = dict(env)
            if gpus:
                wenv["CUDA_VISIBLE_DEVICES"] = str(i)
            self._spawn(
                name, [*py, "--pool", "gpu", "--limit", "1", "--name", f"gpu{i}-{socket.gethostname()}"], wenv, state
            )
        say(f"workers: {', '.join(n for n in state['processes'] if n.startswith('worker'))} (logs in {self.logs})")

    def _write_env_file(self) -> None:
        (self.dir / "env").write_text(
            "# source this file: the prefect CLI then talks to the server `make deploy` started\n"
            f"export PREFECT_API_URL={self.api_url}\n"
            f"export PREFECT_HOME={self.home}\n"
            # the venv's `prefect` and `vsi-wild` (make does not activate it)
            f"export PATH={Path(sys.executable).parent}:$PATH\n"
        )

    # -------------------------------------------------------------- down
    def down(self, say: Any = print, timeout_s: float = 30.0) -> list[int]:
        """Stop every process of this deployment (workers first, the server last); return the pids
        that had to be killed (did not stop on SIGTERM)."""
        state = self.state()
        procs = state.get("processes", {})
        order = sorted(procs, key=lambda n: n == "server")
        killed: list[int] = []
        for name in order:
            pid = procs[name]
            if not _group_alive(pid):
                continue
            say(f"stopping {name} (pid {pid})")
            _signal_group(pid, signal.SIGTERM)
            if not _wait_gone(lambda pid=pid: _group_alive(pid), timeout_s):  # called in this iteration
                _signal_group(pid, signal.SIGKILL)
                killed.append(pid)
        # Processes that left their group (flow runs start in their own sessions) carry the marker.
        for pid in marked_processes(state["id"]):
            say(f"stopping leftover pid {pid}")
            _signal_pid(pid, signal.SIGTERM)
            if not _wait_gone(lambda pid=pid: _pid_alive(pid), 10):  # called in this iteration
                _signal_pid(pid, signal.SIGKILL)
                killed.append(pid)
        state["processes"] = {}
        if self.dir.is_dir():
            self._save(state)
            (self.dir / "env").unlink(missing_ok=True)
        return killed

    def status(self) -> dict[str, bool]:
        state = self.state()
        return {name: _group_alive(pid) for name, pid in state.get("processes", {}).items()}


class DeployError(RuntimeError):
    pass


def project_dir() -> Path:
    """The project folder (prefect.yaml, configs/): VSI_WILD_HOME, else the working directory.

    Not ``stages.crawl.params.project_home``, whose fallback is an editable install's checkout: a
    deployment serves the project it is started from (a copy of the project with its own configs, as
    tests/test_deploy_e2e.py deploys, or the image's /opt/vsi-wild), and its workers start there."""
    return Path(os.environ.get("VSI_WILD_HOME") or Path.cwd()).resolve()


def detect_gpus() -> int:
    """Number of NVIDIA GPUs (``nvidia-smi -L``); 0 when there is none or no driver."""
    if os.environ.get("DEPLOY_GPUS"):
        return int(os.environ["DEPLOY_GPUS"])
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def marked_processes(deploy_id: str) -> list[int]:
    """Pids of live processes whose environment carries this deployment's marker."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and p.environ().get(MARKER) == deploy_id:
                found.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return found


def _prefect(args: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        env=env,
        cwd=project_dir(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    if check and out.returncode != 0:
        raise DeployError(
            f"`prefect {' '.join(args)}` failed ({out.returncode}):\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
        )
    return out


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is alive (zombies, dead but not yet reaped, are not)."""
    import psutil

    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


def _pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_gone(alive: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# ----------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vsi_wild.deploy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)
    y = sub.add_parser("yaml", help="write prefect.yaml from the stage registry")
    y.add_argument("--check", action="store_true", help="exit 1 when prefect.yaml is not current")
    for name in ("up", "down", "status"):
        p = sub.add_parser(name)
        p.add_argument("--dir", default=os.environ.get("DEPLOY_DIR", ".deploy"), help="state folder (DEPLOY_DIR)")
        p.add_argument("--host", default=os.environ.get("DEPLOY_HOST", "127.0.0.1"))
        p.add_argument("--port", type=int, default=int(os.environ.get("DEPLOY_PORT", "4200")))
        if name == "up":
            p.add_argument("--gpus", type=int, default=None, help="GPU count (default: DEPLOY_GPUS or nvidia-smi)")
    args = ap.parse_args(argv)
    if args.command == "yaml":
        path = project_dir() / PREFECT_YAML
        text = render_prefect_yaml()
        if args.check:
            if not path.is_file() or path.read_text() != text:
                print(f"{path} is stale: run `python -m vsi_wild.deploy yaml`", file=sys.stderr)
                return 1
            return 0
        path.write_text(text)
        print(f"wrote {path}")
        return 0
    dep = Deployment(args.dir, args.host, args.port)
    if args.command == "up":
        try:
            dep.up(gpus=args.gpus)
        except DeployError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    elif args.command == "down":
        dep.down()
    else:
        for name, alive in dep.status().items():
            print(f"{name}: {'running' if alive else 'stopped'}")
    return 0


if __name__ == "__main__":
    from vsi_wild.process_exit import exit_process

    exit_process(main())  # `up` and `yaml` load pyarrow, whose teardown can abort a clean exit
