"""`vsi-wild fixes agreement`: two reviewers' decisions on the same items compared (no browser)."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, copy_root
from test_verify import _current
from typer.testing import CliRunner

from vsi_wild.store import Store
from vsi_wild.verify import agreement as ag
from vsi_wild.verify import progress

VID = "sample-walk_right"


def pair(decision, by, local_b=7):
    return {
        "op": "review_pair",
        "clip_a": 0,
        "local_a": 0,
        "clip_b": 3,
        "local_b": local_b,
        "decision": decision,
        "by": by,
        "at": "2026-12-05T10:00:00Z",
    }


def test_kappa_and_sectors_against_hand_counts():
    assert ag.sector(0) == "forward" and ag.sector(-22.4) == "forward" and ag.sector(22.6) == "forward-right"
    assert ag.sector(-180) == "backward" and ag.sector(-67.5) == "forward-left" and ag.sector(-67.6) == "left"
    # 10 items: both say yes on 4, no on 3, they differ on 3 -> p_o 0.7; a says yes 6 times, b 5 times:
    # p_e = 0.6 * 0.5 + 0.4 * 0.5 = 0.5 -> kappa 0.4
    labels = [("y", "y")] * 4 + [("n", "n")] * 3 + [("y", "n")] * 2 + [("n", "y")]
    assert ag.kappa(labels) == pytest.approx(0.4)
    assert ag.kappa([("y", "y")] * 3) is None  # one label only: chance agreement is total


def test_the_cli_reports_agreement_per_category_and_each_disagreement(sample_root, tmp_path):
    root = copy_root(sample_root[0], tmp_path / "data")
    (skipped,) = [r for r in _current(root, "qa", VID, "skipped.parquet") if r["specks"]]  # the view's untold speck
    speck = {"op": "speck", "clip": skipped["specks"][0]["clip_index"], "local_id": skipped["specks"][0]["local_id"]}
    ball = min(
        r["instance_id"]
        for r in _current(root, "metadata", VID, "instances.parquet")
        if r["concept"] == skipped["item"]
    )
    fixes = [
        {**speck, "instance": ball, "by": "ana"},
        {**speck, "instance": "none", "by": "ben"},
        pair("merge", "ana"),
        pair("merge", "ben"),
        pair("apart", "ana", 8),
        pair("merge", "ben", 8),
        {"op": "motion", "clip": 2, "angle_deg": 100.0, "by": "ana"},  # right
        {"op": "motion", "clip": 2, "angle_deg": 80.0, "by": "ben"},  # right too
        {"op": "motion", "clip": 4, "state": "none", "by": "ben"},
        {"op": "review_question", "question": "0123456789ab", "verdict": "accept", "by": "ana"},
        {"op": "review_question", "question": "0123456789ab", "verdict": "reject", "reason": "ambiguous", "by": "ben"},
        # the same answers judged alike; different answers (a fix changed it in between) are not compared
        {"op": "review_question", "question": "abcdef012345", "verdict": "accept", "answers": ["2"], "by": "ana"},
        {"op": "review_question", "question": "abcdef012345", "verdict": "accept", "answers": ["2"], "by": "ben"},
        {"op": "review_question", "question": "fedcba543210", "verdict": "accept", "answers": ["3"], "by": "ana"},
        {
            "op": "review_question",
            "question": "fedcba543210",
            "verdict": "reject",
            "answers": ["4"],
            "reason": "x",
            "by": "ben",
        },
    ]
    from ruamel.yaml import YAML

    (root / "fixes").mkdir()
    with open(root / "fixes" / f"{VID}.yaml", "w") as fh:
        YAML().dump({"video_id": VID, "fixes": fixes}, fh)
    progress.write(Store(root), VID, progress.Progress(clips_verified=[4]), reviewer="ana")  # clip 4 as it was
    from vsi_wild.cli import app

    args = ["fixes", "agreement", "-c", str(REPO / "configs" / "sample.yaml"), "--data-root", str(root)]
    check = CliRunner().invoke(app, ["fixes", "check", *args[2:]])
    assert check.exit_code == 0, check.output  # the file with both reviewers' decisions is valid
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["reviewers"] == ["ana", "ben"]
    got = {c: (v["pairs"][0]["both"], v["pairs"][0]["agree"]) for c, v in report["categories"].items()}
    # clip 4: verified as automatic vs none
    assert got == {"merges": (2, 1), "vmr": (2, 1), "questions": (2, 1), "specks": (1, 0)}
    text = CliRunner().invoke(app, args).output
    assert "merges (review pairs): ana and ben both decided 2, agree on 1 (50.0%)" in text
    assert f"{VID} pair clip 0 #0 · clip 3 #8: ana apart, ben merge" in text
    assert f"{VID} question 0123456789ab: ana accept, ben reject" in text
    assert f"{VID} speck clip {speck['clip']} #{speck['local_id']}: ana {ball}, ben none" in text
