"""The pairs reconciliation left for a reviewer, as the temporal page lists them."""

from __future__ import annotations

import pytest

from vsi_wild.verify.review import review_pairs

VID = "sample-x_back"


def decision(clip_a, local_a, clip_b, local_b, decision, distance=0.3):
    return {"video_id": VID, "concept": "trash can", "clip_a": clip_a, "local_a": local_a, "clip_b": clip_b,
            "local_b": local_b, "boundary": False, "box_iou": None, "appearance": 0.72, "distance": distance,
            "score": 2.1, "decision": decision, "reason": "near (distance 0.30 of range ...): too weak"}


def member(instance_id, clip, local):
    return {"video_id": VID, "instance_id": instance_id, "concept": "trash can", "clip_index": clip, "local_id": local,
            "first_time": 0.0, "last_time": 1.0}


def test_review_pairs_name_the_instances_a_merge_fix_joins():
    # clip 0 #4 and clip 2 #1 are one instance (3); clip 1 #7 is instance 5, clip 3 #2 instance 6
    members = [member(3, 0, 4), member(3, 2, 1), member(5, 1, 7), member(6, 3, 2)]
    decisions = [decision(0, 4, 1, 7, "review"), decision(0, 4, 2, 1, "merge", 0.02),
                 decision(1, 7, 3, 2, "apart", 0.9),
                 decision(2, 1, 3, 2, "review")]
    pairs = review_pairs(decisions, members)
    assert [(p["instance_a"], p["instance_b"]) for p in pairs] == [(3, 5), (3, 6)]
    assert pairs[0]["distance"] == 0.3 and pairs[0]["appearance"] == 0.72 and "too weak" in pairs[0]["reason"]
    # a pair whose two sides ended in one instance anyway (other evidence joined them) is not listed
    assert review_pairs([decision(0, 4, 2, 1, "review")], members) == []


def test_a_decision_without_its_members_is_an_error_naming_it():
    with pytest.raises(ValueError, match="clip 1 #7"):
        review_pairs([decision(0, 4, 1, 7, "review")], [member(3, 0, 4)])
