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
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from ruamel.yaml import YAML

from vsi_wild import ids, schema
from vsi_wild.config import Config
from vsi_wild.stages import fixes as fx
from vsi_wild.stages import metadata as meta
from vsi_wild.stages import segment as seg
from vsi_wild.stages.qa.common import Provenance, VideoInfo
from vsi_wild.stages.qa.params import Sighting
from vsi_wild.stages.qa.provisional import verdict_holds
from vsi_wild.stages.qa.readings import seen_under
from vsi_wild.stages.qa.voc import voc_questions
from vsi_wild.stages.qa.voo import concept_times
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import registry
from vsi_wild.tasks.engine import Job, unit_ancestor
from vsi_wild.tasks.metadata import _raw_path, auto_metadata
from vsi_wild.verify import drafts, fixfile, progress
from vsi_wild.verify.catalog import Catalog, NotReady

INSTANCE_FIELDS = ("instance_id", "concept", "first_time", "last_time", "n_observations", "spans", "origin")
AUTO_KEPT = 4  # videos whose automatic metadata stays in memory (the queue moves between videos)
MOTION_FIELDS = (
    "clip_index",
    "clip_start",
    "clip_end",
    "state",
    "pivot_time",
    "pivot_frame",
    "angle_deg",
    "speed",
    "stability",
    "views_consistent",
    "reason",
    "origin",
)


def appearance_orders(instances: pa.Table, video_id: str) -> dict[str, list[dict[str, Any]]]:
    """Concepts by first and by last appearance (VOO's order), with the times: the instances' first
    and last times as the metadata gives them (``seen_under`` with no visibility: as given)."""
    seen = seen_under(instances, None, video_id, 0, Sighting(name="as given"))
    out = {}
    for which in ("first", "last"):
        times = concept_times(seen, which)
        out[which] = [{"concept": c, "time": t} for c, t in sorted(times.items(), key=lambda x: (x[1], x[0]))]
    return out


def voc_counts(instances: pa.Table, video: VideoInfo, config: Config) -> dict[str, Any]:
    """The cumulative count per concept at every VOC checkpoint, as the qa stage would ask it."""
    params = config.qa
    questions, _ = voc_questions(instances, video, params, Provenance(params.seed, "", ""))
    stream = [q for q in questions if q.subtype == "stream"]
    return {
        "checkpoints": stream[0].query_times if stream else [],
        "counts": {q.concepts[0]: [int(a) for a in q.answers] for q in stream if q.concepts},
    }


TERMS = ("llr_position", "llr_appearance", "llr_continuity", "llr_prior")
EVIDENCE = ("distance", "appearance", "box_iou", "boundary")


def review_pairs(
    decisions: list[dict[str, Any]], members: list[dict[str, Any]], concept_of: Mapping[int, str] | None = None
) -> list[dict[str, Any]]:
    """The pairs of clip-local instances a person should decide (CONTRACTS.md): each with the
    automatic ``decision`` (merge | apart: what the metadata does), ``posterior``, ``answer_impact``,
    the named ``terms``, the ``reason``, and the instance each side is part of *now* (``members``
    after the fixes: what a ``merge`` or ``split`` names; ``instance_*`` None when removed) and
    whether the two are one instance now (``merged``). Named by ``concept_of`` (instance id -> its
    concept after the fixes, where a rename may have changed reconciliation's name; "a / b" for
    sides renamed apart), else by reconciliation's concept. ``decided_apart``: the fixes decided the
    pair without naming it, as the metadata stage counts it resolved (``metadata.decided_apart``: a
    side removed, or, by ``concept_of``, the sides renamed apart). Ranked by the answers the
    opposite decision would change, then by how close the posterior is to 0.5."""
    instance_of = {(m["clip_index"], m["local_id"]): m["instance_id"] for m in members}
    out = []
    for d in decisions:
        if not d["review"]:
            continue
        decision = d["decision"]
        ka, kb = (d["clip_a"], d["local_a"]), (d["clip_b"], d["local_b"])
        if ka not in instance_of or kb not in instance_of:
            raise ValueError(
                f"merge decision of {d['video_id']} names a clip instance without a member row: "
                f"clip {d['clip_a']} #{d['local_a']} or clip {d['clip_b']} #{d['local_b']}"
            )
        a, b = instance_of[ka], instance_of[kb]
        names = [concept_of.get(i) for i in (a, b) if i is not None] if concept_of else []
        concept = " / ".join(dict.fromkeys(n for n in names if n)) or d["concept"]
        ca, cb = (None if i is None else (concept_of or {}).get(i, d["concept"]) for i in (a, b))
        out.append(
            {
                "concept": concept,
                "clip_a": d["clip_a"],
                "local_a": d["local_a"],
                "clip_b": d["clip_b"],
                "local_b": d["local_b"],
                "instance_a": a,
                "instance_b": b,
                "decision": decision,
                "review": True,
                "merged": a is not None and a == b,
                "removed": a is None or b is None,
                "decided_apart": meta.decided_apart(ca, cb),
                "posterior": d.get("posterior"),
                "answer_impact": int(d.get("answer_impact") or 0),
                "terms": {k.removeprefix("llr_"): d[k] for k in TERMS if d.get(k) is not None},
                "reason": d.get("reason") or "",
                **{k: d.get(k) for k in EVIDENCE},
            }
        )
    return sorted(out, key=pair_rank)


def pair_rank(p: dict[str, Any]) -> tuple:
    """The queue's order of review pairs: answer impact (descending), then closeness to 0.5."""
    closeness = abs(p["posterior"] - 0.5) if p.get("posterior") is not None else 1.0
    return (-p["answer_impact"], closeness, p["concept"], p["clip_a"], p["local_a"], p["clip_b"], p["local_b"])


def pair_key(p: dict[str, Any]) -> str:
    return f"{p['clip_a']}:{p['local_a']}:{p['clip_b']}:{p['local_b']}"


class Review:
    def __init__(self, config: Config, store: Store):
        self.config = config
        self.store = store
        self.catalog = Catalog(config, store)
        self._auto: OrderedDict[str, tuple[tuple, meta.FixInputs]] = OrderedDict()
        self._decisions: dict[str, tuple[Any, list[dict], list[dict]]] = {}
        self._history: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ paths as a person reads them
    def relative(self, text: str | None) -> str | None:
        """``text`` with the data root's absolute path left out (messages name files under it)."""
        if text is None or not self.store.is_local:
            return text
        root = str(self.store.local_root()).rstrip("/")
        return text.replace(root + "/", "").replace(root, ".")

    def error_body(self, e: fx.FixError) -> dict[str, Any]:
        body = error_body(e)
        return {**body, "error": self.relative(body["error"]), "file": self.relative(body["file"])}

    # ------------------------------------------------------------------ fix files
    def fixes_dir(self) -> Path:
        return Path(_raw_path(self.store, self.config.metadata.fixes_dir))

    def fix_path(self, video_id: str) -> Path:
        self.catalog.video(video_id)  # only ids of the store's videos make a path
        return fx.fix_file_path(self.fixes_dir(), video_id)

    def vocabulary_path(self) -> Path:
        return self.fixes_dir() / fx.VOCABULARY_FILE

    def vocabulary(self, text: str | None = None) -> fx.Vocabulary | None:
        """The benchmark's vocabulary (``text`` instead of the file's when given)."""
        if text is None:
            data, _ = fixfile.read(self.vocabulary_path())
            if data is None:
                return None
            text = data.decode("utf-8", "replace")
        return fx.parse_vocabulary_text(text, str(self.vocabulary_path()))

    def history(self, path: Path, name: str, key: str = "fixes") -> list[dict[str, Any]]:
        """The file's earlier versions, each with who made its fixes and when (newest fix)."""
        out = []
        for v in fixfile.history(path, name):
            version = fixfile.history_dir(path, name) / f"{v}.yaml"
            held = self._history.get(str(version))  # a kept version never changes: read it once
            if held is None:
                try:
                    fixes = list((YAML(typ="safe").load(version.read_bytes()) or {}).get(key) or [])
                except Exception:  # noqa: BLE001 - a version a person broke by hand is still listed
                    fixes = []
                ats = [str(f.get("at")) for f in fixes if isinstance(f, dict) and f.get("at")]
                held = self._history[str(version)] = {
                    "version": v,
                    "fixes": len(fixes),
                    "at": max(ats) if ats else None,
                    "by": sorted({str(f["by"]) for f in fixes if isinstance(f, dict) and f.get("by")}),
                }
            out.append(held)
        return out

    def fix_state(self, video_id: str) -> dict[str, Any]:
        """The fix file as it is now: text, sha256, its fixes (plain), history, and its problem if any."""
        path = self.fix_path(video_id)
        data, sha = fixfile.read(path)
        state: dict[str, Any] = {
            "path": self.relative(str(path)),
            "sha256": sha,
            "text": data.decode("utf-8", "replace") if data else "",
            "fixes": [],
            "error": None,
            "history": self.history(path, video_id),
        }
        if data is not None:
            try:
                fx.parse_fix_text(state["text"], str(path), video_id)
                state["fixes"] = fixfile.fixes_of(data)
            except fx.FixError as e:
                state["error"] = self.error_body(e)
        return state

    # ------------------------------------------------------------------ the pipeline's check
    def auto_inputs(self, video_id: str) -> meta.FixInputs:
        """The automatic metadata the video's fixes apply to (cached per upstream outputs)."""
        view = self.catalog.video(video_id)
        stage = registry.stage("metadata")
        inputs: dict[str, dict[str, UnitRef]] = {}
        for name in stage.needs:  # the current output of each upstream unit (the status rows')
            if registry.stage(name).unit_kind == "clip":  # the video's clips (the segment's specks)
                spans = seg.clip_spans(float(view["duration_s"]), self.config.segment.clip_seconds)
                units = [ids.clip_id(video_id, c.index) for c in spans]
            else:
                units = [unit_ancestor(video_id, "video", registry.stage(name).unit_kind)]
            for unit in units:
                ref = self.catalog.current(name, unit)
                if ref is None:
                    raise NotReady(
                        f"the fixes of {video_id} cannot be checked: {name}:{unit} is "
                        f"{self.catalog.status(name, unit)['state']}"
                    )
                inputs.setdefault(name, {})[unit] = ref
        key = tuple(sorted((s, u, r.key) for s, us in inputs.items() for u, r in us.items()))
        with self._lock:
            held = self._auto.get(video_id)
            if held is None or held[0] != key:
                job = Job(stage, video_id, "", self.config, self.store, inputs, None)  # type: ignore[arg-type]  # reads only
                fix_inputs, _ = auto_metadata(job)
                self._auto[video_id] = (key, fix_inputs)
                while len(self._auto) > AUTO_KEPT:
                    self._auto.popitem(last=False)
            self._auto.move_to_end(video_id)
            return self._auto[video_id][1]

    def dry_run(self, video_id: str, text: str, vocabulary: fx.Vocabulary | None | bool = True) -> meta.Derived:
        """Apply a fix file's text as the metadata stage would (after the benchmark's vocabulary,
        or the one given); FixError as the pipeline gives it."""
        fixset = fx.parse_fix_text(text, str(self.fix_path(video_id)), video_id)
        vocab = self.vocabulary() if vocabulary is True else vocabulary
        return meta.apply_fixes(fixset, self.auto_inputs(video_id), vocab or None)

    def validator(self, video_id: str):
        return lambda text: self.dry_run(video_id, text)

    def render(self, video_id: str, fixes: list[dict[str, Any]]) -> str:
        data, _ = fixfile.read(self.fix_path(video_id))
        return fixfile.render(data, video_id, fixes)

    def decisions(self, video_id: str) -> tuple[list[dict], list[dict]]:
        """The reconcile stage's merge decisions and members of the video (cached per output)."""
        ref = self.catalog.current("reconcile", video_id)
        if ref is None:
            return [], []
        with self._lock:
            held = self._decisions.get(video_id)
            if held is None or held[0] != ref:
                members = self.store.read_table(ref, "members.parquet").to_pylist()
                decisions = self.store.read_table(ref, "merge_decisions.parquet").to_pylist()
                self._decisions[video_id] = held = (ref, decisions, members)
        return held[1], held[2]

    def resolved_pairs(self, video_id: str) -> set[str]:
        """The review items (``pair_key``) the fixes resolved as the metadata stage last derived the
        video: reconciliation's review items its ``review_pending.parquet`` (written only when some
        are left) does not list (``metadata._resolved_by``: a ``review_pair``, ``merge`` or ``split``
        fix, a side removed, the sides renamed apart); none while the metadata is not derived, or was
        derived before the reconciliation output the pairs come from (a reconcile stage run alone
        since: its review items are not the ones that metadata resolved)."""
        ref = self.catalog.current("metadata", video_id)  # a done row: its ended_at is set
        made, reconciled = (self.store.read_status(s, video_id) for s in ("metadata", "reconcile"))
        if ref is None or made is None or reconciled is None or reconciled["ended_at"] is None:
            return set()
        if made["ended_at"] < reconciled["ended_at"]:
            return set()
        name = "review_pending.parquet"
        pending = self.store.read_table(ref, name).to_pylist() if self.store.has_file(ref, name) else []
        decisions, _ = self.decisions(video_id)
        return {pair_key(d) for d in decisions if d["review"]} - {pair_key(p) for p in pending}

    def preview(self, video_id: str, fixes: list[dict[str, Any]]) -> dict[str, Any]:
        """What the fixes would make of the video's metadata: every list a page shows."""
        derived = self.dry_run(video_id, self.render(video_id, fixes))
        instances = schema.table(schema.INSTANCES, derived.instances)
        video = VideoInfo.from_row(self.catalog.video(video_id))
        decisions, _ = self.decisions(video_id)
        pairs = review_pairs(decisions, derived.members, {r["instance_id"]: r["concept"] for r in derived.instances})
        decided = {fx.op_key(f): f for f in fixes if f.get("op") == "review_pair"}
        for p in pairs:
            f = decided.get(("review_pair", p["clip_a"], p["local_a"], p["clip_b"], p["local_b"]))
            p["decided"] = None if f is None else {"decision": f["decision"], "by": f.get("by"), "at": f.get("at")}
        return {
            "instances": [{k: r[k] for k in INSTANCE_FIELDS} for r in derived.instances],
            "motion": [{k: r[k] for k in MOTION_FIELDS} for r in derived.motion],
            "appearance": appearance_orders(instances, video_id),
            "voc": voc_counts(instances, video, self.config),
            "applied": [{k: a[k] for k in ("line", "op", "summary")} for a in derived.applied],
            "members": derived.members,
            "review_pairs": pairs,
        }

    # ------------------------------------------------------------------ drafts: pending work per reviewer
    def draft_view(self, draft: drafts.Draft) -> dict[str, Any]:
        return {
            "reviewer": draft.reviewer,
            "edits": draft.plain_edits(),
            "can_undo": bool(draft.undo),
            "can_redo": bool(draft.redo),
            "updated_at": draft.updated_at,
            "failed": [{"edit": f.edit.model_dump(), "error": f.error} for f in draft.failed],
        }

    def file_of(self, name: str) -> Path:
        """A video's fix file, or the benchmark's vocabulary (name ``vocabulary``)."""
        return self.vocabulary_path() if name == fixfile.VOCABULARY else self.fix_path(name)

    def pending(self, video_id: str, edits: list[dict[str, Any]]) -> list[dict[str, Any]]:
        data, _ = fixfile.read(self.file_of(video_id))
        return fixfile.apply_edits(fixfile.fixes_of(data, fixfile.list_key(video_id)), edits)

    def _preview_of(self, name: str, fixes: list[dict[str, Any]]) -> dict[str, Any]:
        return self.vocabulary_preview(fixes) if name == fixfile.VOCABULARY else self.preview(name, fixes)

    def edit(
        self,
        video_id: str,
        reviewer: str,
        action: str,
        fixes: list[dict[str, Any]] | None = None,
        index: int | None = None,
    ) -> dict[str, Any]:
        """Change the reviewer's draft of the video: ``add`` fixes (each stamped with the reviewer
        and the time), ``drop`` fixes the file has, ``discard`` pending edit ``index``, ``undo``,
        ``redo``, ``clear``. The draft is checked by the pipeline (a dry run of the file it would
        give) before it is kept: a FixError leaves it as it was."""
        self.file_of(video_id)  # a video of the store, or the vocabulary
        with drafts.lock():
            draft = drafts.read(self.store, video_id, reviewer)
            edits = list(draft.edits)
            if action == "add":
                edits += [drafts.Edit(kind="add", fix=stamp(f, reviewer)) for f in fixes or []]
                new = drafts.change(draft, edits)
            elif action == "drop":
                edits += [drafts.Edit(kind="drop", fix=f) for f in fixes or []]
                new = drafts.change(draft, edits)
            elif action == "discard":
                if index is None or not 0 <= index < len(edits):
                    raise LookupError(f"no pending edit {index}")
                new = drafts.change(draft, edits[:index] + edits[index + 1 :])
            elif action == "undo":
                new = drafts.undo(draft)
            elif action == "redo":
                new = drafts.redo(draft)
            elif action == "clear":
                new = drafts.change(draft, [])
            else:
                raise LookupError(f"unknown draft action {action!r}")
            preview = self._preview_of(video_id, self.pending(video_id, new.plain_edits()))
            new = drafts.write(self.store, new)
        return {"draft": self.draft_view(new), "preview": preview}

    def save(self, video_id: str, reviewer: str, edits: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Save the reviewer's draft (or only ``edits``, e.g. a question's verdict, which are then
        stamped here) onto the fix file as it is now: rebased, each edit through the pipeline's
        validation; what did not apply stays pending with its error."""
        vocabulary = video_id == fixfile.VOCABULARY
        path = self.file_of(video_id)
        with drafts.lock():
            draft = drafts.read(self.store, video_id, reviewer)
            own = edits is None
            todo = (
                draft.plain_edits()
                if edits is None
                else [{**e, "fix": stamp(e["fix"], reviewer) if e["kind"] == "add" else e["fix"]} for e in edits]
            )
            _, failed = fixfile.save_edits(
                path, video_id, todo, self.check_vocabulary if vocabulary else self.validator(video_id)
            )
            bad = [drafts.Failed(edit=drafts.Edit(**e), error=self.error_body(err)) for e, err in failed]
            if own:
                left = [f.edit for f in bad]
                draft = drafts.write(
                    self.store, draft.model_copy(update={"edits": left, "undo": [], "redo": [], "failed": bad})
                )
        state = self.vocabulary_state() if vocabulary else self.fix_state(video_id)
        # a page that saved its draft shows what the file and what is left of it give; a verdict saved
        # alone (``edits``) changes nothing the page shows
        preview = (
            self._preview_of(video_id, self.pending(video_id, draft.plain_edits()))
            if state["error"] is None and own
            else None
        )
        return {
            "fixes": state,
            "failed": [{"edit": f.edit.model_dump(), "error": f.error} for f in bad],
            "draft": self.draft_view(draft),
            "preview": preview,
            "sha256": state["sha256"],
            "history": state["history"],
            "path": state["path"],
        }

    # ------------------------------------------------------------------ the benchmark's vocabulary
    def vocabulary_state(self) -> dict[str, Any]:
        path = self.vocabulary_path()
        data, sha = fixfile.read(path)
        state: dict[str, Any] = {
            "path": self.relative(str(path)),
            "sha256": sha,
            "fixes": [],
            "error": None,
            "text": data.decode("utf-8", "replace") if data else "",
            "history": self.history(path, fixfile.VOCABULARY, "vocabulary"),
        }
        if data is not None:
            try:
                self.vocabulary(state["text"])
                state["fixes"] = fixfile.fixes_of(data, "vocabulary")
            except fx.FixError as e:
                state["error"] = self.error_body(e)
        return state

    def check_vocabulary(self, text: str) -> fx.Vocabulary:
        """The vocabulary's text checked as the metadata stage would use it: parsed, and applied
        before the fix file of every video that has one (a video's rename of a name the vocabulary
        changes would fail there: the error names that file)."""
        vocab = fx.parse_vocabulary_text(text, str(self.vocabulary_path()))
        folder = self.fixes_dir()
        views = self.catalog.views()
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            if path.stem in views and self.catalog.current("reconcile", path.stem) is not None:
                self.dry_run(path.stem, path.read_text(encoding="utf-8"), vocab)
        return vocab

    def vocabulary_preview(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        """Every concept of the benchmark (the automatic instances of every video) and what the
        vocabulary with these entries makes of it, with its instances per video."""
        text = fixfile.render(fixfile.read(self.vocabulary_path())[0], fixfile.VOCABULARY, entries)
        vocab = self.check_vocabulary(text)
        rows: dict[str, dict[str, Any]] = {}
        for vid in sorted(self.catalog.views()):
            ref = self.catalog.current("reconcile", vid)
            if ref is None:
                continue
            for c in self.store.read_table(ref, "instances_auto.parquet")["concept"].to_pylist():
                r = rows.setdefault(c, {"concept": c, "becomes": vocab.canonical(c), "videos": {}, "instances": 0})
                r["videos"][vid] = r["videos"].get(vid, 0) + 1
                r["instances"] += 1
        return {"concepts": sorted(rows.values(), key=lambda r: (r["becomes"], r["concept"])), "names": vocab.names()}

    # ------------------------------------------------------------------ pages
    def reviewed(self, video_id: str, fixes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The question verdicts of the fix file, counted among the questions asked now (a rejected
        question leaves them at the next re-derive: it is counted apart; an accept of answers a
        later fix changed is not counted: the question is to review again)."""
        if fixes is None:
            data, _ = fixfile.read(self.fix_path(video_id))
            try:
                fixes = fixfile.fixes_of(data)
            except Exception:  # noqa: BLE001 - a broken file shows its error elsewhere
                fixes = []
        verdicts = {f["question"]: f for f in fixes if f.get("op") == "review_question"}
        asked = self.catalog.question_answers(video_id)
        return {
            "reviewed": sum(
                q in asked and verdict_holds(f["verdict"], f.get("answers"), asked[q]) for q, f in verdicts.items()
            ),
            "asked": len(asked),
            "gone": sum(q not in asked for q in verdicts),
        }

    def videos(self) -> list[dict[str, Any]]:
        out = []
        for vid, row in sorted(self.catalog.views().items()):
            st = self.catalog.status("metadata", vid)
            p = progress.read(self.store, vid)
            n_q = self.catalog.num_rows("qa", vid, "questions.parquet")
            r = self.reviewed(vid) if n_q is not None else {"reviewed": len(p.questions), "gone": 0}
            out.append(
                {
                    "video_id": vid,
                    "source_id": row["source_id"],
                    "view": row["view"],
                    "duration_s": row["duration_s"],
                    "metadata_state": st["state"],
                    "metadata_error": self.relative(st["error"]),
                    "instances": self.catalog.num_rows("metadata", vid, "instances.parquet"),
                    "clips": self.catalog.n_motion_clips(vid),
                    "questions": n_q,
                    "temporal_verified": p.temporal_verified,
                    "clips_verified": len(p.clips_verified),
                    "questions_reviewed": r["reviewed"],
                    "questions_rejected_gone": r["gone"],
                }
            )
        return out

    def payload(self, video_id: str, reviewer: str | None = None) -> dict[str, Any]:
        """Everything the video's pages load at once: spans, clips, motion, fixes, the reviewer's
        draft and what the file and the draft make of the metadata (``preview``), progress."""
        row = self.catalog.video(video_id)
        video = VideoInfo.from_row(row)
        st = self.catalog.status("metadata", video_id)
        out: dict[str, Any] = {
            "video": {
                k: row[k]
                for k in (
                    "video_id",
                    "source_id",
                    "view",
                    "width",
                    "height",
                    "fps",
                    "n_frames",
                    "duration_s",
                    "yaw_deg",
                    "hfov_deg",
                )
            },
            "metadata": {**st, "error": self.relative(st["error"])},
            "fixes": self.fix_state(video_id),
            "progress": progress.read(self.store, video_id).model_dump(),
            "sample_step": meta.SAMPLE_STEP,
            "clip_seconds": self.config.segment.clip_seconds,
            "motion_clip_seconds": self.config.metadata.motion_clip_seconds,
            "vocabulary": self.concept_names(),
        }
        if reviewer is not None:
            out["draft"] = self.draft_view(drafts.read(self.store, video_id, reviewer))
        if out["metadata"]["state"] != "done" or self.catalog.current("metadata", video_id) is None:
            return out  # the page shows the state and its error
        instances = self.catalog.table("metadata", video_id, "instances.parquet")
        out["instances"] = [{k: r[k] for k in INSTANCE_FIELDS} for r in instances.to_pylist()]
        out["motion"] = [
            {k: r[k] for k in MOTION_FIELDS}
            for r in self.catalog.table("metadata", video_id, "motion.parquet").to_pylist()
        ]
        samples = self.catalog.table("metadata", video_id, "motion_samples.parquet", ["time", "angle_deg", "moving"])
        out["motion_samples"] = {
            "time": samples["time"].to_pylist(),
            "angle_deg": samples["angle_deg"].to_pylist(),
            "moving": samples["moving"].to_pylist(),
        }
        out["appearance"] = appearance_orders(instances, video_id)
        out["voc"] = voc_counts(instances, video, self.config)
        ref = self.catalog.current("reconcile", video_id)
        if ref is not None:
            out["segment_clips"] = [
                {k: r[k] for k in ("clip_index", "start", "end")}
                for r in self.store.read_table(ref, "clips.parquet").to_pylist()
            ]
            decisions, members = self.decisions(video_id)
            out["members"] = [
                {k: r[k] for k in ("instance_id", "concept", "clip_index", "local_id", "first_time", "last_time")}
                for r in members
            ]
            out["review_pairs"] = review_pairs(decisions, members)
        if out["fixes"]["error"] is None:
            try:
                out["preview"] = self.preview(video_id, self.pending(video_id, out.get("draft", {}).get("edits", [])))
            except fx.FixError as e:  # e.g. a vocabulary saved since that the file's fixes no longer fit
                out["fixes"]["error"] = self.error_body(e)
            except NotReady as e:  # the inputs fixes are checked on are missing: the page shows the outputs
                out["check_error"] = self.relative(str(e))
        return out

    def concept_names(self) -> list[str]:
        """Autocomplete for concept fields: the vocabulary's names and every concept of the benchmark."""
        names = set(self.catalog.concepts())
        try:
            vocab = self.vocabulary()
        except fx.FixError:
            vocab = None
        if vocab is not None:
            names = {vocab.canonical(c) for c in names} | set(vocab.names())
        return sorted(names)

    def questions(self, video_id: str) -> list[dict[str, Any]]:
        keep = (
            "question_id",
            "task_type",
            "subtype",
            "split",
            "item",
            "question",
            "correct",
            "distractors",
            "query_times",
            "answers",
            "evidence",
            "frame_indices",
            "frame_times",
            "image_files",
            "concepts",
            "angle_deg",
            "render_offset_deg",
            "provisional",
            "provisional_reason",
            "wrong_answer_bound",
        )
        return [{k: r.get(k) for k in keep} for r in self.catalog.questions(video_id)]


def stamp(fix: dict[str, Any], reviewer: str) -> dict[str, Any]:
    """A fix with who made it and when (kept when it has them already)."""
    at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {**fix, "by": fix.get("by") or reviewer, "at": fix.get("at") or at}


def error_body(e: fx.FixError) -> dict[str, Any]:
    return {"error": str(e), "file": e.file, "line": e.line, "field": e.field, "reason": e.reason}


def video_ids_for(review: Review, given: list[str] | None) -> list[str]:
    """The videos `vsi-wild fixes check` looks at: those given (checked), else every one with a fix file."""
    if given:
        return [review.catalog.video(v)["video_id"] for v in given]
    folder = review.fixes_dir()
    views = review.catalog.views()
    return sorted(p.stem for p in folder.glob("*.yaml") if p.stem in views) if folder.is_dir() else []
