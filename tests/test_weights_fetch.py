"""`vsi-wild weights fetch|check|list` without the internet: a local HTTP server on 127.0.0.1 answers
the way the Hugging Face Hub answers huggingface_hub's `hf_hub_download` (HEAD and GET of
`{endpoint}/{repo}/resolve/{revision}/{file}` with X-Repo-Commit, X-Linked-Etag and X-Linked-Size,
a redirect to the file's blob, Range requests, 401/403 with X-Error-Code: GatedRepo for a gated
repo), and serves plain release URLs; `HF_ENDPOINT` points at it, so the real download code runs."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import threading
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vsi_wild.config import Config
from vsi_wild.stages.backends import base as backends
from vsi_wild.stages.backends import weights as W
from vsi_wild.stages.backends.params import weight_statuses
from vsi_wild.weights import FetchError, NeededWeight, fetch

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_granted"


class FakeHub(http.server.ThreadingHTTPServer):
    """Files by URL path: ``/{repo}/resolve/{rev}/{name}`` (Hub) or any other path (a release).
    ``cut`` names paths whose first GET stops halfway; ``gated`` repos need ``Bearer hf_granted``."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.hub: dict[tuple[str, str], bytes] = {}
        self.plain: dict[str, bytes] = {}
        self.gated: set[str] = set()
        self.cut: set[str] = set()
        self.requests: list[tuple[str, str, str]] = []  # (method, path, Range)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    server: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool):
        srv, path = self.server, self.path.split("?")[0]
        srv.requests.append((self.command, path, self.headers.get("Range", "")))
        parts = path.strip("/").split("/")
        if "resolve" in parts:
            i = parts.index("resolve")
            repo, name = "/".join(parts[:i]), "/".join(parts[i + 2 :])
            if repo in srv.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._status(
                    401 if "Authorization" not in self.headers else 403,
                    {"X-Error-Code": "GatedRepo", "X-Error-Message": f"Access to model {repo} is restricted."},
                )
            data = srv.hub.get((repo, name))
            if data is None:
                return self._status(404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
            sha = hashlib.sha256(data).hexdigest()
            # an LFS file: the Hub redirects to its blob on another host (here: the same server by
            # another name) and names it in X-Linked-* headers
            return self._status(
                302,
                {
                    "Location": f"http://localhost:{srv.server_address[1]}/blobs/{sha}",
                    "X-Repo-Commit": COMMIT,
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(data)),
                    "ETag": f'"{sha}"',
                },
            )
        if parts[0] == "blobs":
            data = next((d for d in srv.hub.values() if hashlib.sha256(d).hexdigest() == parts[1]), None)
        else:
            data = srv.plain.get(path)
        if data is None:
            return self._status(404, {})
        self._send(path, data, body)

    def _send(self, path: str, data: bytes, body: bool):
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.end_headers()
        if not body:
            return
        chunk = data[start:]
        if path in self.server.cut:
            self.server.cut.discard(path)
            self.wfile.write(chunk[: len(chunk) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)  # cut midway: the client sees a short body
            return
        self.wfile.write(chunk)

    def _status(self, code: int, headers: dict[str, str]):
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def hub(monkeypatch):
    from huggingface_hub import constants

    srv = FakeHub()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
        W.forget_digests()


def _needed(path: Path, source: W.WeightSource, key: str = "models.sam3_checkpoint") -> NeededWeight:
    return NeededWeight(("segmenter/test",), W.check_weight(key, path, source, path.parent))


def test_a_hub_file_downloads_resuming_after_a_cut_connection(tmp_path, hub, monkeypatch):
    from huggingface_hub import constants

    # the client writes what it received in DOWNLOAD_CHUNK_SIZE pieces (10 MB): smaller ones here,
    # so that a 1 MiB file cut halfway has its first half on disk when the connection drops
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1 << 16)
    data = bytes(range(256)) * 4096  # 1 MiB
    hub.hub[("org/model", "model.pt")] = data
    hub.cut.add(f"/blobs/{hashlib.sha256(data).hexdigest()}")
    src = W.WeightSource(files=("model.pt",), repo_id="org/model", sha256=hashlib.sha256(data).hexdigest())
    target = tmp_path / "w" / "m" / "renamed.pt"
    done = fetch(_needed(target, src), tmp_path / "w", progress=lambda m: None)
    assert done.state == "present" and target.read_bytes() == data
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.startswith("/blobs/")]
    assert ranges[0] == "" and ranges[1] == f"bytes={len(data) // 2}-"  # the second GET resumed
    # present: nothing is downloaded again
    n = len(hub.requests)
    assert fetch(_needed(target, src), tmp_path / "w").state == "present" and len(hub.requests) == n


def test_a_folder_weight_downloads_each_file_of_its_source(tmp_path, hub):
    hub.hub[("depth/DA3", "config.json")] = b'{"a": 1}'
    hub.hub[("depth/DA3", "model.safetensors")] = b"\x00" * 5000
    src = W.WeightSource(files=("config.json", "model.safetensors"), repo_id="depth/DA3")
    target = tmp_path / "w" / "da3" / "DA3"
    assert fetch(_needed(target, src, "models.da3_model_dir"), tmp_path / "w", progress=lambda m: None).usable
    assert (target / "model.safetensors").read_bytes() == b"\x00" * 5000
    # huggingface_hub's metadata under .cache/ is not part of the weight's content
    assert [name for name, _ in W.content_digest(target)] == ["config.json", "model.safetensors"]


def test_a_checksum_mismatch_is_refused_and_nothing_is_left_in_place(tmp_path, hub):
    hub.hub[("org/model", "model.pt")] = b"tampered"
    src = W.WeightSource(files=("model.pt",), repo_id="org/model", sha256=hashlib.sha256(b"genuine").hexdigest())
    target = tmp_path / "w" / "model.pt"
    with pytest.raises(FetchError, match="wrong checksum"):
        fetch(_needed(target, src), tmp_path / "w", progress=lambda m: None)
    assert not target.exists()


@pytest.mark.parametrize("token, status", [(None, 401), ("hf_other", 403)])
def test_a_gated_repo_without_access_says_how_to_request_it(tmp_path, hub, monkeypatch, token, status):
    hub.hub[("facebook/sam3", "sam3.pt")] = b"weights"
    hub.gated.add("facebook/sam3")
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    with pytest.raises(FetchError) as e:
        fetch(_needed(tmp_path / "sam3.pt", W.SAM3), tmp_path, progress=lambda m: None)
    msg = str(e.value)
    assert f"facebook/sam3 is gated (HTTP {status}" in msg and "https://huggingface.co/facebook/sam3" in msg
    assert "accept its license" in msg and "HF_TOKEN" in msg and W.SAM3.license in msg
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # with access granted it downloads
    assert fetch(_needed(tmp_path / "sam3.pt", W.SAM3), tmp_path, progress=lambda m: None).usable


def test_a_release_url_resumes_with_a_range_request_and_unpacks_an_archive_member(tmp_path, hub):
    onnx = b"onnx-bytes" * 10000
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("pack/other.onnx", b"x")
        z.writestr("pack/scrfd.onnx", onnx)
    hub.plain["/release/pack.zip"] = buf.getvalue()
    hub.cut.add("/release/pack.zip")
    src = W.WeightSource(
        files=("scrfd.onnx",),
        url=f"{hub.url}/release/pack.zip",
        archive_member="scrfd.onnx",
        sha256=hashlib.sha256(onnx).hexdigest(),
    )
    target = tmp_path / "scrfd" / "scrfd.onnx"
    target.parent.mkdir()
    assert fetch(_needed(target, src, "faces.scrfd_weights"), tmp_path, progress=lambda m: None).usable
    assert target.read_bytes() == onnx and not list(target.parent.glob("*.part"))
    ranges = [r for m, p, r in hub.requests if p == "/release/pack.zip"]
    assert ranges[0] == "" and ranges[1].startswith("bytes=") and ranges[1] != "bytes=0-"


def test_the_cli_lists_checks_and_fetches_a_configs_weights(tmp_path, hub, monkeypatch):
    """`vsi-wild weights` over a config whose segmenter declares a source on the local Hub: list
    says where it comes from, check exits 1 while it is missing and 0 once fetched."""
    from vsi_wild.cli import app

    hub.hub[("org/seg", "seg.pt")] = b"segmenter weights"
    src = W.WeightSource(files=("seg.pt",), repo_id="org/seg", license="MIT")
    backends.register(
        "segmenter",
        "test_fetched",
        fields=("sam3_checkpoint",),
        weights=("sam3_checkpoint",),
        sources={"sam3_checkpoint": src},
    )(lambda ctx: None)
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            f"segment: {{backend: test_fetched}}\nmodels: {{weights_dir: {tmp_path / 'w'}, "
            f"sam3_checkpoint: seg/seg.pt}}\n"
        )
        run = CliRunner().invoke
        listed = [json.loads(x) for x in run(app, ["weights", "list", "-c", str(cfg), "--json"]).output.splitlines()]
        (seg,) = [r for r in listed if r["key"] == "models.sam3_checkpoint"]
        assert seg["origin"] == "hf://org/seg@main/seg.pt" and seg["state"] == "missing" and seg["license"] == "MIT"
        checked = run(app, ["weights", "check", "-c", str(cfg), "--only", "sam3_checkpoint"])
        assert checked.exit_code == 1 and "missing" in checked.output
        fetched = run(app, ["weights", "fetch", "-c", str(cfg), "--only", "models.sam3_checkpoint"])
        assert fetched.exit_code == 0, fetched.output
        assert (tmp_path / "w" / "seg" / "seg.pt").read_bytes() == b"segmenter weights"
        assert run(app, ["weights", "check", "-c", str(cfg), "--only", "sam3_checkpoint"]).exit_code == 0
        unknown = run(app, ["weights", "check", "-c", str(cfg), "--only", "nope"])
        assert unknown.exit_code == 2 and "no weight nope" in unknown.output
        models = Config.model_validate(
            {"models": {"weights_dir": str(tmp_path / "w"), "sam3_checkpoint": "seg/seg.pt"}}
        ).models
        assert [s.state for s in weight_statuses(backends.spec("segmenter", "test_fetched"), models)] == ["present"]
    finally:
        del backends._SPECS["segmenter"]["test_fetched"]
