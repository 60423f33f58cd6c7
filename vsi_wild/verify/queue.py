"""One review queue across the benchmark: what needs a person, in the order it matters.

Items, in this order:

1. **pair**: every pair of clip-local instances reconciliation left for review (``review_pairs``),
   ranked across all videos by the answers the opposite decision would change, then by how close
   its posterior is to 0.5; done when the video's fix file decides it (``review_pair``), or when the
   metadata stage, as it last derived the video, lists it no longer pending (``resolved``: other
   fixes decided it, ``Review.resolved_pairs``: a merge or split of its sides, a side removed, the
   sides renamed apart);
2. **speck**: every speck (a mask too small to track) that keeps a VOC count unasked because no
   instance is told for it (the qa stage's ``skipped.parquet`` names it), ranked by the fewest
   specks a count it keeps waits on (one: a single decision gives the count back); done when the
   video's fix file tells what it shows (``speck``), and gone once the video is re-derived and no
   count waits on it;
3. **unit**: every unit of a video's stages whose status is ``failed`` (gone when it is mended);
4. **clip**: every VMR motion clip, those whose views disagree (state ``failed``, low confidence)
   first; done when marked verified or fixed by a ``motion`` fix;
5. **question**: every question asked now, the provisional ones first (their answer rests on
   reconciliation decisions no person has reviewed, and may be wrong: ``stages/qa/provisional.py``),
   the likeliest wrong first (VOC's bound on P(wrong answer)), then by video and task; done when it
   has a verdict that holds (a rejection, or an accept of the answers the question gives now: an
   accept of answers a later fix changed is to do again).

Each item has a time in its video (for progress per 5-minute segment) and, once done, who did it
(the fix's ``by``, or the progress file's). The list is built from the store's current outputs and
the saved fix files only (no dry run), so it is quick for a release's thousands of videos; an
item's detail (``Queue.detail``) applies the video's fixes to show it as it is now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from vsi_wild import ids
from vsi_wild.stages import fixes as fx
from vsi_wild.stages import metadata as meta
from vsi_wild.stages import visibility as vis
from vsi_wild.stages.qa.provisional import verdict_holds
from vsi_wild.tasks import registry
from vsi_wild.verify import fixfile, progress
from vsi_wild.verify.review import Review, pair_key, pair_rank, review_pairs

SEGMENT_S = 300.0  # progress per 5-minute segment of each video
CONTEXT_PX = 96.0  # the least side of the view around a speck its picture shows (view pixels)
KINDS = ("pair", "speck", "unit", "clip", "question")
TASK_ORDER = {"VOC": 0, "VOO": 1, "VMR": 2, "VPO": 3}


def _video_units(video_id: str) -> set[str]:
    source, _ = ids.split_video_id(video_id)
    return {video_id, source}


class Queue:
    def __init__(self, review: Review):
        self.review = review
        self.catalog = review.catalog

    def failed_units(self) -> dict[str, list[dict[str, Any]]]:
        """video id -> the failed status rows of its units (its own, its clips', its source's)."""
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        views = self.catalog.views()
        by_source: dict[str, list[str]] = defaultdict(list)
        for vid, row in views.items():
            by_source[row["source_id"]].append(vid)
        for stage in registry.STAGES:
            for r in self.catalog._status_rows(stage.name):
                if r["state"] != "failed":
                    continue
                unit = r["unit"]
                vid = unit.split("@", 1)[0]
                targets = [vid] if vid in views else sorted(by_source.get(unit, []))
                for v in targets:
                    out[v].append({"stage": stage.name, "unit": unit, "error": self.review.relative(r["error"])})
        return out

    def items(self, videos: list[str] | None = None, second: str | None = None) -> list[dict[str, Any]]:
        """Every item of the benchmark (or of ``videos``), in queue order (done ones included, marked).
        ``second``: a second review by this reviewer: an item is done when *they* decided it (and
        the others' decisions are not shown), so two reviewers' decisions can be compared."""
        pairs, specks, units, clips, questions = [], [], [], [], []
        failed = self.failed_units()
        for vid in sorted(videos if videos is not None else self.catalog.views()):
            data, _ = fixfile.read(self.review.fix_path(vid))
            try:
                fixes = fixfile.fixes_of(data)
            except Exception:  # noqa: BLE001 - a broken file: its unit item says why
                fixes = []
            by_key = {
                fx.op_key(f): f for f in fixes if fx.op_key(f) is not None and (second is None or f.get("by") == second)
            }
            prog = progress.read(self.review.store, vid)
            decisions, members = self.review.decisions(vid)
            first_of = {(m["clip_index"], m["local_id"]): m["first_time"] for m in members}
            # resolved by other fixes, as the metadata stage counts it (not in a blind second review)
            resolved = self.review.resolved_pairs(vid) if second is None else set()
            for p in review_pairs(decisions, members):
                f = by_key.get(("review_pair", p["clip_a"], p["local_a"], p["clip_b"], p["local_b"]))
                pairs.append(
                    {
                        "id": f"pair:{vid}:{pair_key(p)}",
                        "kind": "pair",
                        "video_id": vid,
                        "time": float(first_of.get((p["clip_b"], p["local_b"]), 0.0)),
                        "title": f"{p['concept']}: #{p['instance_a']} · #{p['instance_b']} one object or two?",
                        "done": f is not None or pair_key(p) in resolved,
                        "by": f.get("by") if f else None,
                        "decision": f.get("decision") if f else None,
                        "resolved": f is None and pair_key(p) in resolved,
                        "rank": pair_rank(p),
                        "answer_impact": p["answer_impact"],
                        "posterior": p["posterior"],
                        "link": f"/videos/{vid}?pair={pair_key(p)}",
                    }
                )
            for u in failed.get(vid, []):
                units.append(
                    {
                        "id": f"unit:{vid}:{u['stage']}:{u['unit']}",
                        "kind": "unit",
                        "video_id": vid,
                        "time": 0.0,
                        "title": f"{u['stage']}:{u['unit']} failed",
                        "error": u["error"],
                        "done": False,
                        "by": None,
                        "link": f"/videos/{vid}",
                    }
                )
            if self.catalog.current("metadata", vid) is not None:
                motion = self.catalog.table("metadata", vid, "motion.parquet").to_pylist()
                for m in motion:
                    c = m["clip_index"]
                    f = by_key.get(("motion", c))
                    verified = c in prog.clips_verified and (second is None or prog.by.get(f"clip:{c}") == second)
                    low = m["state"] == "failed" or m["views_consistent"] is False
                    clips.append(
                        {
                            "id": f"clip:{vid}:{c}",
                            "kind": "clip",
                            "video_id": vid,
                            "time": float(m["clip_start"]),
                            "title": f"VMR clip {c} ({m['state']}{', views disagree' if low else ''})",
                            "low_confidence": low,
                            "done": verified or f is not None,
                            "by": (f.get("by") if f else None) or prog.by.get(f"clip:{c}"),
                            "link": f"/videos/{vid}/spatial?clip={c}",
                        }
                    )
            if self.catalog.current("qa", vid) is not None:
                specks += self.speck_items(vid, by_key)
                for q in self.catalog.questions(vid):
                    f = by_key.get(("review_question", q["question_id"]))
                    # an accept is of the answers the person saw: once a fix changes them, it is to do again
                    if f is not None and not verdict_holds(f["verdict"], f.get("answers"), q["answers"]):
                        f = None
                    questions.append(
                        {
                            "id": f"question:{vid}:{q['question_id']}",
                            "kind": "question",
                            "video_id": vid,
                            "time": float(min(q["query_times"])) if q["query_times"] else 0.0,
                            "title": f"{q['task_type']} {q['subtype']} · {q['item']}",
                            "task_type": q["task_type"],
                            "question_id": q["question_id"],
                            "provisional": bool(q.get("provisional")),
                            "provisional_reason": q.get("provisional_reason"),
                            "wrong_answer_bound": q.get("wrong_answer_bound"),
                            "rank": question_rank(q),
                            "done": f is not None,
                            "by": f.get("by") if f else None,
                            "verdict": f.get("verdict") if f else None,
                            "link": f"/videos/{vid}/questions?q={q['question_id']}",
                        }
                    )
        pairs.sort(key=lambda i: i["rank"])
        specks.sort(key=lambda i: i["rank"])
        clips.sort(key=lambda i: (not i["low_confidence"], i["video_id"], i["time"]))
        questions.sort(key=lambda i: i["rank"])
        for i in pairs + specks + questions:
            del i["rank"]
        return pairs + specks + units + clips + questions

    def speck_items(self, video_id: str, by_key: dict) -> list[dict[str, Any]]:
        """The video's specks that keep a VOC count unasked (its qa ``skipped.parquet`` rows'
        ``specks``), one item each; ``by_key``: its fix file's decisions. Each is ranked by the
        fewest specks a count it keeps unasked waits on (``waits_on``: the decisions that give that
        count back), then by how many counts wait on it (``counts_kept``), then by time."""
        waiting: dict[tuple[int, int], dict[str, Any]] = {}
        for r in self.catalog.table("qa", video_id, "skipped.parquet").to_pylist():
            specks = r.get("specks") or []
            for sp in specks:
                key = (int(sp["clip_index"]), int(sp["local_id"]))
                w = waiting.setdefault(
                    key, {"concept": r["item"], "first_time": sp["first_time"], "counts": 0, "waits_on": len(specks)}
                )
                w["counts"] += 1
                w["waits_on"] = min(w["waits_on"], len(specks))
        out = []
        for (clip, local), w in waiting.items():
            f = by_key.get(("speck", clip, local))
            out.append(
                {
                    "rank": (w["waits_on"], -w["counts"], video_id, w["first_time"], clip, local),
                    "waits_on": w["waits_on"],
                    "counts_kept": w["counts"],
                    "id": f"speck:{video_id}:{clip}:{local}",
                    "kind": "speck",
                    "video_id": video_id,
                    "time": float(w["first_time"]),
                    "title": f"{w['concept']}: what does the speck at clip {clip} #{local} show?",
                    "done": f is not None,
                    "by": f.get("by") if f else None,
                    "decision": None if f is None else speck_decision(f["instance"]),
                    "link": f"/videos/{video_id}?t={w['first_time']:g}",
                }
            )
        return sorted(out, key=lambda i: i["rank"])

    def summary(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Progress: overall and per kind, per video, per 5-minute segment of each video, per reviewer."""

        def tally(rows: list[dict[str, Any]]) -> dict[str, int]:
            return {"done": sum(r["done"] for r in rows), "total": len(rows)}

        by_video: dict[str, list] = defaultdict(list)
        by_segment: dict[tuple[str, int], list] = defaultdict(list)
        by_reviewer: dict[str, int] = defaultdict(int)
        for i in items:
            by_video[i["video_id"]].append(i)
            by_segment[(i["video_id"], int(i["time"] // SEGMENT_S))].append(i)
            if i["done"] and i.get("by"):
                by_reviewer[i["by"]] += 1
        views = self.catalog.views()
        return {
            "all": tally(items),
            "kinds": {k: tally([i for i in items if i["kind"] == k]) for k in KINDS},
            "videos": [
                {
                    "video_id": v,
                    **tally(rows),
                    "duration_s": views[v]["duration_s"],
                    "segments": [
                        {"segment": s, "start": s * SEGMENT_S, **tally(by_segment[(v, s)])}
                        for s in range(int(float(views[v]["duration_s"]) // SEGMENT_S) + 1)
                        if by_segment.get((v, s))
                    ],
                }
                for v, rows in sorted(by_video.items())
            ],
            "reviewers": dict(sorted(by_reviewer.items(), key=lambda kv: (-kv[1], kv[0]))),
            "segment_s": SEGMENT_S,
        }

    # ------------------------------------------------------------------ one item, as it is now
    def detail(self, item_id: str, second: str | None = None) -> dict[str, Any]:
        """What the queue page shows of one item: the pair, clip or question as the video's saved
        fixes make it now, with the boxes to crop its thumbnails from. In a second review
        (``second``: the reviewer), without the other reviewers' decisions of the kind it asks for."""
        kind, vid, rest = (item_id.split(":", 2) + ["", ""])[:3]
        self.catalog.video(vid)
        out: dict[str, Any] = {
            "id": item_id,
            "kind": kind,
            "video_id": vid,
            "video": {k: self.catalog.video(vid)[k] for k in ("width", "height", "fps", "duration_s")},
        }
        if kind == "unit":
            return out
        fixes = self.review.pending(vid, [])
        if second is not None:  # blind: the pairs, clips and verdicts as if only this reviewer had decided
            fixes = [f for f in fixes if fx.op_key(f) is None or f.get("by") == second]
        derived = self.review.dry_run(vid, self.review.render(vid, fixes))
        best = largest_sightings(derived.observations, lambda o: o["instance_id"])
        instances = {r["instance_id"]: r for r in derived.instances}
        if kind == "pair":
            decisions, _ = self.review.decisions(vid)
            named = {i: r["concept"] for i, r in instances.items()}
            pair = next((p for p in review_pairs(decisions, derived.members, named) if pair_key(p) == rest), None)
            if pair is None:
                raise LookupError(f"no review pair {rest} in {vid}")
            shown = self.member_views(vid)
            sides = [
                {**shown[(clip, local)], "instance_id": now}
                for clip, local, now in (
                    (pair["clip_a"], pair["local_a"], pair["instance_a"]),
                    (pair["clip_b"], pair["local_b"], pair["instance_b"]),
                )
            ]
            out.update(pair=pair, sides=sides)
        elif kind == "clip":
            c = int(rest)
            out["motion"] = next(m for m in derived.motion if m["clip_index"] == c)
            samples = self.review.auto_inputs(vid).motion_samples
            out["samples"] = [
                {"time": s["time"], "angle_deg": s["angle_deg"]}
                for s in samples
                if out["motion"]["clip_start"] <= s["time"] < out["motion"]["clip_end"]
            ]
        elif kind == "question":
            q = next((q for q in self.review.questions(vid) if q["question_id"] == rest), None)
            if q is None:
                raise LookupError(f"no question {rest} asked in {vid} now")
            out["question"] = q
            concepts = set(q.get("concepts") or [])
            if q["task_type"] in ("VOC", "VOO"):  # the instances it counts or orders, as they are now
                # with the clip-local members reconciliation joined into each (one picture each):
                # where two of them are different objects, a reviewer splits one out from here
                shown = self.member_views(vid)
                members_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
                for m in derived.members:
                    if m["instance_id"] is not None:
                        members_of[m["instance_id"]].append(shown[(m["clip_index"], m["local_id"])])
                out["instances"] = [
                    {
                        **{k: r[k] for k in ("instance_id", "concept", "first_time", "last_time", "origin")},
                        "best": best.get(r["instance_id"]),
                        "members": sorted(
                            members_of.get(r["instance_id"], []), key=lambda m: (m["clip"], m["local_id"])
                        ),
                    }
                    for r in sorted(instances.values(), key=lambda r: (r["concept"], r["first_time"]))
                    if r["concept"] in concepts
                ]
                # the question was derived from the metadata as last re-derived: where the saved
                # fixes group the concept's sightings otherwise, its answer is out of date
                if second is None:
                    asked = self.catalog.table("metadata", vid, "observations.parquet").to_pylist()
                    out["changed"] = [
                        {"concept": c, "then": len(then), "now": len(now)}
                        for c in sorted(concepts)
                        if (then := sighting_groups(asked, c)) != (now := sighting_groups(derived.observations, c))
                    ]
        elif kind == "speck":
            clip, local = (int(x) for x in rest.split(":"))
            out.update(self.speck_detail(vid, clip, local, derived, best))
        else:
            raise LookupError(f"no queue item {item_id!r}")
        return out

    def speck_detail(self, video_id: str, clip: int, local: int, derived: meta.Derived, best: dict) -> dict[str, Any]:
        """What the queue shows of one speck: its sightings (time, box, area), the largest with a
        box around it to show where it is (``context``), what the saved fixes tell it now
        (``told``: an instance, None for no object; absent while untold), the counts waiting on it
        and the instances of its concept as the saved fixes make them (the candidates)."""
        rows = [
            r
            for r in self.catalog.table("metadata", video_id, "specks.parquet").to_pylist()
            if (r["clip_index"], r["local_id"]) == (clip, local)
        ]
        if not rows:
            raise LookupError(f"no speck clip {clip} #{local} in {video_id}")
        view = self.catalog.video(video_id)
        big = max(rows, key=lambda r: (r["area"], -r["time"]))
        box = [big["x0"], big["y0"], big["x1"], big["y1"]]
        side = max(CONTEXT_PX, 6 * max(box[2] - box[0], box[3] - box[1]))
        cx = min(max((box[0] + box[2]) / 2, side / 2), float(view["width"]) - side / 2)
        cy = min(max((box[1] + box[3]) / 2, side / 2), float(view["height"]) - side / 2)
        concept = rows[0]["concept"]
        counts = [
            r["reason"]
            for r in self.catalog.table("qa", video_id, "skipped.parquet").to_pylist()
            if any((s["clip_index"], s["local_id"]) == (clip, local) for s in r.get("specks") or [])
        ]
        speck: dict[str, Any] = {
            "clip": clip,
            "local_id": local,
            "concept": concept,
            "sightings": [
                {"time": r["time"], "box": [r["x0"], r["y0"], r["x1"], r["y1"]], "area": r["area"]}
                for r in sorted(rows, key=lambda r: r["time"])
            ],
            "best": {"time": big["time"], "box": box},
            "context": {"time": big["time"], "box": [cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2]},
            "counts": counts,
        }
        if (clip, local) in derived.specks_told:
            speck["told"] = derived.specks_told[(clip, local)]
        # the candidates: those whose positions fit the speck (``fits``: as the metadata stage tells
        # a speck by position, where several fit or where the saved fixes moved things since) first,
        # then the one seen nearest the speck's moments (``gap_s``: how far)
        mine = [r for r in derived.instances if r["concept"] == concept]
        inputs = self.review.auto_inputs(video_id)
        fitting: set[int] = set()
        if inputs.poses is not None and inputs.image_size is not None:
            track = inputs.poses
            projected = vis.project_instances(
                mine, derived.observations, track, inputs.image_size, inputs.params.visibility_min_consistency
            )
            fits = vis.SpeckFits(mine, track, projected)
            row_of = track.sample_rows
            for r in rows:
                if r["sample_index"] in row_of:
                    fitting.update(fits.at(concept, row_of[r["sample_index"]], (r["x0"], r["y0"], r["x1"], r["y1"])))
        seen_at: dict[int, list[float]] = defaultdict(list)
        for o in derived.observations:
            if o["concept"] == concept:
                seen_at[o["instance_id"]].append(o["time"])
        moments = [r["time"] for r in rows]
        candidates = sorted(
            (
                {
                    **{k: r[k] for k in ("instance_id", "concept", "first_time", "last_time", "origin")},
                    "best": best.get(r["instance_id"]),
                    "gap_s": min(
                        (abs(t - m) for t in seen_at.get(r["instance_id"], []) for m in moments), default=None
                    ),
                    "fits": r["instance_id"] in fitting,
                }
                for r in mine
            ),
            key=lambda c: (not c["fits"], c["gap_s"] is None, c["gap_s"] or 0.0, c["instance_id"]),
        )
        return {"speck": speck, "instances": candidates}

    def member_views(self, video_id: str) -> dict[tuple[int, int], dict[str, Any]]:
        """(clip, local id) -> what the queue shows of that clip-local instance: its clip, local id,
        first and last time, and its own largest box (its automatic instance's observations in its
        clip), whichever instance the fixes put it in now."""
        _, members = self.review.decisions(video_id)
        cs = self.review.config.segment.clip_seconds
        largest = largest_sightings(
            self.review.auto_inputs(video_id).observations, lambda o: (o["instance_id"], int(o["time"] // cs))
        )
        return {
            (m["clip_index"], m["local_id"]): {
                "clip": m["clip_index"],
                "local_id": m["local_id"],
                "first_time": m["first_time"],
                "last_time": m["last_time"],
                "best": largest.get((m["instance_id"], m["clip_index"])),
            }
            for m in members
        }


def speck_decision(instance: int | str) -> str:
    """A speck fix's ``instance`` as the queue says it: "#4", or "no object"."""
    return "no object" if instance == "none" else f"#{instance}"


def question_rank(question: dict[str, Any]) -> tuple:
    """Where a question (a ``schema.QA_QUESTIONS`` row) stands among the queue's questions: the
    provisional ones first (their answer may be wrong: it rests on decisions no person reviewed),
    the likeliest wrong first (``wrong_answer_bound``, VOC's bound; none known counts as 0), then by
    video, task (``TASK_ORDER``), subtype and item."""
    q = question
    provisional = bool(q.get("provisional"))
    risk = (q.get("wrong_answer_bound") or 0.0) if provisional else 0.0
    return (not provisional, -risk, q["video_id"], TASK_ORDER.get(q["task_type"], 9), q["subtype"], q["item"])


def largest_sightings(observations: Sequence[dict[str, Any]], group: Callable[[dict[str, Any]], Hashable]) -> dict:
    """group -> its largest observation with a box, as {time, box}: the thumbnail to show (the mask's
    area, else the box's; the earliest of equals)."""
    out: dict[Hashable, tuple] = {}
    for o in observations:
        if o["x0"] is None:
            continue
        key = (o["area"] or (o["x1"] - o["x0"]) * (o["y1"] - o["y0"]), -o["time"])
        g = group(o)
        if g not in out or key > out[g][0]:
            out[g] = (key, {"time": o["time"], "box": [o["x0"], o["y0"], o["x1"], o["y1"]]})
    return {g: v[1] for g, v in out.items()}


def sighting_groups(observations: list[dict[str, Any]], concept: str) -> set[frozenset[tuple]]:
    """How one concept's sightings are grouped into instances, whatever the instances' ids: one
    set of (sample, box) per instance."""
    groups: dict[int, set[tuple]] = defaultdict(set)
    for o in observations:
        if o["concept"] == concept and o["x0"] is not None:
            groups[o["instance_id"]].add((o["sample_index"], o["x0"], o["y0"], o["x1"], o["y1"]))
    return {frozenset(g) for g in groups.values()}
