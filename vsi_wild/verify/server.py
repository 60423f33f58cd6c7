"""The verification app's HTTP server (FastAPI): pages, the store's data as JSON, the view videos
with range requests, and the few POSTs that write fix files, progress files or start a re-derive.

Access: every POST carries the session token (header ``X-Verify-Token``; the pages get it in a
``<meta>`` tag). Bound to anything but loopback, or given a token, every request must carry it
(header, ``?token=`` once, then a same-site cookie). Ids in URLs are looked up in the store
(``Catalog.video``); files are served only from the outputs named by status rows.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import uuid
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import cv2
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from vsi_wild.config import Config
from vsi_wild.stages import fixes as fx
from vsi_wild.store import Store
from vsi_wild.verify import drafts, fixfile, progress
from vsi_wild.verify.catalog import NotFound, NotReady
from vsi_wild.verify.masks import MaskServer
from vsi_wild.verify.queue import Queue
from vsi_wild.verify.review import Review

STATIC = Path(str(resources.files("vsi_wild.verify") / "static"))
TOKEN_HEADER = "X-Verify-Token"
REVIEWER_HEADER = "X-Verify-Reviewer"
TOKEN_COOKIE = "vsi_verify_token"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
PAGES = {
    "videos": "index.html",
    "temporal": "temporal.html",
    "spatial": "spatial.html",
    "questions": "questions.html",
    "queue": "queue.html",
    "vocabulary": "vocabulary.html",
}


class FixesBody(BaseModel):
    fixes: list[dict[str, Any]]


class DraftBody(BaseModel):
    action: Literal["add", "drop", "discard", "undo", "redo", "clear"]
    fixes: list[dict[str, Any]] | None = None
    index: int | None = None


class SaveBody(BaseModel):
    edits: list[dict[str, Any]] | None = Field(None, description="save only these (e.g. a verdict), not the draft")


class RestoreBody(BaseModel):
    version: int
    sha256: str


class BadRequest(ValueError):
    """A request the app cannot act on as sent (e.g. a reviewer name it cannot file a draft under)."""


def default_reviewer_name() -> str:
    """The reviewer fixes are recorded under when a page names none: the login name."""
    import getpass

    try:
        name = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container): a plain default
        name = "reviewer"
    return name if drafts.REVIEWER.match(name) else "reviewer"


class ProgressBody(BaseModel):
    progress: progress.Patch


class Rederive:
    """One background re-derive at a time: the video's segment clips (a drawn box is segmented there;
    cached otherwise), reconcile, metadata and qa units, then export and report, through the engine
    (inline in a thread), with the engine's events as progress."""

    # segment and reconcile too: a box a reviewer drew is segmented there (cached where none changed)
    STAGES = ("segment", "reconcile", "metadata", "qa", "export", "report")

    def __init__(self, config: Config, store: Store):
        self.config, self.store = config, store
        self.jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def start(self, video_id: str | list[str]) -> dict[str, Any]:
        """Re-derive one video (or several: a vocabulary change touches every video)."""
        videos = [video_id] if isinstance(video_id, str) else list(video_id)
        with self._lock:
            busy = next((j for j in self.jobs.values() if j["state"] == "running"), None)
            if busy is not None:
                raise RuntimeError(f"a re-derive of {busy['video_id']} is running: wait for it")
            total = 0  # counted from the plan when it starts
            job: dict[str, Any] = {
                "id": uuid.uuid4().hex[:12],
                "video_id": ", ".join(videos),
                "videos": videos,
                "state": "running",
                "events": [],
                "summary": None,
                "total": total,
            }
            self.jobs[job["id"]] = job
        threading.Thread(target=self._run, args=(job,), daemon=True, name=f"rederive-{video_id}").start()
        return job

    def _run(self, job: dict[str, Any]) -> None:
        from vsi_wild.tasks import engine, registry

        me = threading.current_thread()

        def listen(event: str, p: dict[str, Any]) -> None:
            if threading.current_thread() is me and event in ("stage", "start", "end", "stage_failed"):
                outcome = p.get("outcome")
                job["events"].append(
                    {
                        "event": event,
                        "stage": p.get("stage"),
                        "unit": p.get("unit"),
                        "state": getattr(outcome, "state", None),
                        "error": getattr(outcome, "error", None) or p.get("error"),
                    }
                )

        engine.add_listener(listen)
        try:
            stages = [registry.stage(n) for n in self.STAGES]
            plan = engine.Plan.load(
                self.config, self.store, registry.STAGES, selection=engine.Selection(frozenset(job["videos"]))
            )
            job["total"] = sum(len(plan.units_of(s)) for s in stages)  # the units it runs (cached ones too)
            engine.run_stages(plan, stages, engine.run_inline(plan))
            job["summary"] = engine.summarize(plan, self.store.url)
            job["state"] = "failed" if job["summary"]["failed"] else "done"
        except Exception as e:  # noqa: BLE001 - shown on the page
            job["state"], job["error"] = "failed", f"{type(e).__name__}: {e}"
        finally:
            engine.remove_listener(listen)


def create_app(
    config: Config, store: Store, token: str | None = None, require_token: bool = False, reviewer: str | None = None
) -> FastAPI:
    """The app over one data root. ``token``: the session's (generated when None); with
    ``require_token`` every request needs it, else only the POSTs do. ``reviewer``: the name fixes
    are recorded under when a page does not send its own (``X-Verify-Reviewer``)."""
    review = Review(config, store)
    queue = Queue(review)
    default_reviewer = drafts.check_reviewer(reviewer or default_reviewer_name())
    masks = MaskServer(review.catalog)
    rederive = Rederive(config, store)
    token = token or secrets.token_urlsafe(24)
    app = FastAPI(title="vsi-wild verify", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.token, app.state.review = token, review

    def token_ok(value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), token.encode())

    @app.middleware("http")
    async def guard(request: Request, call_next):
        via_query = token_ok(request.query_params.get("token"))
        if request.method == "POST" and not token_ok(request.headers.get(TOKEN_HEADER)):
            return JSONResponse({"error": f"a POST needs the session token ({TOKEN_HEADER})"}, status_code=403)
        if require_token and not (
            via_query or token_ok(request.headers.get(TOKEN_HEADER)) or token_ok(request.cookies.get(TOKEN_COOKIE))
        ):
            return JSONResponse(
                {"error": "missing or wrong token: open the URL `vsi-wild verify` printed"}, status_code=401
            )
        response = await call_next(request)
        if via_query:
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return response

    @app.exception_handler(NotFound)
    async def not_found(request: Request, e: NotFound):
        return JSONResponse({"error": review.relative(str(e))}, status_code=404)

    @app.exception_handler(NotReady)
    async def not_ready(request: Request, e: NotReady):
        return JSONResponse({"error": review.relative(str(e))}, status_code=409)

    @app.exception_handler(fx.FixError)
    async def fix_error(request: Request, e: fx.FixError):
        return JSONResponse(review.error_body(e), status_code=422)

    @app.exception_handler(fixfile.StaleSave)
    async def stale(request: Request, e: fixfile.StaleSave):
        return JSONResponse({"error": str(e), "stale": True}, status_code=409)

    @app.exception_handler(LookupError)
    async def nothing_there(request: Request, e: LookupError):  # e.g. nothing to undo
        return JSONResponse({"error": str(e)}, status_code=409)

    def who(request: Request) -> str:
        """The reviewer a request acts for: the page's (header), else the server's default."""
        name = request.headers.get(REVIEWER_HEADER) or default_reviewer
        try:
            return drafts.check_reviewer(name)
        except ValueError as e:
            raise BadRequest(str(e)) from None

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, e: BadRequest):
        return JSONResponse({"error": str(e)}, status_code=400)

    def page(name: str) -> HTMLResponse:
        html = (STATIC / PAGES[name]).read_text(encoding="utf-8")
        return HTMLResponse(html.replace("{{TOKEN}}", token), headers={"Cache-Control": "no-store"})

    @app.get("/", response_class=HTMLResponse)
    def videos_page() -> HTMLResponse:
        return page("videos")

    @app.get("/videos/{video_id}", response_class=HTMLResponse)
    def temporal_page(video_id: str) -> HTMLResponse:
        review.catalog.video(video_id)
        return page("temporal")

    @app.get("/videos/{video_id}/spatial", response_class=HTMLResponse)
    def spatial_page(video_id: str) -> HTMLResponse:
        review.catalog.video(video_id)
        return page("spatial")

    @app.get("/videos/{video_id}/questions", response_class=HTMLResponse)
    def questions_page(video_id: str) -> HTMLResponse:
        review.catalog.video(video_id)
        return page("questions")

    @app.get("/queue", response_class=HTMLResponse)
    def queue_page() -> HTMLResponse:
        return page("queue")

    @app.get("/vocabulary", response_class=HTMLResponse)
    def vocabulary_page() -> HTMLResponse:
        return page("vocabulary")

    @app.get("/report", response_class=HTMLResponse)
    def report_page() -> Response:
        """The build report the pipeline published in the data root (report.html): its video names
        link back to these pages."""
        published = store.local_root() / "report.html"
        if not published.is_file():
            return HTMLResponse(
                "<p>No build report yet: run the pipeline (its report stage writes report.html).</p>", status_code=404
            )
        return FileResponse(published, media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    # ---------------------------------------------------------------- data
    @app.get("/api/videos")
    def api_videos() -> list[dict[str, Any]]:
        return review.videos()

    @app.get("/api/videos/{video_id}")
    def api_video(video_id: str, request: Request) -> dict[str, Any]:
        return review.payload(video_id, who(request))

    @app.get("/api/reviewer")
    def api_reviewer(request: Request) -> dict[str, Any]:
        return {"reviewer": who(request), "default": default_reviewer}

    @app.get("/api/videos/{video_id}/masks")
    def api_masks(video_id: str, k: int) -> dict[str, Any]:
        return masks.masks(video_id, k)

    @app.get("/api/videos/{video_id}/media")
    def api_media(video_id: str) -> FileResponse:
        return FileResponse(review.catalog.video_file(video_id), media_type="video/mp4")

    @app.get("/api/videos/{video_id}/frame")
    def api_frame(video_id: str, f: int) -> Response:
        """One frame of the view video as JPEG (the question cards' frame indices)."""
        cap = cv2.VideoCapture(review.catalog.video_file(video_id))
        try:
            cap.set(cv2.CAP_PROP_POS_FRAMES, max(0, f))
            ok, bgr = cap.read()
        finally:
            cap.release()
        if not ok:
            raise NotFound(f"no frame {f} in {video_id}")
        return Response(cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 85])[1].tobytes(), media_type="image/jpeg")

    @app.get("/api/videos/{video_id}/crop")
    def api_crop(
        video_id: str,
        t: float,
        x0: float,
        y0: float,
        x1: float,
        y1: float,
        h: int = 120,
        mark: str | None = None,
    ) -> Response:
        """The frame at time ``t`` around a box (view pixels), as a JPEG ``h`` px high: a thumbnail.
        ``mark``: "x0,y0,x1,y1", a box (view pixels) to ring in the picture (a speck a few pixels wide)."""
        row = review.catalog.video(video_id)
        cap = cv2.VideoCapture(review.catalog.video_file(video_id))
        try:
            cap.set(cv2.CAP_PROP_POS_FRAMES, max(0, int(round(t * float(row["fps"])))))
            ok, bgr = cap.read()
        finally:
            cap.release()
        if not ok:
            raise NotFound(f"no frame at {t} s in {video_id}")
        H, W = bgr.shape[:2]
        sx, sy = W / float(row["width"]), H / float(row["height"])
        mx, my = 0.25 * (x1 - x0) + 8, 0.25 * (y1 - y0) + 8  # some of the surroundings
        a, b = int(max(0, (x0 - mx) * sx)), int(max(0, (y0 - my) * sy))
        c, d = int(min(W, (x1 + mx) * sx)), int(min(H, (y1 + my) * sy))
        if c - a < 2 or d - b < 2:
            raise NotFound(f"box [{x0}, {y0}, {x1}, {y1}] is outside the frame of {video_id}")
        crop = bgr[b:d, a:c]
        scale = max(16, min(h, 400)) / crop.shape[0]
        crop = cv2.resize(crop, (max(1, int(crop.shape[1] * scale)), max(1, int(crop.shape[0] * scale))))
        if mark is not None:
            try:
                m = [float(v) for v in mark.split(",")]
            except ValueError:
                m = []
            if len(m) != 4:
                raise BadRequest(f"mark {mark!r}: expected x0,y0,x1,y1 (view pixels)")
            # the box in the picture's pixels, ringed 3 px outside so the speck itself stays visible
            p0 = (int((m[0] * sx - a) * scale) - 3, int((m[1] * sy - b) * scale) - 3)
            p1 = (int((m[2] * sx - a) * scale) + 3, int((m[3] * sy - b) * scale) + 3)
            cv2.rectangle(crop, p0, p1, (255, 0, 255), 2)
        return Response(
            cv2.imencode(".jpg", crop, [cv2.IMWRITE_JPEG_QUALITY, 85])[1].tobytes(), media_type="image/jpeg"
        )

    @app.get("/api/queue")
    def api_queue(request: Request, video: str | None = None, second: bool = False) -> dict[str, Any]:
        items = queue.items(
            [review.catalog.video(video)["video_id"]] if video else None, second=who(request) if second else None
        )
        return {"items": items, "progress": queue.summary(items)}

    @app.get("/api/queue/item")
    def api_queue_item(request: Request, id: str, second: bool = False) -> dict[str, Any]:  # noqa: A002 - the item's id
        return queue.detail(id, who(request) if second else None)

    @app.get("/api/vocabulary")
    def api_vocabulary(request: Request) -> dict[str, Any]:
        state = review.vocabulary_state()
        draft = drafts.read(store, fixfile.VOCABULARY, who(request))
        out = {"file": state, "draft": review.draft_view(draft)}
        if state["error"] is None:
            out["preview"] = review.vocabulary_preview(review.pending(fixfile.VOCABULARY, draft.plain_edits()))
        return out

    @app.post("/api/vocabulary/draft")
    def api_vocabulary_draft(body: DraftBody, request: Request) -> dict[str, Any]:
        return review.edit(fixfile.VOCABULARY, who(request), body.action, body.fixes, body.index)

    @app.post("/api/vocabulary/fixes")
    def api_vocabulary_save(body: SaveBody, request: Request) -> dict[str, Any]:
        return review.save(fixfile.VOCABULARY, who(request), body.edits)

    @app.post("/api/rederive")
    def api_rederive_all() -> JSONResponse:
        """Re-derive every video (after a vocabulary change)."""
        try:
            return JSONResponse(rederive.start(sorted(review.catalog.views())), status_code=202)
        except RuntimeError as e:
            return JSONResponse({"error": str(e)}, status_code=409)

    @app.get("/api/videos/{video_id}/questions")
    def api_questions(video_id: str) -> list[dict[str, Any]]:
        return review.questions(video_id)

    @app.get("/api/videos/{video_id}/images/{name:path}")
    def api_image(video_id: str, name: str) -> FileResponse:
        return FileResponse(review.catalog.image_file(video_id, name))

    @app.get("/api/jobs/{job_id}")
    def api_job(job_id: str) -> dict[str, Any]:
        job = rederive.jobs.get(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r}")
        return job

    # ---------------------------------------------------------------- writes (POST + token)
    @app.post("/api/videos/{video_id}/preview")
    def api_preview(video_id: str, body: FixesBody) -> dict[str, Any]:
        return review.preview(video_id, body.fixes)

    @app.post("/api/videos/{video_id}/draft")
    def api_draft(video_id: str, body: DraftBody, request: Request) -> dict[str, Any]:
        return review.edit(video_id, who(request), body.action, body.fixes, body.index)

    @app.post("/api/videos/{video_id}/fixes")
    def api_save(video_id: str, body: SaveBody, request: Request) -> dict[str, Any]:
        return review.save(video_id, who(request), body.edits)

    @app.post("/api/videos/{video_id}/restore")
    def api_restore(video_id: str, body: RestoreBody, request: Request) -> dict[str, Any]:
        path = review.fix_path(video_id)
        fixfile.restore(path, video_id, body.version, body.sha256, review.validator(video_id))
        return review.save(video_id, who(request), [])

    @app.post("/api/videos/{video_id}/progress")
    def api_progress(video_id: str, body: ProgressBody, request: Request) -> dict[str, Any]:
        review.catalog.video(video_id)
        return progress.patch(store, video_id, body.progress, who(request)).model_dump()

    @app.post("/api/videos/{video_id}/rederive")
    def api_rederive(video_id: str) -> JSONResponse:
        review.catalog.video(video_id)
        try:
            return JSONResponse(rederive.start(video_id), status_code=202)
        except RuntimeError as e:
            return JSONResponse({"error": str(e)}, status_code=409)

    return app
