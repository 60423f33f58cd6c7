"""The review gate: decision files, contact sheets, the motion heuristic, and the round trip
export -> decisions -> apply -> only kept sources reach projection."""

from __future__ import annotations

import csv
import io
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import typer
import ytdlp_offline as off
from typer.testing import CliRunner

from vsi_wild import schema
from vsi_wild.config import load_config
from vsi_wild.stages import review as rv
from vsi_wild.store import Store
from vsi_wild.tasks import review as tr
from vsi_wild.tasks.engine import Plan, Stage, run_inline, run_stages
from vsi_wild.tasks.probe import PROBE
from vsi_wild.tasks.sources import register_local

ANY_OUTPUT = (schema.Artifact("*"),)  # these test stages write whatever they test

# ------------------------------------------------------------------------------------ decision files

KNOWN = ["local-a-00000001", "local-b-00000002", "local-c-00000003"]
HEADER = "source_id,decision,reason,reviewer,suggestion,motion_score\n"


def test_a_valid_file_parses():
    text = (
        "\ufeff" + HEADER + "local-a-00000001,Keep,,ann,keep,0.1\n"
        'local-b-00000002,reject,"static camera, tripod",ann,,\n\nlocal-c-00000003,,,,,\n'
    )
    got = rv.parse_decisions(text, KNOWN, file="d.csv")
    assert [(d.source_id, d.decision, d.reason, d.reviewer, d.line) for d in got.decisions] == [
        ("local-a-00000001", "keep", None, "ann", 2),
        ("local-b-00000002", "reject", "static camera, tripod", "ann", 3),
    ]
    assert got.decisions[0].motion_score == pytest.approx(0.1) and got.decisions[0].suggestion == "keep"
    assert got.pending == ["local-c-00000003"]


@pytest.mark.parametrize(
    "body,line,what",
    [
        ("local-a-00000001,keep,,ann\nlocal-x-99999999,keep,,ann\n", 3, "unknown source id 'local-x-99999999'"),
        ("local-a-00000001,maybe,,ann\n", 2, "decision 'maybe'"),
        (
            "local-a-00000001,keep,,ann\nlocal-b-00000002,keep,,ann\nlocal-a-00000001,reject,x,ann\n",
            4,
            "already on line 2",
        ),
        ("local-a-00000001,reject,,ann\n", 2, "needs a reason"),
        ("local-a-00000001,keep,,\n", 2, "no reviewer"),
        ("local-a-00000001,keep,a,b,c,0.1,extra\n", 2, "7 fields but the header has 6"),
        ("local-a-00000001,keep,,ann,,fast\n", 2, "motion_score 'fast'"),
        (",keep,,ann\n", 2, "empty source_id"),
    ],
)
def test_a_bad_line_is_named(body, line, what):
    with pytest.raises(rv.ReviewError) as e:
        rv.parse_decisions(HEADER + body, KNOWN, file="d.csv")
    assert e.value.line == line and f"d.csv:{line}:" in str(e.value) and what in str(e.value)


def test_a_bad_header_is_named():
    with pytest.raises(rv.ReviewError, match=r"d\.csv:1: header lacks the columns \['reviewer'\]"):
        rv.parse_decisions("source_id,decision,reason\n", KNOWN, file="d.csv")
    with pytest.raises(rv.ReviewError, match="empty file"):
        rv.parse_decisions("", KNOWN, file="d.csv")
    got = rv.parse_decisions(
        "source_id,decision,reason,reviewer\nlocal-a-00000001,keep,,\n", KNOWN, file="d.csv", default_reviewer="bob"
    )
    assert got.decisions[0].reviewer == "bob"


# ------------------------------------------------------------------------------------ frames and motion


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("videos")
    return {
        "moving": off.make_video(d / "moving.mp4", 512, 256, seconds=6, fps=10, kind="scroll", scroll=0.01),
        "static": off.make_video(d / "static.mp4", 512, 256, seconds=6, fps=10, kind="static"),
        "pattern": off.make_video(d / "pattern.mp4", 512, 256, seconds=6, fps=10),
        "sample": off.make_video(d / "sample.mp4", 256, 128, seconds=3, fps=10),
    }


def ffmpeg_frame(path: Path, t: float, w: int, h: int) -> np.ndarray:
    """The frame at ``t`` decoded by the ffmpeg CLI (an independent decoder path)."""
    raw = subprocess.run(
        [
            "ffmpeg",
            "-v",
            "error",
            "-ss",
            f"{t}",
            "-i",
            str(path),
            "-frames:v",
            "1",
            "-vf",
            f"scale={w}:{h}:flags=area",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "bgr24",
            "-",
        ],
        check=True,
        capture_output=True,
    ).stdout
    return np.frombuffer(raw, np.uint8).reshape(h, w, 3).astype(np.float32)


def test_contact_sheet_tiles_are_the_frames_at_their_times(videos):
    params = rv.ReviewExportParams(frames=6, columns=3, tile_width=256)
    v = videos["pattern"]
    times = rv.sample_times(rv.video_duration(v), 6)
    assert times == pytest.approx([0.5, 1.5, 2.5, 3.5, 4.5, 5.5])
    samples = rv.sample_frames(v, times, 256)
    assert [s.time for s in samples] == pytest.approx(times)
    sheet = rv.contact_sheet(samples, params, title="pattern").astype(np.float32)
    header = sheet.shape[0] - 2 * 128
    assert sheet.shape[1] == 3 * 256 and header >= 0
    for i, t in enumerate(times):
        r, c = divmod(i, 3)
        tile = sheet[header + r * 128 : header + (r + 1) * 128, c * 256 : (c + 1) * 256]
        keep = slice(0, 100)  # above the time label
        same = np.abs(tile[keep] - ffmpeg_frame(v, t, 256, 128)[keep]).mean()
        other = np.abs(tile[keep] - ffmpeg_frame(v, times[(i + 3) % 6], 256, 128)[keep]).mean()
        assert same < 6 and other > 3 * same, (t, same, other)


def test_motion_heuristic_measures_a_known_pan(videos):
    params = rv.ReviewExportParams()
    moving = rv.camera_motion(videos["moving"], params)
    # the generator pans 1% of the width per frame at 10 fps: 0.1 widths per second
    assert moving.score == pytest.approx(0.1, rel=0.1) and moving.suggestion == "keep"
    static = rv.camera_motion(videos["static"], params)
    assert static.score < params.static_threshold / 10 and static.suggestion == "reject: static camera"


# ------------------------------------------------------------------------------------ the round trip


def _project_run(job):
    """A downstream consumer of review (projection's place): records that it saw the source."""
    d = job.read("review", "review.parquet").to_pylist()[0]
    job.out.write_table("seen.parquet", pa.table({"source_id": [job.unit], "decision": [d["decision"]]}))


PROJECT = Stage(
    name="project", version="t", unit_kind="source", run=_project_run, outputs=ANY_OUTPUT, needs=("review",)
)


def run_dag(config, store):
    plan = Plan.load(config, store, [PROBE, tr.REVIEW, PROJECT])
    run_stages(plan, [PROBE, tr.REVIEW, PROJECT], run_inline(plan))
    return {(stage, unit): o for stage, units in plan.outcomes.items() for unit, o in units.items()}


def _cli():
    from vsi_wild.cli_sources import review_app

    app = typer.Typer()
    app.add_typer(review_app, name="review")
    app.command("noop")(lambda: None)
    return app


def test_review_round_trip_only_kept_sources_reach_projection(tmp_path, videos):
    root = str(tmp_path / "root")
    store = Store(root)
    cfg = load_config(None)
    runner, app = CliRunner(), _cli()
    register_local(store, [str(videos["moving"]), str(videos["static"]), str(videos["pattern"])])
    ids = {Path(row["path"]).stem: row["source_id"] for row in store.registry().to_pylist()}
    [sid] = register_local(store, [str(videos["sample"])])  # the embedded sample comes in the same way
    sample = store.registry_row(sid)
    store.unregister_source(sid)
    store.register_source({**sample, "source_id": "sample-walk", "origin": "sample"})

    first = run_dag(cfg, store)
    assert first[("review", "sample-walk")].state == "computed"  # samples need no review
    for sid in ids.values():
        assert first[("review", sid)].state == "skipped" and "awaiting review" in first[("review", sid)].error
    assert {u for (s, u), o in first.items() if s == "project"} == {"sample-walk"}

    out = tmp_path / "export"
    r = runner.invoke(app, ["review", "export", "-d", root, "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((out / "decisions.csv").open()))
    assert sorted(x["source_id"] for x in rows) == sorted(ids.values())  # pending only: not the sample
    assert list(rows[0])[:4] == ["source_id", "decision", "reason", "reviewer"]
    by = {x["source_id"]: x for x in rows}
    assert by[ids["moving"]]["suggestion"] == "keep"
    assert by[ids["static"]]["suggestion"] == "reject: static camera"
    for x in rows:
        assert (out / x["contact_sheet"]).is_file() and x["decision"] == ""

    # a malformed file (an unknown id on line 3) is refused whole: nothing is recorded
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerow({**by[ids["moving"]], "decision": "keep", "reviewer": "ann"})
    w.writerow({**by[ids["static"]], "source_id": "local-nobody-12345678", "decision": "keep", "reviewer": "ann"})
    (tmp_path / "bad.csv").write_text(buf.getvalue())
    r = runner.invoke(app, ["review", "apply", "-d", root, str(tmp_path / "bad.csv")])
    assert r.exit_code == 2 and "bad.csv:3:" in r.output and "local-nobody-12345678" in r.output
    assert "nothing was recorded" in r.output
    assert not (Path(root) / "review").exists() or not list((Path(root) / "review").glob("*.parquet"))

    # the reviewer's file: keep the walk, reject the tripod, leave the pattern pending
    by[ids["moving"]].update(decision="keep", reviewer="ann")
    by[ids["static"]].update(decision="reject", reason="static camera", reviewer="ann")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(by.values())
    (out / "decisions.csv").write_text(buf.getvalue())
    r = runner.invoke(app, ["review", "apply", "-d", root, str(out / "decisions.csv")])
    assert r.exit_code == 0, r.output
    assert "kept 1, rejected 1, pending 1" in r.output
    rec = tr.read_decision(store, ids["static"])
    assert (rec["decision"], rec["reason"], rec["reviewer"]) == ("reject", "static camera", "ann")
    assert rec["decision_file"] == str((out / "decisions.csv").resolve()) and rec["line"] >= 2

    second = run_dag(cfg, store)
    assert second[("review", ids["moving"])].state == "computed"
    assert second[("review", ids["static"])].state == "skipped"
    assert "rejected in review: static camera (ann)" in second[("review", ids["static"])].error
    assert "awaiting review" in second[("review", ids["pattern"])].error
    assert second[("review", "sample-walk")].state == "cached"
    reached = {u for (s, u), o in second.items() if s == "project"}
    assert reached == {"sample-walk", ids["moving"]}
    assert second[("project", "sample-walk")].state == "cached"

    # applying the same file again changes nothing; changing one decision re-runs only that source
    assert runner.invoke(app, ["review", "apply", "-d", root, str(out / "decisions.csv")]).exit_code == 0
    assert {
        o.state for (s, u), o in run_dag(cfg, store).items() if s == "review" and u in (ids["moving"], "sample-walk")
    } == {"cached"}
    flip = tmp_path / "flip.csv"
    flip.write_text(f"source_id,decision,reason,reviewer\n{ids['moving']},reject,in-car,bob\n")
    r = runner.invoke(app, ["review", "apply", "-d", root, str(flip)])
    assert r.exit_code == 0 and f"changed 1: {ids['moving']}" in r.output
    third = run_dag(cfg, store)
    assert {u for (s, u), o in third.items() if s == "project"} == {"sample-walk"}
    assert third[("review", ids["moving"])].state == "skipped"


def test_require_decision_off_keeps_without_review(tmp_path, videos):
    store = Store(tmp_path / "root")
    [sid] = register_local(store, [str(videos["pattern"])])
    res = run_dag(load_config(None, {"review.require_decision": False}), store)
    assert res[("review", sid)].state == "computed"
    assert ("project", sid) in res
