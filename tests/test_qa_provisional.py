"""Questions that rest on an unreviewed reconciliation decision say so (stages/qa/provisional.py,
stages/metadata.py: pending_reviews)."""

from __future__ import annotations

from vsi_wild import schema
from vsi_wild.stages import fixes as fx
from vsi_wild.stages import metadata as meta
from vsi_wild.stages.qa import provisional

VID = "sample-x_front"


def decision(clip_a, local_a, clip_b, local_b, concept="bench", review=True, decided="apart"):
    return {
        "video_id": VID,
        "concept": concept,
        "clip_a": clip_a,
        "local_a": local_a,
        "clip_b": clip_b,
        "local_b": local_b,
        "decision": decided,
        "review": review,
        "posterior": 0.45,
        "answer_impact": 3,
    }


def member(instance_id, clip, local, concept="bench"):
    return {"video_id": VID, "instance_id": instance_id, "concept": concept, "clip_index": clip, "local_id": local}


MEMBERS = [
    member(1, 0, 1),
    member(2, 1, 4),
    member(3, 2, 2),
    member(3, 3, 5),
    member(4, 0, 7, "cone"),
    member(5, 2, 8, "cone"),
]
DECISIONS = [
    decision(0, 1, 1, 4),
    decision(2, 2, 3, 5, decided="merge"),
    decision(0, 7, 2, 8, "cone"),
    decision(0, 1, 2, 2, review=False),
]


def test_a_fix_resolves_the_review_item_it_names_and_no_other():
    text = (
        f"video_id: {VID}\nfixes:\n  - op: merge\n    instances: [1, 2]\n  - op: split\n    clip: 3\n    local_id: 5\n"
        "  - op: review_pair\n    clip_a: 0\n    local_a: 7\n    clip_b: 2\n    local_b: 8\n    decision: apart\n"
    )
    fixset = fx.parse_fix_text(text, "fixes/x.yaml", VID)
    assert len(meta.pending_reviews(DECISIONS, MEMBERS, fx.FixSet.empty(VID))) == 3
    left = meta.pending_reviews(DECISIONS, MEMBERS, fixset)
    assert left == []  # the cone's pair kept apart by a person's review_pair decision
    only_merge = fx.parse_fix_text(
        f"video_id: {VID}\nfixes:\n  - op: merge\n    instances: [1, 2]\n", "fixes/x.yaml", VID
    )
    left = meta.pending_reviews(DECISIONS, MEMBERS, only_merge)
    assert [(d["concept"], d["instance_a"], d["instance_b"]) for d in left] == [("bench", 3, 3), ("cone", 4, 5)]
    schema.table(schema.REVIEW_PENDING, left)


def _question(task, concepts):
    return {"video_id": VID, "task_type": task, "concepts": concepts}


def test_voc_and_voo_questions_of_a_concept_with_a_pending_item_are_provisional():
    rows = [
        _question("VOC", ["cone"]),
        _question("VOC", ["bench"]),
        _question("VOO", ["bench", "bin", "cup", "car"]),
        _question("VOO", ["cone", "bin", "cup", "car"]),
        _question("VMR", None),
    ]
    full = [{**{f.name: None for f in schema.QA_QUESTIONS}, **r} for r in rows]
    table = schema.table(schema.QA_QUESTIONS, full)
    pending = meta.pending_reviews(DECISIONS[2:], MEMBERS, fx.FixSet.empty(VID))
    out = provisional.mark(table, pending)
    assert out.schema == schema.QA_QUESTIONS
    assert out["provisional"].to_pylist() == [True, False, False, True, False]
    reason = out["provisional_reason"].to_pylist()
    assert reason[0].startswith("rests on 1 unreviewed reconciliation decision(s): cone clip 0 #7 / clip 2 #8 (apart")
    assert reason[1] is None
