"""Reconciliation's review items as the verification app lists them (``review_pairs``: the contract
the review queue reads)."""

from __future__ import annotations

import pytest

from vsi_wild import schema
from vsi_wild.verify.review import review_pairs

VID = "sample-x_back"


def decision(clip_a, local_a, clip_b, local_b, decided, review, posterior=0.5, impact=2, position=-1.2):
    return {"video_id": VID, "concept": "trash can", "clip_a": clip_a, "local_a": local_a, "clip_b": clip_b,
            "local_b": local_b, "decision": decided, "review": review, "log_odds": position + 0.8,
            "posterior": posterior, "llr_position": position, "llr_appearance": None, "llr_continuity": None,
            "llr_prior": 0.8, "answer_impact": impact, "reason": f"position {position:+.1f}, look-alike prior +0.8",
            "boundary": False, "box_iou": None, "appearance": 0.72, "distance": 0.3}


def member(instance_id, clip, local):
    return {"video_id": VID, "instance_id": instance_id, "concept": "trash can", "clip_index": clip, "local_id": local,
            "first_time": 0.0, "last_time": 1.0}


def test_review_items_carry_the_contracts_keys_most_answers_first_then_the_least_sure():
    # clip 0 #4 and clip 2 #1 are one instance (3); clip 1 #7 is instance 5, clip 3 #2 instance 6
    members = [member(3, 0, 4), member(3, 2, 1), member(5, 1, 7), member(6, 3, 2)]
    decisions = [decision(0, 4, 1, 7, "apart", True, 0.40, 2), decision(0, 4, 2, 1, "merge", True, 0.62, 5),
                 decision(1, 7, 3, 2, "apart", False, 0.01, 3), decision(2, 1, 3, 2, "apart", True, 0.48, 2)]
    schema.table(schema.MERGE_DECISIONS, decisions)  # the rows have the declared schema
    items = review_pairs(decisions, members)
    keys = {"concept", "clip_a", "local_a", "clip_b", "local_b", "instance_a", "instance_b", "decision", "review",
            "posterior", "answer_impact", "terms", "reason"}
    assert all(keys <= set(p) for p in items)
    # the merged pair (one instance: a split resolves it) first, most answers; then 0.48 before 0.40
    assert [(p["instance_a"], p["instance_b"], p["decision"]) for p in items] == [
        (3, 3, "merge"), (3, 6, "apart"), (3, 5, "apart")]
    assert items[0]["terms"] == {"llr_position": -1.2, "llr_prior": 0.8}  # terms that apply only
    assert items[1]["reason"].startswith("position -1.2")


def test_a_decision_without_its_members_is_an_error_naming_it():
    with pytest.raises(ValueError, match="clip 1 #7"):
        review_pairs([decision(0, 4, 1, 7, "apart", True)], [member(3, 0, 4)])
