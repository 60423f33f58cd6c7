"""The pairs reconciliation left for a reviewer, as the app lists and ranks them (CONTRACTS.md)."""

from __future__ import annotations

import pytest

from vsi_wild.verify.review import review_pairs

VID = "sample-x_back"


def decision(clip_a, local_a, clip_b, local_b, decision, distance=0.3):
    """A decision row's identity and evidence columns."""
    return {
        "video_id": VID,
        "concept": "trash can",
        "clip_a": clip_a,
        "local_a": local_a,
        "clip_b": clip_b,
        "local_b": local_b,
        "boundary": False,
        "box_iou": None,
        "appearance": 0.72,
        "distance": distance,
        "score": 2.1,
        "decision": decision,
        "reason": "near (distance 0.30 of range ...): too weak",
    }


def scored(clip_a, local_a, clip_b, local_b, decision, review, posterior, impact, **terms):
    """A decision row with the contract's columns (issue 30)."""
    row = {
        **decision_row(clip_a, local_a, clip_b, local_b),
        "decision": decision,
        "review": review,
        "posterior": posterior,
        "answer_impact": impact,
        "log_odds": sum(terms.values()),
        "llr_position": None,
        "llr_appearance": None,
        "llr_continuity": None,
        "llr_prior": None,
    }
    row.update({f"llr_{k}": v for k, v in terms.items()})
    return row


def decision_row(clip_a, local_a, clip_b, local_b):
    return {k: v for k, v in decision(clip_a, local_a, clip_b, local_b, "").items() if k not in ("decision", "score")}


def member(instance_id, clip, local):
    return {
        "video_id": VID,
        "instance_id": instance_id,
        "concept": "trash can",
        "clip_index": clip,
        "local_id": local,
        "first_time": 0.0,
        "last_time": 1.0,
    }


# clip 0 #4 and clip 2 #1 are one instance (3); clip 1 #7 is instance 5, clip 3 #2 instance 6
MEMBERS = [member(3, 0, 4), member(3, 2, 1), member(5, 1, 7), member(6, 3, 2)]


def test_review_items_are_the_rows_reconciliation_marks_for_review_in_the_declared_schema():
    from vsi_wild import schema

    decisions = [
        scored(0, 4, 1, 7, "apart", True, 0.45, 2, position=-0.4, prior=0.2),
        scored(0, 4, 2, 1, "merge", False, 0.98, 3, position=-0.1, prior=3.9),
        scored(2, 1, 3, 2, "merge", True, 0.6, 0, continuity=1.2),
    ]
    schema.table(schema.MERGE_DECISIONS, decisions)
    pairs = review_pairs(decisions, MEMBERS)
    assert [(p["instance_a"], p["instance_b"], p["decision"], p["merged"]) for p in pairs] == [
        (3, 5, "apart", False),
        (3, 6, "merge", False),
    ]
    assert pairs[0]["distance"] == 0.3 and pairs[0]["reason"]


def test_ranked_by_answer_impact_then_closeness_to_one_half_with_named_terms():
    decisions = [
        scored(0, 4, 1, 7, "apart", True, 0.45, 0, position=-0.4, prior=0.2),
        scored(2, 1, 3, 2, "apart", True, 0.2, 3, position=-1.6),
        scored(0, 4, 3, 2, "merge", True, 0.55, 3, appearance=0.3),
        scored(1, 7, 3, 2, "apart", False, 0.01, 9, position=-5.0),
    ]  # sure: not for review
    pairs = review_pairs(decisions, MEMBERS)
    assert [(p["clip_a"], p["clip_b"]) for p in pairs] == [(0, 3), (2, 3), (0, 1)]
    assert pairs[0]["terms"] == {"appearance": 0.3} and pairs[2]["terms"] == {"position": -0.4, "prior": 0.2}
    assert [p["decision"] for p in pairs] == ["merge", "apart", "apart"]


def test_sides_follow_the_members_given_and_a_removed_side_is_marked():
    now = [member(3, 0, 4), member(3, 2, 1), member(3, 1, 7), {**member(6, 3, 2), "instance_id": None}]
    pairs = review_pairs([scored(0, 4, 1, 7, "apart", True, 0.5, 1), scored(2, 1, 3, 2, "apart", True, 0.5, 1)], now)
    assert [(p["instance_a"], p["instance_b"], p["merged"], p["removed"]) for p in pairs] == [
        (3, 3, True, False),
        (3, None, False, True),
    ]


def test_a_decision_without_its_members_is_an_error_naming_it():
    with pytest.raises(ValueError, match="clip 1 #7"):
        review_pairs([scored(0, 4, 1, 7, "apart", True, 0.5, 1)], [member(3, 0, 4)])


def test_a_pair_is_named_by_the_concept_its_instances_have_after_the_fixes():
    """A person renamed instance 3 (clip 0 #4) and instance 5 (clip 1 #7) from trash can: the pair
    between them is named as they are now; renamed apart, by both names; without the names after the
    fixes (the queue's list), by reconciliation's."""
    decisions = [scored(0, 4, 1, 7, "apart", True, 0.45, 2)]
    assert review_pairs(decisions, MEMBERS)[0]["concept"] == "trash can"
    assert review_pairs(decisions, MEMBERS, {3: "bin", 5: "bin", 6: "trash can"})[0]["concept"] == "bin"
    assert review_pairs(decisions, MEMBERS, {3: "bin", 5: "trash can"})[0]["concept"] == "bin / trash can"


def test_a_pair_the_fixes_decided_without_naming_it_is_marked_as_the_metadata_stage_counts_it():
    """A side removed, or the two sides renamed apart by a person (``metadata.decided_apart``): the
    fixes decided the pair, which the metadata stage no longer lists as pending; renamed alike (the
    benchmark's vocabulary, or a rename of both), it is still to decide."""
    decisions = [scored(0, 4, 1, 7, "apart", True, 0.45, 2)]
    assert not review_pairs(decisions, MEMBERS)[0]["decided_apart"]
    assert not review_pairs(decisions, MEMBERS, {3: "bin", 5: "bin"})[0]["decided_apart"]
    assert review_pairs(decisions, MEMBERS, {3: "bin", 5: "trash can"})[0]["decided_apart"]
    removed = [member(3, 0, 4), {**member(5, 1, 7), "instance_id": None}]
    assert review_pairs(decisions, removed, {3: "trash can"})[0]["decided_apart"]
