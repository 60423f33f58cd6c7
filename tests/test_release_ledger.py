"""The question ledger (stages/ledger.py): a fix to one video, a source added or removed, the inputs
re-ordered: every row of every other video is the same row, whole; the letter balance bound holds;
a forced letter move is as small as it can be and named.

The questions are the QA stage's own, built from synthetic worlds (tests/qa_world.py); a fix is a
change to one video's metadata (an instance removed), and what it explains is derived here from
the instance's concept, not from the export."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pyarrow as pa
import pytest
from qa_world import instances_table, make_world, motion_table, poses_table, views_table

from vsi_wild.stages import export as ex
from vsi_wild.stages.ledger import Ledger, allowed_spread, bound_violations, identity
from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.build import plan_video
from vsi_wild.stages.qa.common import LETTERS, Provenance, VideoInfo, questions_table

PARAMS = QAParams(clip_seconds=60.0, answer_balance_min_n=10)
WORLDS = range(300, 312)  # 48 view videos: the answer balance and the letter bound both act


def video_questions(seed: int, drop_instance: dict[str, int] | None = None) -> dict[str, pa.Table]:
    """video_id -> its QA_QUESTIONS table; ``drop_instance``: view -> an instance a fix removed."""
    w = make_world(seed)
    out = {}
    for row in views_table(w).to_pylist():
        v = VideoInfo.from_row(row)
        inst = instances_table(w, v.view)
        if drop_instance and v.view in drop_instance:
            inst = inst.filter(pa.array([i != drop_instance[v.view] for i in inst["instance_id"].to_pylist()]))
        res = plan_video(
            v,
            inst,
            motion_table(w, v.view, PARAMS.clip_seconds),
            poses_table(w, v.view),
            PARAMS,
            Provenance(PARAMS.seed, f"fp-{inst.num_rows}", "test"),
        )
        out[v.video_id] = questions_table(res.questions)
    return out


@pytest.fixture(scope="module")
def per_video() -> dict[str, pa.Table]:
    return {k: t for s in WORLDS for k, t in video_questions(s).items()}


def concat(tables: dict[str, pa.Table], order: list[str] | None = None) -> pa.Table:
    return pa.concat_tables([tables[k] for k in (order or sorted(tables))])


def build(questions: pa.Table, ledger: Ledger | None = None) -> ex.Export:
    export = ex.assemble(questions, PARAMS, ledger)
    return export


def rows_by_video(export: ex.Export) -> dict[str, list]:
    """video -> every row it has in every export table (qa rows, skipped rows, ledger rows), whole."""
    out: dict[str, list] = {}
    for r in export.rows:
        out.setdefault(r["video_id"], []).append(("qa", ex.release_line(r), tuple(sorted(r.items(), key=str))))
    for r in export.unasked:
        out.setdefault(r["video_id"], []).append(("skipped", tuple(sorted(r.items()))))
    for r in export.ledger:
        out.setdefault(r["video_id"], []).append(("ledger", tuple(sorted(r.items(), key=str))))
    return {v: sorted(rs, key=str) for v, rs in out.items()}


def assert_bound(export: ex.Export) -> None:
    release = [r for r in export.rows if r["split"] == "release" and r["options"]]
    rows = [
        {"doc_id": r["doc_id"], "task_type": r["task_type"], "subtype": r["subtype"], "correct": r["answer_text"]}
        for r in release
    ]
    assert bound_violations(rows, {r["doc_id"]: r["answer_index"] for r in release}) == {}


@pytest.fixture(scope="module")
def first(per_video):
    return build(concat(per_video))


def test_a_build_from_its_own_ledger_is_the_same_build(per_video, first):
    again = build(concat(per_video), Ledger.from_rows(first.ledger))
    assert again.rows == first.rows and again.unasked == first.unasked and again.ledger == first.ledger
    assert again.moves == [] and first.unasked  # the answer balance did drop questions
    assert_bound(first)


def test_fix_one_video_changes_only_what_the_fix_explains(per_video, first):
    fixed_source = WORLDS[3]
    w = make_world(fixed_source)
    view = "right"
    video = w.video_id(view)
    inst = instances_table(w, view).to_pylist()
    counts = Counter(i["concept"] for i in inst)
    victim = next(i for i in inst if counts[i["concept"]] >= 2)  # a concept that stays: its count changes
    fixed = dict(per_video)
    fixed[video] = video_questions(fixed_source, {view: victim["instance_id"]})[video]
    after = build(concat(fixed), Ledger.from_rows(first.ledger))
    before_rows, after_rows = rows_by_video(first), rows_by_video(after)
    others = sorted(set(before_rows) - {video})
    assert others and all(before_rows[v] == after_rows[v] for v in others)
    assert_bound(after)

    # the fixed video: a row changed beyond its provenance (the metadata fingerprint every row of the
    # video carries) only where the video's own question table changed (the qa stage's output: a
    # question added, gone or re-derived), and every such question's row changed
    def content(r):
        return {k: v for k, v in r.items() if k != "metadata_fingerprint"}

    def by_identity(table):
        return {identity(q): content(q) for q in table.to_pylist() if q["split"] == "release"}

    qa_before, qa_after = by_identity(per_video[video]), by_identity(fixed[video])
    explained = {i for i in qa_before.keys() | qa_after.keys() if qa_before.get(i) != qa_after.get(i)}
    doc_identity = {r["doc_id"]: r["identity"] for r in [*first.ledger, *after.ledger] if r["doc_id"]}
    old = {r["doc_id"]: content(r) for r in first.rows if r["video_id"] == video}
    new = {r["doc_id"]: content(r) for r in after.rows if r["video_id"] == video}
    changed = {
        doc_identity[(new.get(d) or old[d])["base_doc_id"] or d]
        for d in old.keys() | new.keys()
        if old.get(d) != new.get(d)
    }
    assert changed and changed <= explained
    asked = {r["identity"] for r in [*first.ledger, *after.ledger] if r["state"] == "asked"}
    assert explained & asked <= changed
    # without the ledger the same fix moves rows of other videos (what the ledger is for)
    fresh = rows_by_video(build(concat(fixed)))
    assert any(before_rows[v] != fresh[v] for v in others)


def _doc(entry) -> str | None:
    """The doc id an entry of ``rows_by_video`` belongs to (a skipped row: its video, task and item)."""
    fields = dict(entry[-1])
    if entry[0] == "skipped":
        return "|".join((fields["video_id"], fields["task_type"], fields["item"]))
    return fields.get("base_doc_id") or fields.get("doc_id")


def test_add_remove_and_reorder_sources(per_video, first):
    """Rows of the videos a change does not touch stay whole; where it breaks the letter bound, the
    questions that had to move are named, and only their letter and option order changed."""
    ledger = Ledger.from_rows(first.ledger)
    before = rows_by_video(first)
    added = {**per_video, **video_questions(WORLDS[-1] + 1)}
    removed_source = make_world(WORLDS[0]).source_id
    kept = {k: t for k, t in per_video.items() if not k.startswith(removed_source + "_")}
    shuffled = sorted(per_video)
    random.Random(0).shuffle(shuffled)
    reordered = build(concat(per_video, shuffled), ledger)
    assert rows_by_video(reordered) == before and reordered.moves == []
    first_rows = {r["doc_id"]: r for r in first.rows}
    for result in (build(concat(added), ledger), without := build(concat(kept), ledger)):
        now = rows_by_video(result)
        forced_out = {r["doc_id"] for r in result.ledger if r["forced_out"]}
        moved = (
            {m.doc_id for m in result.moves}
            | forced_out
            | {"|".join((r["video_id"], r["task_type"], r["item"])) for r in result.ledger if r["forced_out"]}
        )
        assert all(
            r["state"] == "unasked" and r["reason"].startswith("answer balance")
            for r in result.ledger
            if r["doc_id"] in forced_out
        )
        for v, rows in before.items():
            if v.startswith(removed_source + "_"):
                continue
            assert [r for r in now[v] if _doc(r) not in moved] == [r for r in rows if _doc(r) not in moved], v
        for r in result.rows:
            base = r["base_doc_id"] or r["doc_id"]
            if base in moved - forced_out:
                old = first_rows[r["doc_id"]]
                assert {k for k in r if r[k] != old[k]} == {"answer", "options", "answer_index"}
        assert_bound(result)
    assert without.moves  # removing a source broke the bound here: named in the ledger
    assert {r["doc_id"] for r in without.ledger if r["moved_from"]} == {m.doc_id for m in without.moves}
    gone = [r for r in without.ledger if r["video_id"].startswith(removed_source + "_")]
    assert gone and all(r["state"] == "gone" and r["n"] is not None for r in gone)
    # the removed source returns: its questions get their doc ids back (no number is new)
    back = build(concat(per_video), Ledger.from_rows(without.ledger))

    numbers = {r["identity"]: r["doc_id"] for r in first.ledger}
    returned = [r for r in back.ledger if r["video_id"].startswith(removed_source + "_") and r["state"] == "asked"]
    assert returned and all(r["doc_id"] == numbers[r["identity"]] for r in returned)
    assert_bound(back)


def _min_moves(counts: list[int]) -> int:
    """The fewest single-question letter moves that bring one stratum within the bound (brute force)."""
    n, k = sum(counts), len(counts)
    a = allowed_spread(n)
    window = range(max(0, n // k - a - 1), n // k + a + 2)  # a balanced target lies near n / k
    best = None
    for target in itertools.product(window, repeat=k):
        if sum(target) == n and max(target) - min(target) <= allowed_spread(n):
            moves = sum(max(0, c - t) for c, t in zip(counts, target, strict=True))
            best = moves if best is None else min(best, moves)
    return best


def test_a_forced_move_is_the_fewest_and_named(per_video, first):
    """Remove VMR questions answered A until the bound breaks: the repair moves as few known
    questions as the broken strata need, and the ledger names each (``moved_from``)."""
    release = [r for r in first.rows if r["split"] == "release" and r["task_type"] == "VMR"]
    target = Counter(r["answer"] for r in release)
    drop_ids = {r["doc_id"] for r in release if r["answer"] == "A"}
    drop = list(sorted(drop_ids))[: len(drop_ids) // 2 + 4]
    dropped_items = {
        (r["video_id"], r["subtype"], r["question"], tuple(r["query_times"]))
        for r in release
        if r["doc_id"] in set(drop)
    }
    q = concat(per_video)
    keep = [
        (r["video_id"], r["subtype"], r["question"], tuple(r["query_times"])) not in dropped_items
        or r["task_type"] != "VMR"
        for r in q.to_pylist()
    ]
    after = build(q.filter(pa.array(keep)), Ledger.from_rows(first.ledger))
    assert_bound(after)
    assert target["A"] > 0 and after.moves, "the scenario must break the bound"
    # The repair is greedy over nested strata (task, subtype, answer text): at least the moves the
    # worst stratum needs alone, at most those all the broken strata need one by one.
    first_letter = {r["doc_id"]: r["answer"] for r in first.rows}
    remaining = [r for r in after.rows if r["split"] == "release" and r["task_type"] == "VMR"]
    strata: dict[tuple, Counter] = {}
    for r in remaining:
        for s in ((r["task_type"],), (r["task_type"], r["subtype"]), (r["task_type"], r["subtype"], r["answer_text"])):
            strata.setdefault(s, Counter())[first_letter[r["doc_id"]]] += 1
    needed = [_min_moves([c[L] for L in LETTERS]) for c in strata.values()]
    assert max(needed) <= len(after.moves) <= sum(needed)
    named = {r["doc_id"]: r for r in after.ledger if r["moved_from"] is not None}
    assert set(named) == {m.doc_id for m in after.moves}
    for m in after.moves:
        row = next(r for r in after.rows if r["doc_id"] == m.doc_id)
        assert row["answer"] == m.after and named[m.doc_id]["moved_from"] == m.before != m.after
    unmoved = {r["doc_id"]: r["answer"] for r in first.rows if r["split"] == "release"}
    for r in after.rows:
        if r["split"] == "release" and r["doc_id"] not in named and r["doc_id"] in unmoved:
            assert r["answer"] == unmoved[r["doc_id"]], r["doc_id"]


def test_identity_is_the_declared_content(per_video):
    q = concat(per_video).to_pylist()[0]
    assert identity(q) == identity({**q, "index": q["index"] + 5, "question": "anything", "correct": "x"})
    assert identity(q) != identity({**q, "query_times": [t + 0.5 for t in q["query_times"]]})
    assert identity(q) != identity({**q, "item": q["item"] + "x"})
