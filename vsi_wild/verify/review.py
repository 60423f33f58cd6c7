"""One video as the pages show it, and its fixes checked by the pipeline's own code.

``Review.payload`` is what the temporal and spatial pages load (the current metadata as spans,
not observations); ``Review.dry_run`` applies a fix file's text to the video's automatic metadata
exactly as the ``metadata`` stage does (``tasks.metadata.auto_metadata`` + ``apply_fixes``), so
a save the pipeline would refuse is refused with the pipeline's message; ``Review.preview`` turns
pending fixes into the instances, appearance orders and VOC counts they would give (the qa
stage's own ``voc_questions`` and ``concept_times``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.stages import fixes as fx
from vsi_wild.stages import metadata as meta
from vsi_wild.stages.qa.common import Provenance, VideoInfo
from vsi_wild.stages.qa.voc import voc_questions
from vsi_wild.stages.qa.voo import concept_times
from vsi_wild.store import Store
from vsi_wild.tasks import registry
from vsi_wild.tasks.engine import Job, unit_ancestor
from vsi_wild.tasks.metadata import _raw_path, auto_metadata
from vsi_wild.verify import fixfile, progress
from vsi_wild.verify.catalog import Catalog, NotReady

INSTANCE_FIELDS = ("instance_id", "concept", "first_time", "last_time", "n_observations", "spans", "origin")
MOTION_FIELDS = ("clip_index", "clip_start", "clip_end", "state", "pivot_time", "pivot_frame", "angle_deg", "speed",
                 "stability", "views_consistent", "reason", "origin")


def appearance_orders(instances: pa.Table, video_id: str) -> dict[str, list[dict[str, Any]]]:
    """Concepts by first and by last appearance (VOO's order), with the times."""
    out = {}
    for which in ("first", "last"):
        times = concept_times(instances, video_id, which)
        out[which] = [{"concept": c, "time": t} for c, t in sorted(times.items(), key=lambda x: (x[1], x[0]))]
    return out


def voc_counts(instances: pa.Table, video: VideoInfo, config: Config) -> dict[str, Any]:
    """The cumulative count per concept at every VOC checkpoint, as the qa stage would ask it."""
    params = config.qa
    questions, _ = voc_questions(instances, video, params, Provenance(params.seed, "", ""))
    stream = [q for q in questions if q.subtype == "stream"]
    return {"checkpoints": stream[0].query_times if stream else [],
            "counts": {q.concepts[0]: [int(a) for a in q.answers] for q in stream}}


REVIEW_PAIR_FIELDS = ("concept", "clip_a", "local_a", "clip_b", "local_b", "decision", "review", "posterior",
                      "answer_impact", "reason", "log_odds", "distance", "appearance")
TERM_FIELDS = ("llr_position", "llr_appearance", "llr_continuity", "llr_prior")


def review_pairs(decisions: list[dict[str, Any]], members: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The review items of reconciliation's decisions (``review`` true: the posterior lies in the
    uncertain band), each with its decision (``merge``: the two are one automatic instance now, a
    ``split`` fix separates them; ``apart``: a ``merge`` fix joins them), posterior, answer impact,
    named terms (those that apply), reason, and the automatic instance ids on either side.
    Ordered as a reviewer should take them: most answers changed first, then the least sure."""
    instance_of = {(m["clip_index"], m["local_id"]): m["instance_id"] for m in members}
    out = []
    for d in decisions:
        if not d["review"]:
            continue
        a, b = instance_of.get((d["clip_a"], d["local_a"])), instance_of.get((d["clip_b"], d["local_b"]))
        if a is None or b is None:
            raise ValueError(f"merge decision of {d['video_id']} names a clip instance without a member row: "
                             f"clip {d['clip_a']} #{d['local_a']} or clip {d['clip_b']} #{d['local_b']}")
        out.append({**{k: d.get(k) for k in REVIEW_PAIR_FIELDS}, "instance_a": a, "instance_b": b,
                    "terms": {t: d[t] for t in TERM_FIELDS if d.get(t) is not None}})
    return sorted(out, key=lambda p: (-p["answer_impact"], abs(p["posterior"] - 0.5), p["concept"], p["clip_a"],
                                      p["local_a"], p["clip_b"], p["local_b"]))


class Review:
    def __init__(self, config: Config, store: Store):
        self.config = config
        self.store = store
        self.catalog = Catalog(config, store)
        self._auto: dict[str, tuple[tuple, meta.FixInputs]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ fix files
    def fixes_dir(self) -> Path:
        return Path(_raw_path(self.store, self.config.metadata.fixes_dir))

    def fix_path(self, video_id: str) -> Path:
        self.catalog.video(video_id)  # only ids of the store's videos make a path
        return fx.fix_file_path(self.fixes_dir(), video_id)

    def fix_state(self, video_id: str) -> dict[str, Any]:
        """The fix file as it is now: text, sha256, its fixes (plain), history, and its problem if any."""
        path = self.fix_path(video_id)
        data, sha = fixfile.read(path)
        state: dict[str, Any] = {"path": str(path), "sha256": sha, "text": data.decode("utf-8", "replace") if data else "",
                                 "fixes": [], "error": None, "history": fixfile.history(path, video_id)}
        if data is not None:
            try:
                fx.parse_fix_text(state["text"], str(path), video_id)
                from ruamel.yaml import YAML

                doc = YAML(typ="safe").load(state["text"]) or {}
                state["fixes"] = list(doc.get("fixes") or [])
            except fx.FixError as e:
                state["error"] = error_body(e)
        return state

    # ------------------------------------------------------------------ the pipeline's check
    def auto_inputs(self, video_id: str) -> meta.FixInputs:
        """The automatic metadata the video's fixes apply to (cached per upstream outputs)."""
        self.catalog.video(video_id)
        stage = registry.stage("metadata")
        inputs = {}
        for name in stage.needs:  # the current output of each upstream unit (the status rows')
            unit = unit_ancestor(video_id, "video", registry.stage(name).unit_kind)
            ref = self.catalog.current(name, unit)
            if ref is None:
                raise NotReady(f"the fixes of {video_id} cannot be checked: {name}:{unit} is "
                               f"{self.catalog.status(name, unit)['state']}")
            inputs[name] = {unit: ref}
        key = tuple(sorted((s, u, r.key) for s, us in inputs.items() for u, r in us.items()))
        with self._lock:
            held = self._auto.get(video_id)
            if held is None or held[0] != key:
                fix_inputs, _ = auto_metadata(Job(stage, video_id, "", self.config, self.store, inputs, None))
                self._auto = {video_id: (key, fix_inputs)}
            return self._auto[video_id][1]

    def dry_run(self, video_id: str, text: str) -> meta.Derived:
        """Apply a fix file's text as the metadata stage would; FixError as the pipeline gives it."""
        fixset = fx.parse_fix_text(text, str(self.fix_path(video_id)), video_id)
        return meta.apply_fixes(fixset, self.auto_inputs(video_id))

    def validator(self, video_id: str):
        return lambda text: self.dry_run(video_id, text)

    def render(self, video_id: str, fixes: list[dict[str, Any]]) -> str:
        data, _ = fixfile.read(self.fix_path(video_id))
        return fixfile.render(data, video_id, fixes)

    def preview(self, video_id: str, fixes: list[dict[str, Any]]) -> dict[str, Any]:
        """What the pending fixes would make of the video's metadata."""
        derived = self.dry_run(video_id, self.render(video_id, fixes))
        instances = schema.table(schema.INSTANCES, derived.instances)
        video = VideoInfo.from_row(self.catalog.video(video_id))
        return {"instances": [{k: r[k] for k in INSTANCE_FIELDS} for r in derived.instances],
                "motion": [{k: r[k] for k in MOTION_FIELDS} for r in derived.motion],
                "appearance": appearance_orders(instances, video_id), "voc": voc_counts(instances, video, self.config),
                "applied": [{k: a[k] for k in ("line", "op", "summary")} for a in derived.applied]}

    # ------------------------------------------------------------------ pages
    def videos(self) -> list[dict[str, Any]]:
        out = []
        for vid, row in sorted(self.catalog.views().items()):
            st = self.catalog.status("metadata", vid)
            p = progress.read(self.store, vid)
            n_q = self.catalog.num_rows("qa", vid, "questions.parquet")
            out.append({
                "video_id": vid, "source_id": row["source_id"], "view": row["view"], "duration_s": row["duration_s"],
                "metadata_state": st["state"], "metadata_error": st["error"],
                "instances": self.catalog.num_rows("metadata", vid, "instances.parquet"),
                "clips": self.catalog.n_motion_clips(vid), "questions": n_q,
                "temporal_verified": p.temporal_verified, "clips_verified": len(p.clips_verified),
                "questions_reviewed": len(p.questions),
            })
        return out

    def payload(self, video_id: str) -> dict[str, Any]:
        """Everything the video's pages load at once: spans, clips, motion, fixes, progress."""
        row = self.catalog.video(video_id)
        video = VideoInfo.from_row(row)
        out: dict[str, Any] = {
            "video": {k: row[k] for k in ("video_id", "source_id", "view", "width", "height", "fps", "n_frames",
                                          "duration_s", "yaw_deg", "hfov_deg")},
            "metadata": self.catalog.status("metadata", video_id), "fixes": self.fix_state(video_id),
            "progress": progress.read(self.store, video_id).model_dump(),
            "sample_step": meta.SAMPLE_STEP, "clip_seconds": self.config.segment.clip_seconds,
            "motion_clip_seconds": self.config.metadata.motion_clip_seconds,
        }
        if out["metadata"]["state"] != "done" or self.catalog.current("metadata", video_id) is None:
            return out  # the page shows the state and its error
        instances = self.catalog.table("metadata", video_id, "instances.parquet")
        out["instances"] = [{k: r[k] for k in INSTANCE_FIELDS} for r in instances.to_pylist()]
        out["motion"] = [{k: r[k] for k in MOTION_FIELDS}
                         for r in self.catalog.table("metadata", video_id, "motion.parquet").to_pylist()]
        samples = self.catalog.table("metadata", video_id, "motion_samples.parquet", ["time", "angle_deg", "moving"])
        out["motion_samples"] = {"time": samples["time"].to_pylist(), "angle_deg": samples["angle_deg"].to_pylist(),
                                 "moving": samples["moving"].to_pylist()}
        out["appearance"] = appearance_orders(instances, video_id)
        out["voc"] = voc_counts(instances, video, self.config)
        ref = self.catalog.current("reconcile", video_id)
        if ref is not None:
            out["segment_clips"] = [{k: r[k] for k in ("clip_index", "start", "end")}
                                    for r in self.store.read_table(ref, "clips.parquet").to_pylist()]
            members = self.store.read_table(ref, "members.parquet").to_pylist()
            out["members"] = [{k: r[k] for k in ("instance_id", "concept", "clip_index", "local_id", "first_time",
                                                 "last_time")} for r in members]
            out["review_pairs"] = review_pairs(self.store.read_table(ref, "merge_decisions.parquet").to_pylist(), members)
        return out

    def questions(self, video_id: str) -> list[dict[str, Any]]:
        keep = ("question_id", "task_type", "subtype", "split", "item", "question", "correct", "distractors",
                "query_times", "answers", "evidence", "frame_indices", "frame_times", "image_files", "concepts",
                "angle_deg")
        return [{k: r[k] for k in keep} for r in self.catalog.questions(video_id)]


def error_body(e: fx.FixError) -> dict[str, Any]:
    return {"error": str(e), "file": e.file, "line": e.line, "field": e.field, "reason": e.reason}


def video_ids_for(review: Review, given: list[str] | None) -> list[str]:
    """The videos `vsi-wild fixes check` looks at: those given (checked), else every one with a fix file."""
    if given:
        return [review.catalog.video(v)["video_id"] for v in given]
    folder = review.fixes_dir()
    views = review.catalog.views()
    return sorted(p.stem for p in folder.glob("*.yaml") if p.stem in views) if folder.is_dir() else []


