"""Fix files saved by the verification app (vsi_wild/verify/fixfile.py), without a store or a browser:
comments a person wrote survive, a stale save and an invalid one write nothing, history and restore."""

from __future__ import annotations

import pytest

from vsi_wild.stages import fixes as fx
from vsi_wild.verify import fixfile

VID = "sample-walk_front"
HAND = f"""# reviewed by Ana
video_id: {VID}
fixes:
  - op: merge   # same chair
    instances: [3, 11]
  # the next one was hard
  - op: rename_concept
    from: couch
    to: sofa
"""
MERGE = {"op": "merge", "instances": [3, 11]}
RENAME = {"op": "rename_concept", "from": "couch", "to": "sofa"}


def parse(text: str) -> None:
    fx.parse_fix_text(text, "test.yaml", VID)


def test_render_keeps_comments_and_writes_new_fixes_as_the_docs_do():
    text = fixfile.render(
        HAND.encode(), VID, [RENAME, MERGE, {"op": "add_instance", "concept": "chair", "spans": [[1.0, 2.5]]}]
    )
    assert text.startswith("# reviewed by Ana\n")
    assert "  - op: merge   # same chair\n" in text and "  # the next one was hard\n  - op: rename_concept" in text
    assert "    spans: [[1.0, 2.5]]\n" in text
    assert [f.op.op for f in fx.parse_fix_text(text, "t.yaml", VID).fixes] == [
        "rename_concept",
        "merge",
        "add_instance",
    ]
    assert fixfile.render(None, VID, []) == f"video_id: {VID}\nfixes: []\n"


def test_save_refuses_a_stale_page_and_an_invalid_file_and_keeps_history(tmp_path):
    path = tmp_path / f"{VID}.yaml"
    sha = fixfile.save(path, VID, [MERGE], fixfile.NO_FILE, parse)
    first = path.read_bytes()
    with pytest.raises(fixfile.StaleSave):
        fixfile.save(path, VID, [RENAME], fixfile.NO_FILE, parse)  # loaded before the file existed
    with pytest.raises(fx.FixError, match="field 'to'"):
        fixfile.save(path, VID, [{"op": "rename_concept", "from": "couch", "to": ""}], sha, parse)
    assert path.read_bytes() == first and fixfile.history(path, VID) == []
    sha2 = fixfile.save(path, VID, [MERGE, RENAME], sha, parse)
    assert fixfile.history(path, VID) == [1]
    assert (fixfile.history_dir(path, VID) / "1.yaml").read_bytes() == first
    sha3 = fixfile.restore(path, VID, 1, sha2, parse)
    assert path.read_bytes() == first and sha3 == sha and fixfile.history(path, VID) == [1, 2]
    assert not list(tmp_path.glob(".*.tmp-*"))  # atomic writes leave no scratch file


def add(fix):
    return {"kind": "add", "fix": fix}


def test_edits_add_drop_and_replace_what_decides_one_thing():
    accept = {"op": "review_question", "question": "0123456789ab", "verdict": "accept", "by": "ana"}
    reject = {
        "op": "review_question",
        "question": "0123456789ab",
        "verdict": "reject",
        "reason": "ambiguous",
        "by": "ana",
    }
    out = fixfile.apply_edits(
        [MERGE, accept],
        [
            add(RENAME),
            {"kind": "drop", "fix": MERGE},
            add(reject),
            {"kind": "drop", "fix": {"op": "merge", "instances": [1, 2]}},
        ],
    )
    assert out == [RENAME, reject]  # her later verdict replaces her earlier; dropping a fix that is gone is nothing
    second = {**accept, "by": "ben"}  # a second reviewer's verdict is kept beside hers (agreement compares them)
    assert fixfile.apply_edits(out, [add(second)]) == [RENAME, reject, second]
    stamped = {**MERGE, "by": "ana", "at": "2026-12-05T10:00:00Z"}
    assert fixfile.apply_edits([stamped], [{"kind": "drop", "fix": MERGE}]) == []


def test_a_save_is_rebased_onto_a_newer_file_and_what_no_longer_applies_is_returned(tmp_path):
    path = tmp_path / f"{VID}.yaml"
    fixfile.save_edits(path, VID, [add(MERGE)], parse)
    # a second page saves in between: the pending edits are applied to its file, not refused
    theirs = {"op": "review_question", "question": "0123456789ab", "verdict": "accept"}
    fixfile.save_edits(path, VID, [add(theirs)], parse)

    def no_sofa(text):  # a validation that refuses one of the pending fixes
        parse(text)
        if "sofa" in text:
            raise fx.FixError(str(path), 7, "to", "no instance has concept 'couch'")

    sha, failed = fixfile.save_edits(path, VID, [add(RENAME), add({"op": "remove_instance", "instance": 4})], no_sofa)
    assert [e["fix"] for e, _ in failed] == [RENAME] and failed[0][1].field == "to"
    saved = fx.parse_fix_text(path.read_text(), "t.yaml", VID)
    assert [f.op.op for f in saved.fixes] == ["merge", "review_question", "remove_instance"]
    assert fixfile.history(path, VID) == [1, 2] and sha == fixfile.sha256_text(path.read_bytes())
    _, failed = fixfile.save_edits(path, VID, [add(RENAME)], no_sofa)  # nothing applies: nothing written
    assert len(failed) == 1 and fixfile.history(path, VID) == [1, 2]
