"""A local stand-in for the Hugging Face Hub's HTTP API, as much as `vsi-wild release --push` uses
through huggingface_hub's client: create a repository, validate README.md's metadata, preupload (every
file "regular": sent in the commit itself), commit (NDJSON, base64 contents), tag. It records what it
was sent so that a test can compare it with the release folder. Listens on 127.0.0.1 only."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Hub:
    def __init__(self):
        self.files, self.tags, self.requests, self.repos, self.validated = {}, {}, [], [], []
        hub = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, obj, code=200):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                hub.requests.append(("GET", self.path))
                self._send({"error": "not here"}, 404)

            def do_HEAD(self):
                hub.requests.append(("HEAD", self.path))
                self.send_response(404)
                self.end_headers()

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hub.requests.append(("POST", self.path))
                p = self.path.split("?")[0]
                if p == "/api/repos/create":
                    req = json.loads(body)
                    hub.repos.append(req)
                    return self._send({"url": f"{hub.url}/datasets/{req.get('organization')}/{req['name']}"})
                if p == "/api/validate-yaml":
                    req = json.loads(body)
                    hub.validated.append(req)
                    ok = req["content"].startswith("---\n") and "\n---\n" in req["content"][4:]
                    return self._send({} if ok else {"errors": [{"message": "no YAML header"}]}, 200 if ok else 400)
                if "/preupload/" in p:
                    req = json.loads(body)
                    return self._send(
                        {
                            "files": [
                                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                for f in req["files"]
                            ]
                        }
                    )
                if "/commit/" in p:
                    for line in body.decode().splitlines():
                        item = json.loads(line)
                        if item["key"] == "file":
                            hub.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    return self._send(
                        {
                            "commitUrl": hub.url + "/datasets/me/vsi/commit/0123456789abcdef0123456789abcdef01234567",
                            "commitOid": "0123456789abcdef0123456789abcdef01234567",
                            "pullRequestUrl": None,
                        }
                    )
                if "/tag/" in p:
                    hub.tags[p] = json.loads(body or b"{}")
                    return self._send({})
                self._send({"error": p}, 404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
