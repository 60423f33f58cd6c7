"""Human fixes: every correction changes the derived metadata as stated; a bad file changes nothing."""

from __future__ import annotations

import copy

import pytest

from vsi_wild import schema
from vsi_wild.stages import fixes as fx
from vsi_wild.stages import metadata as meta

VID = "sample-x_front"
FPS = 8.0


def obs(iid, concept, samples):
    return [
        {
            "video_id": VID,
            "instance_id": iid,
            "concept": concept,
            "sample_index": k,
            "time": k / 2,
            "frame": 4 * k,
            "fps": FPS,
            "x0": 1.0,
            "y0": 2.0,
            "x1": 30.0,
            "y1": 40.0,
            "area": 100,
            "origin": "auto",
        }
        for k in samples
    ]


def auto():
    """Automatic metadata of a 70 s video in 30 s clips: two chairs (one per visit), a couch seen
    in clips 0 and 1, and two motion clips."""
    observations = (
        obs(1, "chair", range(0, 10))
        + obs(2, "chair", range(100, 110))
        + obs(3, "couch", list(range(20, 31)) + list(range(70, 76)))
    )
    members = [
        {
            "video_id": VID,
            "instance_id": 1,
            "concept": "chair",
            "clip_index": 0,
            "local_id": 5,
            "first_time": 0.0,
            "last_time": 4.5,
        },
        {
            "video_id": VID,
            "instance_id": 2,
            "concept": "chair",
            "clip_index": 1,
            "local_id": 2,
            "first_time": 50.0,
            "last_time": 54.5,
        },
        {
            "video_id": VID,
            "instance_id": 3,
            "concept": "couch",
            "clip_index": 0,
            "local_id": 7,
            "first_time": 10.0,
            "last_time": 15.0,
        },
        {
            "video_id": VID,
            "instance_id": 3,
            "concept": "couch",
            "clip_index": 1,
            "local_id": 9,
            "first_time": 35.0,
            "last_time": 37.5,
        },
    ]
    motion = [
        {
            "video_id": VID,
            "clip_index": i,
            "clip_start": 30.0 * i,
            "clip_end": min(30.0 * (i + 1), 70.0),
            "state": "ok",
            "pivot_time": 30.0 * i + 10,
            "pivot_frame": int((30 * i + 10) * FPS),
            "fps": FPS,
            "angle_deg": 0.0,
            "speed": 1.0,
            "stability": 0.95,
            "views_consistent": True,
            "reason": "auto",
            "origin": "auto",
        }
        for i in range(3)
    ]
    samples = [
        {
            "video_id": VID,
            "sample_index": k,
            "time": k / 2,
            "frame": 4 * k,
            "fps": FPS,
            "clip_index": int(k // 60),
            "angle_deg": 30.0,
            "speed": 1.0,
            "stability": 0.9,
            "moving": True,
            "candidate": True,
        }
        for k in range(140)
    ]
    return observations, members, motion, samples


def inputs(observations, members, motion, samples, params, specks=None):
    return meta.FixInputs(
        specks=specks,
        video_id=VID,
        observations=observations,
        members=members,
        motion=motion,
        motion_samples=samples,
        duration_s=70.0,
        fps=FPS,
        params=params,
        clip_seconds=30.0,
    )


def apply(text: str):
    fs = fx.parse_fix_text(text, f"fixes/{VID}.yaml", VID)
    o, m, mo, s = auto()
    return meta.apply_fixes(fs, inputs(o, m, mo, s, meta.MetadataParams(span_gap_s=1.0)))


def by_id(d):
    return {r["instance_id"]: r for r in d.instances}


def test_no_fixes_gives_the_automatic_metadata():
    d = apply(f"video_id: {VID}\nfixes: []\n")
    got = by_id(d)
    assert sorted(got) == [1, 2, 3] and all(r["origin"] == "auto" for r in got.values())
    assert got[3]["spans"] == [{"start": 10.0, "end": 15.0}, {"start": 35.0, "end": 37.5}]
    assert (got[1]["first_time"], got[1]["last_time"], got[1]["n_observations"]) == (0.0, 4.5, 10)
    assert d.applied == []


def test_merge_two_instances():
    d = apply(f"video_id: {VID}\nfixes:\n  - op: merge\n    instances: [2, 1]\n    note: same chair\n")
    got = by_id(d)
    assert sorted(got) == [1, 3]  # the merged instance keeps the smaller id
    c = got[1]
    assert (c["concept"], c["first_time"], c["last_time"], c["n_observations"], c["origin"]) == (
        "chair",
        0.0,
        54.5,
        20,
        "fix",
    )
    assert c["spans"] == [{"start": 0.0, "end": 4.5}, {"start": 50.0, "end": 54.5}]
    assert {o["instance_id"] for o in d.observations} == {1, 3}
    assert d.applied[0]["op"] == "merge" and d.applied[0]["line"] == 3


def test_rename_a_concept():
    d = apply(f"video_id: {VID}\nfixes:\n  - op: rename_concept\n    from: couch\n    to: sofa\n")
    got = by_id(d)
    assert got[3]["concept"] == "sofa" and got[3]["origin"] == "fix"
    assert {o["concept"] for o in d.observations if o["instance_id"] == 3} == {"sofa"}
    assert got[1]["concept"] == "chair"


def test_add_a_missed_instance():
    d = apply(
        f"video_id: {VID}\nfixes:\n  - op: add_instance\n    concept: chair\n    spans: [[60, 61], [65.2, 65.2]]\n"
    )
    got = by_id(d)
    new = got[4]  # after the largest automatic id
    assert (new["concept"], new["first_time"], new["last_time"], new["origin"]) == ("chair", 60.0, 65.2, "fix")
    assert new["n_observations"] == 3  # 60, 60.5, 61; a span between samples still marks the appearance
    assert new["spans"] == [{"start": 60.0, "end": 61.0}, {"start": 65.2, "end": 65.2}]
    assert sum(r["concept"] == "chair" for r in d.instances) == 3


def test_recalibrate_appearance_order():
    # the second chair was really there from 5 s on: the first-appearance order changes
    before = [r["instance_id"] for r in apply(f"video_id: {VID}\nfixes: []\n").instances]
    d = apply(f"video_id: {VID}\nfixes:\n  - op: set_appearance\n    instance: 2\n    first_time: 5.0\n")
    after = [r["instance_id"] for r in d.instances]
    assert before == [1, 3, 2] and after == [1, 2, 3]
    assert by_id(d)[2]["first_time"] == 5.0 and by_id(d)[2]["spans"] == [{"start": 5.0, "end": 54.5}]
    # moving the last appearance earlier trims the spans
    d = apply(f"video_id: {VID}\nfixes:\n  - op: set_appearance\n    instance: 3\n    last_time: 12.0\n")
    assert by_id(d)[3]["spans"] == [{"start": 10.0, "end": 12.0}] and by_id(d)[3]["last_time"] == 12.0
    # a first appearance after the last is refused
    with pytest.raises(fx.FixError, match="after the last"):
        apply(f"video_id: {VID}\nfixes:\n  - op: set_appearance\n    instance: 1\n    first_time: 16.0\n")


def test_remove_and_split():
    d = apply(
        f"video_id: {VID}\nfixes:\n  - op: remove_instance\n    instance: 2\n"
        f"  - op: split\n    clip: 1\n    local_id: 9\n"
    )
    got = by_id(d)
    assert 2 not in got
    assert (got[3]["first_time"], got[3]["last_time"]) == (10.0, 15.0)
    assert (got[4]["concept"], got[4]["first_time"], got[4]["last_time"]) == ("couch", 35.0, 37.5)


def test_motion_pivot_angle_and_none():
    d = apply(
        f"video_id: {VID}\nfixes:\n  - op: motion\n    clip: 1\n    state: none\n"
        f"  - op: motion\n    clip: 0\n    pivot_time: 12.2\n    angle_deg: -90\n"
        f"  - op: motion\n    clip: 2\n    pivot_time: 61\n"
    )
    m = {r["clip_index"]: r for r in d.motion}
    assert (
        m[1]["state"] == "none" and m[1]["pivot_time"] is None and m[1]["angle_deg"] is None and m[1]["origin"] == "fix"
    )
    assert (m[0]["state"], m[0]["pivot_time"], m[0]["pivot_frame"], m[0]["angle_deg"]) == ("ok", 12.0, 96, -90.0)
    assert (m[2]["pivot_time"], m[2]["angle_deg"]) == (61.0, 30.0)  # angle read from the motion samples
    assert m[0]["origin"] == "fix"


@pytest.mark.parametrize(
    "body,line,field,why",
    [
        ("  - op: merge\n    instances: [1, 99]\n", 4, "instances", "no instance 99"),
        ("  - op: merge\n    instances: [1, 3]\n", 4, "instances", "different concepts"),
        ("  - op: rename_concept\n    from: table\n    to: desk\n", 4, "from", "no instance has concept 'table'"),
        ("  - op: motion\n    clip: 7\n    state: none\n", 4, "clip", "no motion clip 7"),
        ("  - op: motion\n    clip: 0\n    pivot_time: 45\n", 5, "pivot_time", "outside clip 0"),
        ("  - op: add_instance\n    concept: cup\n    spans: [[60, 90]]\n", 5, "spans", "ends after the video"),
        (
            "  - op: remove_instance\n    instance: 1\n  - op: set_appearance\n    instance: 1\n    first_time: 3\n",
            6,
            "instance",
            "was removed by the fix at line 3",
        ),
        ("  - op: split\n    clip: 0\n    local_id: 5\n", 5, "local_id", "nothing to split"),
    ],
)
def test_bad_fixes_name_file_line_and_field(body, line, field, why):
    o, m, mo, s = auto()
    snapshot = copy.deepcopy((o, m, mo, s))
    text = f"video_id: {VID}\nfixes:\n" + body
    fs = fx.parse_fix_text(text, f"fixes/{VID}.yaml", VID)
    with pytest.raises(fx.FixError) as e:
        meta.apply_fixes(fs, inputs(o, m, mo, s, meta.MetadataParams()))
    msg = str(e.value)
    assert msg.startswith(f"fixes/{VID}.yaml:{line}: field '{field}':"), msg
    assert why in msg
    assert (o, m, mo, s) == snapshot  # the automatic metadata is untouched


@pytest.mark.parametrize(
    "text,line,field",
    [
        (f"video_id: {VID}\nfixes:\n  - op: merge\n    instances: [1, x]\n", 4, "instances.1"),
        (f"video_id: {VID}\nfixes:\n  - op: mrege\n    instances: [1, 2]\n", 3, "op"),
        (f"video_id: {VID}\nfixes:\n  - op: rename_concept\n    from: a\n    too: b\n", 5, "too"),
        (f"video_id: {VID}\nfixes:\n  - op: motion\n    clip: 1\n    state: none\n    angle_deg: 30\n", 6, "angle_deg"),
        (f"video_id: {VID}\nfixes:\n  - op: motion\n    clip: 1\n    angle_deg: 180\n", 5, "angle_deg"),
        (
            f"video_id: {VID}\nfixes:\n  - op: set_appearance\n    instance: 1\n    first_time: 5\n    last_time: 2\n",
            6,
            "last_time",
        ),
        ("video_id: other_front\nfixes: []\n", 1, "video_id"),
        (f"video_id: {VID}\nfixes:\n  - op: merge\n    instances: [1\n", None, None),
        (f"video_id: {VID}\nextra: 1\nfixes: []\n", 2, "extra"),
    ],
)
def test_invalid_files_are_rejected_with_file_line_and_field(text, line, field):
    with pytest.raises(fx.FixError) as e:
        fx.parse_fix_text(text, "f.yaml", VID)
    err = e.value
    assert err.file == "f.yaml" and err.field == field
    if line is not None:
        assert err.line == line
    assert str(e.value).startswith("f.yaml:")


def test_fingerprint_follows_the_file(tmp_path):
    p = tmp_path / f"{VID}.yaml"
    assert fx.fingerprint(p) == "none"
    p.write_text(f"video_id: {VID}\nfixes: []\n")
    a = fx.fingerprint(p)
    p.write_text(f"video_id: {VID}\nfixes:\n  - op: remove_instance\n    instance: 1\n")
    assert fx.fingerprint(p) != a != "none"


def test_every_op_has_a_handler():
    assert set(meta.FIX_HANDLERS) == set(fx.OPS)


# ------------------------------------------------------------------------------ drawn tracks, pairs, vocabulary
def boxes_of(d, iid):
    return {o["time"]: (o["x0"], o["y0"], o["x1"], o["y1"]) for o in d.observations if o["instance_id"] == iid}


def test_a_drawn_track_is_interpolated_between_keyframes_and_ends_at_outside():
    d = apply(
        f"video_id: {VID}\nfixes:\n  - op: add_instance\n    concept: chair\n    boxes:\n"
        "      - {time: 60.0, box: [10, 20, 30, 40]}\n      - {time: 62.0, box: [50, 20, 70, 60]}\n"
        "      - {time: 63.2, outside: true}\n      - {time: 65.1, box: [0, 0, 8, 8]}\n"
    )
    new = max(by_id(d))
    got = boxes_of(d, new)
    # 60, 60.5, ... 62 interpolated linearly (a quarter of the way per half second), held to 63.2, none
    # until 65.1, whose nearest timestamp 65.0 gets its box
    assert got[60.0] == (10, 20, 30, 40) and got[60.5] == (20, 20, 40, 45) and got[62.0] == (50, 20, 70, 60)
    assert got[63.0] == (50, 20, 70, 60) and 63.5 not in got and 64.5 not in got and got[65.0] == (0, 0, 8, 8)
    row = by_id(d)[new]
    assert row["spans"] == [{"start": 60.0, "end": 63.0}, {"start": 65.0, "end": 65.0}] and row["origin"] == "fix"
    assert row["n_observations"] == len(got) == 8


def test_set_box_moves_boxes_and_split_at_cuts_a_track():
    d = apply(
        f"video_id: {VID}\nfixes:\n  - op: set_box\n    instance: 1\n    boxes:\n"
        "      - {time: 1.0, box: [100, 100, 120, 140]}\n      - {time: 2.0, box: [100, 100, 120, 140]}\n"
    )
    got = boxes_of(d, 1)
    assert got[1.0] == got[1.5] == got[2.0] == (100, 100, 120, 140) and got[0.5] == (1.0, 2.0, 30.0, 40.0)
    d = apply(f"video_id: {VID}\nfixes:\n  - op: split_at\n    instance: 3\n    time: 36.0\n")
    ids = by_id(d)
    assert ids[3]["last_time"] == 35.5 and ids[4]["first_time"] == 36.0 and ids[4]["concept"] == "couch"
    members = {(m["clip_index"], m["local_id"]): m["instance_id"] for m in d.members}
    assert members[(0, 7)] == 3 and members[(1, 9)] == 4  # each member goes with its observations
    with pytest.raises(fx.FixError, match="leaves nothing on one side"):
        apply(f"video_id: {VID}\nfixes:\n  - op: split_at\n    instance: 3\n    time: 50.0\n")


def test_review_pair_merges_or_keeps_apart_and_members_follow():
    pair = "  - op: review_pair\n    clip_a: 0\n    local_a: 5\n    clip_b: 1\n    local_b: 2\n    decision: {}\n"
    d = apply(f"video_id: {VID}\nfixes:\n" + pair.format("merge"))
    assert 2 not in by_id(d) and by_id(d)[1]["n_observations"] == 20
    assert {(m["clip_index"], m["local_id"]): m["instance_id"] for m in d.members}[(1, 2)] == 1
    d = apply(f"video_id: {VID}\nfixes:\n" + pair.format("apart"))
    assert set(by_id(d)) == {1, 2, 3} and "kept apart" in d.applied[0]["summary"]
    couch = "  - op: review_pair\n    clip_a: 0\n    local_a: 7\n    clip_b: 1\n    local_b: 9\n    decision: apart\n"
    d = apply(f"video_id: {VID}\nfixes:\n" + couch)  # merged automatically: apart splits clip 1's member out
    assert by_id(d)[4]["first_time"] == 35.0 and by_id(d)[3]["last_time"] == 15.0
    removed = f"video_id: {VID}\nfixes:\n  - op: remove_instance\n    instance: 2\n" + pair.format("merge")
    with pytest.raises(fx.FixError, match="removed instance"):
        apply(removed)


def test_the_vocabulary_renames_before_the_video_fixes_and_is_recorded():
    vocab = fx.parse_vocabulary_text(
        "vocabulary:\n  - op: synonyms\n    concept: sofa\n    synonyms: [couch, settee]\n"
        "  - op: rename_concept\n    from: lamp\n    to: light\n",
        "fixes/vocabulary.yaml",
    )
    fs = fx.parse_fix_text(
        f"video_id: {VID}\nfixes:\n  - op: rename_concept\n    from: sofa\n    to: divan\n", f"fixes/{VID}.yaml", VID
    )
    o, m, mo, s = auto()
    d = meta.apply_fixes(fs, inputs(o, m, mo, s, meta.MetadataParams()), vocabulary=vocab)
    assert by_id(d)[3]["concept"] == "divan"
    assert [(a["file"], a["line"], a["op"]) for a in d.applied] == [
        ("fixes/vocabulary.yaml", 2, "synonyms"),
        (f"fixes/{VID}.yaml", 3, "rename_concept"),
    ]
    with pytest.raises(fx.FixError, match="no instance has concept 'couch'"):  # the video's fixes see the new names
        meta.apply_fixes(
            fx.parse_fix_text(
                f"video_id: {VID}\nfixes:\n  - op: rename_concept\n    from: couch\n    to: x\n", "f.yaml", VID
            ),
            inputs(o, m, mo, s, meta.MetadataParams()),
            vocab,
        )


@pytest.mark.parametrize(
    "text, line, field",
    [
        ("vocabulary:\n  - op: rename_concept\n    from: a\n    to: b\n    instances: [1]\n", 5, "instances"),
        ("vocabulary:\n  - op: merge\n    instances: [1, 2]\n", 2, "op"),
        ("vocabulary:\n  - op: synonyms\n    concept: sofa\n    synonyms: [sofa]\n", 4, "synonyms"),
        ("fixes: []\n", 1, "fixes"),
        ("# renames\nvocabulary: sofa\n", 2, "vocabulary"),
    ],
)
def test_a_bad_vocabulary_names_line_and_field(text, line, field):
    with pytest.raises(fx.FixError) as e:
        fx.parse_vocabulary_text(text, "fixes/vocabulary.yaml")
    assert (e.value.line, e.value.field) == (line, field), str(e.value)


def test_who_and_when_are_kept_and_checked():
    fs = fx.parse_fix_text(
        f"video_id: {VID}\nfixes:\n  - op: remove_instance\n    instance: 1\n    by: ana\n"
        "    at: 2026-12-05T10:00:00Z\n",
        "f.yaml",
        VID,
    )
    assert (fs.fixes[0].op.by, fs.fixes[0].op.at) == ("ana", "2026-12-05T10:00:00Z")
    with pytest.raises(fx.FixError, match="field 'at'"):
        fx.parse_fix_text(
            f"video_id: {VID}\nfixes:\n  - op: remove_instance\n    instance: 1\n    at: yesterday\n", "f.yaml", VID
        )


def test_a_question_verdict_keeps_the_answers_seen_and_a_verdict_on_new_answers_replaces_it():
    q = "0123456789ab"

    def verdict(answers, by="ana"):
        return (
            f"  - op: review_question\n    question: '{q}'\n    verdict: accept\n    answers: {answers}\n    by: {by}\n"
        )

    d = apply(f"video_id: {VID}\nfixes:\n" + verdict("[3]"))  # a count written by hand reads as a number
    assert [(r["question_id"], r["answers"], r["holds"]) for r in d.reviews] == [(q, ["3"], None)]
    assert d.applied[0]["summary"] == f"question {q}: accept of answer 3"
    # the same reviewer again after a fix changed the answer: the later verdict counts
    d = apply(f"video_id: {VID}\nfixes:\n" + verdict("[3]") + verdict("['4']"))
    assert [(r["answers"], r["line"]) for r in d.reviews] == [(["4"], 8)]
    schema.table(schema.QUESTION_REVIEWS, d.reviews)
    # ... but twice on the same answers is a slip, named with both lines
    with pytest.raises(fx.FixError, match=f"field 'question'.*question {q} was reviewed by the fix at line 3"):
        apply(f"video_id: {VID}\nfixes:\n" + verdict("[3]") + verdict("['3']"))
    with pytest.raises(fx.FixError, match="field 'answers'"):
        apply(f"video_id: {VID}\nfixes:\n" + verdict("[]"))


def _speck_inputs():
    o, m, mo, s = auto()
    specks = [{"clip_index": c, "local_id": lo, "concept": "chair"} for c, lo in ((0, 11), (1, 12), (2, 13), (0, 5))]
    return inputs(o, m, mo, s, meta.MetadataParams(), specks)


def test_a_speck_is_told_its_instance_or_no_object():
    """A person tells what a speck shows: an instance (followed through a later merge into the
    instance it became) or none; one whose instance a later fix removes shows nothing."""
    text = (
        f"video_id: {VID}\nfixes:\n"
        "  - op: speck\n    clip: 0\n    local_id: 11\n    instance: 2\n"
        "  - op: merge\n    instances: [1, 2]\n"
        "  - op: speck\n    clip: 1\n    local_id: 12\n    instance: none\n"
        "  - op: speck\n    clip: 2\n    local_id: 13\n    instance: 3\n"
        "  - op: remove_instance\n    instance: 3\n"
    )
    d = meta.apply_fixes(fx.parse_fix_text(text, f"fixes/{VID}.yaml", VID), _speck_inputs())
    assert d.specks_told == {(0, 11): 1, (1, 12): None, (2, 13): None}
    assert [a["summary"] for a in d.applied if a["op"] == "speck"] == [
        "speck clip 0 local 11: instance 2",
        "speck clip 1 local 12: no object",
        "speck clip 2 local 13: instance 3",
    ]
    assert sorted(by_id(d)) == [1]  # the speck fixes change no instance


@pytest.mark.parametrize(
    "body,field,why",
    [
        ("clip: 0\n    local_id: 99\n    instance: 1\n", "local_id", "no speck 99 in clip 0 (its specks: [5, 11])"),
        ("clip: 0\n    local_id: 5\n    instance: 2\n", "local_id", "clip 0 local 5 is tracked (instance 1)"),
        ("clip: 0\n    local_id: 11\n    instance: 99\n", "instance", "no instance 99"),
    ],
)
def test_a_speck_fix_names_a_speck_and_an_instance(body, field, why):
    text = f"video_id: {VID}\nfixes:\n  - op: speck\n    " + body
    with pytest.raises(fx.FixError) as e:
        meta.apply_fixes(fx.parse_fix_text(text, f"fixes/{VID}.yaml", VID), _speck_inputs())
    msg = str(e.value)
    assert msg.startswith(f"fixes/{VID}.yaml:") and e.value.field == field and why in msg, msg


def test_a_speck_fix_is_checked_against_the_specks_only_where_they_were_read():
    text = f"video_id: {VID}\nfixes:\n  - op: speck\n    clip: 0\n    local_id: 99\n    instance: 1\n"
    o, m, mo, s = auto()
    d = meta.apply_fixes(fx.parse_fix_text(text, "f.yaml", VID), inputs(o, m, mo, s, meta.MetadataParams()))
    assert d.specks_told == {(0, 99): 1}
    with pytest.raises(fx.FixError) as e:
        fx.parse_fix_text(text.replace("instance: 1", "instance: some"), "f.yaml", VID)
    assert (e.value.line, e.value.field) == (6, "instance") and "neither an instance id nor 'none'" in str(e.value)
