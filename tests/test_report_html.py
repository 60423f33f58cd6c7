"""The build report people look at (report.html): its numbers against counts made here from
exports/qa.parquet and the registry, the page in a real browser (from file://), the build diff
after a fix that merges two instances, and bad input (failures, no questions, one task, no
previous build) still giving a complete page.

The small sample runs once through the engine (inline, no Prefect); tests that change it work on
a copy.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import small_sample_config
from typer.testing import CliRunner

from vsi_wild.config import load_config
from vsi_wild.stages import evaluate as ev
from vsi_wild.stages.qa.registry import tasks
from vsi_wild.stages.report import build_report, render_markdown
from vsi_wild.stages.report_diff import build_info, compare, snapshot
from vsi_wild.stages.report_html import render_html
from vsi_wild.stages.report_plots import all_plots
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import engine, registry
from vsi_wild.tasks.report import HISTORY, REPORT_JSON, published_report

pytestmark = pytest.mark.slow


def run(config_path: Path, root: Path, from_stage: str | None = None) -> engine.Plan:
    config, store = load_config(config_path), Store(root)
    plan = engine.Plan.load(config, store, registry.STAGES)
    engine.run_stages(plan, registry.select(None, from_stage), engine.run_inline(plan))
    failed = {(s, u): o.error for s, us in plan.outcomes.items() for u, o in us.items() if o.state == "failed"}
    assert not failed, failed
    return plan


def report_json(root: Path) -> dict:
    store = Store(root)
    return json.loads(
        store.local_file(UnitRef("report", "all", store.read_status("report", "all")["key"]), REPORT_JSON).read_text()
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("report")
    cfg = small_sample_config(base / "c.yaml", base / "out")
    run(cfg, base / "out")
    return cfg, base / "out"


@pytest.fixture
def copy_of(built, tmp_path) -> tuple[Path, Path]:
    root = tmp_path / "out"
    shutil.copytree(built[1], root, symlinks=True)
    return small_sample_config(tmp_path / "c.yaml", root), root


def test_numbers_equal_counts_from_the_export_and_the_registry(built):
    _, root = built
    rows = [r for r in pq.read_table(root / "exports" / "qa.parquet").to_pylist() if r["split"] == "release"]
    sources = {r["source_id"]: r for r in Store(root).registry().to_pylist()}
    rep = report_json(root)
    assert rows, "the sample has release questions"
    for t in tasks():
        mine = [r for r in rows if r["task_type"] == t.name]
        if not mine:
            assert t.name not in rep["questions"]
            continue
        e = rep["questions"][t.name]
        assert e["n"] == len(mine) and e["videos"] == len({r["video_id"] for r in mine})
        assert e["subtypes"] == dict(Counter(r["subtype"] for r in mine))
        assert e["duration_bins"] == dict(Counter(ev.duration_bin(r["duration_s"] / 60) for r in mine))
        if t.kind == "mc":
            letters = Counter(r["answer"] for r in mine)
            assert rep["statistics"]["tasks"][t.name]["letter_balance"]["counts"] == {x: letters[x] for x in "ABCD"}
        else:
            hist = Counter(int(r["answer"]) for r in mine)
            assert rep["statistics"]["tasks"][t.name]["answer_histogram"] == {
                str(k): v for k, v in sorted(hist.items())
            }
    videos = {r["video_id"]: r["duration_s"] for r in rows}
    st = rep["statistics"]
    assert st["videos"] == len(videos) and st["hours"] == pytest.approx(sum(videos.values()) / 3600)
    cats = Counter(sources[v.rsplit("_", 1)[0]]["category"] or "uncategorised" for v in videos)
    assert {c: e["videos"] for c, e in st["categories"].items()} == dict(cats)
    assert sum(e["count_share"] for e in st["categories"].values()) == pytest.approx(1.0)
    page = (root / "report.html").read_text()
    for name, e in rep["questions"].items():
        assert f"<tr><td>{name}</td><td class=n>{e['n']}</td><td class=n>{e['videos']}</td>" in page
    assert f"<b>{len(videos)}</b>view videos" in page and f"<b>{len(rows)}</b>release questions" in page
    assert "No previous build of this data root to compare with." in page  # the first build
    # the answer distributions: each (task, subtype)'s answer texts, counted here from the export
    texts: dict[tuple[str, str], Counter] = {}
    for r in rows:
        texts.setdefault((r["task_type"], r["subtype"]), Counter())[r["answer_text"]] += 1
    for (t, st), hist in texts.items():
        n = sum(hist.values())
        assert (
            f"<tr><td>{t}</td><td>{st}</td><td class=n>{n}</td><td class=n>{len(hist)}</td>"
            f"<td class=n>{max(hist.values()) / n:.1%}</td>"
        ) in page, (t, st)
    # the markdown report keeps its tables and says the same
    md = (root / "report.md").read_text()
    assert md.startswith("# VSI-Super-Wild build report") and "## Lost on the way" in md and "## Scene categories" in md


def test_the_page_in_a_browser(built, page, screenshot_dir):
    _, root = built
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto((root / "report.html").as_uri())
    page.wait_for_load_state("load")
    widths = page.evaluate("[...document.images].map(i => i.complete ? i.naturalWidth : 0)")
    assert widths and all(w > 0 for w in widths), widths
    assert not errors, errors
    assert all(u.startswith(("file:", "data:")) for u in requests), requests  # nothing from the network
    n_plots = len(all_plots(report_json(root)))
    assert page.locator(".plots figure img").count() == n_plots
    assert page.locator(".card").count() >= 1
    # each card's video links to its page in the verification app (its default address from a file)
    first = page.locator(".card a.verify").first
    vid = first.inner_text()
    assert f'<a class="verify" href="/videos/{vid}">' in (root / "report.html").read_text()  # as the app serves it
    assert first.get_attribute("href") == f"http://127.0.0.1:8765/videos/{vid}"
    page.screenshot(path=str(screenshot_dir / "report.png"), full_page=True)


def _merge_fix(root: Path) -> tuple[str, str]:
    """A fix file merging two instances of one concept in the first view that has two."""
    store = Store(root)
    for video in sorted(r["unit"] for r in store.status_table().to_pylist() if r["stage"] == "metadata"):
        ref = UnitRef("metadata", video, store.read_status("metadata", video)["key"])
        by_concept: dict[str, list[int]] = {}
        for i in store.read_table(ref, "instances.parquet").to_pylist():
            by_concept.setdefault(i["concept"], []).append(i["instance_id"])
        two = sorted(c for c, ids in by_concept.items() if len(ids) >= 2)
        if two:
            a, b = sorted(by_concept[two[0]])[:2]
            (root / "fixes").mkdir(exist_ok=True)
            (root / "fixes" / f"{video}.yaml").write_text(
                f"video_id: {video}\nfixes:\n  - op: merge\n    instances: [{a}, {b}]\n    note: one object\n"
            )
            return video, two[0]
    pytest.fail("no view of the sample has two instances of one concept")


def _voc_answers(root: Path) -> dict[tuple[str, str], str]:
    return {
        (r["video_id"], r["question"]): r["answer_text"]
        for r in pq.read_table(root / "exports" / "qa.parquet").to_pylist()
        if r["split"] == "release" and r["task_type"] == "VOC"
    }


def test_the_build_diff_lists_exactly_the_voc_questions_a_merge_changed(copy_of, built):
    cfg, root = copy_of
    before = _voc_answers(root)
    video, concept = _merge_fix(root)
    plan = run(cfg, root, from_stage="metadata")
    assert plan.outcomes["metadata"][video].state == "computed"
    after = _voc_answers(root)
    expected = sorted(
        (v, q, before[(v, q)], after[(v, q)])
        for (v, q) in before
        if (v, q) in after and before[(v, q)] != after[(v, q)]
    )
    assert expected and all(v == video and concept in q for v, q, _, _ in expected)
    changes = report_json(root)["changes"]
    listed = sorted(
        (c["video_id"], c["question"], c["before"]["answer"], c["after"]["answer"])
        for c in changes["changed_questions"]
    )
    assert listed == expected
    assert [c["task_type"] for c in changes["changed_questions"]] == ["VOC"] * len(expected)
    assert changes["per_video"][video]["changed"] == len(expected)
    assert any(c.startswith("fix added: merge") for c in changes["per_video"][video]["causes"])
    page = (root / "report.html").read_text()
    table = page[page.index('id="changed-questions"') :]
    table = table[: table.index("</table>")]
    assert len(re.findall("<tr><td>VOC</td>", table)) == len(expected)
    for _, _q, b, a in expected:
        assert f"<td class=before>{b}</td><td class=after>{a}</td>" in table
    assert len((root / HISTORY).read_text().split()) == 2

    # a run with nothing new keeps the report cached and its comparison
    plan = run(cfg, root, from_stage="report")
    assert plan.outcomes["report"]["all"].state == "cached"

    # the CLI: the same report regenerated without other stages, and --compare with the original root
    from vsi_wild.cli import app

    out = CliRunner().invoke(app, ["report", "-c", str(cfg), "--compare", str(built[1])], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    compared = (root / "report_compare.html").read_text()
    for _, _q, b, a in expected:
        assert f"<td class=before>{b}</td><td class=after>{a}</td>" in compared
    (root / "report.html").unlink()
    out = CliRunner().invoke(app, ["report", "-c", str(cfg)], catch_exceptions=False)
    assert out.exit_code == 0 and "report cached" in out.output and (root / "report.html").is_file()
    assert published_report(Store(root)).per_task


# ------------------------------------------------------------------ bad input (no sample needed)
def _row(task, answer, video="s1_front", subtype="x", **kw):
    mc = task != "VOC"
    return {
        "doc_id": f"{video}.mp4|{task}|{answer}|{kw.get('q', '')}",
        "video_name": f"{video}.mp4",
        "video_id": video,
        "source_id": video.rsplit("_", 1)[0],
        "task_type": task,
        "question": f"q {kw.get('q', '')}",
        "answer": answer,
        "options": [f"{x}) o{x}" for x in "ABCD"] if mc else None,
        "split": "release",
        "subtype": subtype,
        "answer_text": f"o{answer}" if mc else answer,
        "frame_times": None,
        "frame_indices": None,
        "duration_s": 700.0,
        "fps": 8.0,
        "query_times": [5.0],
        "concepts": ["cone"] if not mc else None,
        "angle_deg": None,
        "render_offset_deg": None,
        "metadata_fingerprint": "m",
        "pipeline_version": "p",
        "answer_index": "ABCD".index(answer) if mc else None,
        "image_paths": None,
    }


def _page(rows, status=(), sources=(), previous=None):
    rep = build_report(rows, list(status), list(sources))
    rep["fixes"], rep["verification"] = {}, None
    now = snapshot(rows)
    rep["changes"] = compare(previous, {}, now, build_info("k", {}, {}), "before") if previous is not None else None
    plots = all_plots(rep)
    return rep, plots, render_html(rep, plots, []), render_markdown(rep)


def test_a_stage_version_bump_that_changes_no_output_is_named_in_the_report(copy_of, monkeypatch):
    """The report names every stage's version: a bump whose stage writes what it wrote before leaves
    every other stage's inputs alike, and the report is still made again to say so."""
    cfg, root = copy_of
    i = next(i for i, s in enumerate(registry.STAGES) if s.name == "probe")
    bumped = dataclasses.replace(registry.STAGES[i], version=registry.STAGES[i].version + "-bumped")
    monkeypatch.setattr(registry, "STAGES", [*registry.STAGES[:i], bumped, *registry.STAGES[i + 1 :]])
    before = Store(root).read_status("report", "all")["key"]
    plan = run(cfg, root)
    assert {o.state for o in plan.outcomes["export"].values()} == {"cached"}  # the probe wrote the same
    assert plan.outcomes["report"]["all"].state == "computed" and plan.outcomes["report"]["all"].key != before
    assert report_json(root)["build"]["stage_versions"]["probe"] == bumped.version


def test_a_root_with_failures_and_no_questions_gets_a_complete_report():
    status = [{"stage": "project", "unit": "s1", "state": "failed", "error_class": "bad_input", "error": "not 2:1"}]
    rep, plots, page, md = _page([], status, [{"source_id": "s1", "origin": "local", "duration_s": None}])
    assert "This build has no questions." in page and "not 2:1" in page and "1 unit(s) failed" in page
    assert "No previous build of this data root to compare with." in page
    assert "No view video has questions." in md and "failed project:s1: not 2:1" in md
    nodata = all_plots(rep)
    assert [p.png for p in plots] == [p.png for p in nodata]  # deterministic bytes
    assert all(p.png.startswith(b"\x89PNG") for p in plots)
    for s in ("</html>", 'id="verification"', 'id="fixes"', 'id="changes"'):
        assert s in page


def test_a_single_task_and_its_changes():
    old = [_row("VMR", "A", q="1"), _row("VMR", "B", q="2")]
    new = [_row("VMR", "C", q="1"), _row("VMR", "B", q="3")]
    new[0]["answer_text"] = "oC"  # its answer changed; q 2 removed, q 3 added
    rep, _, page, md = _page(
        new,
        sources=[{"source_id": "s1", "origin": "local", "duration_s": 700.0, "category": "retail"}],
        previous=snapshot(old),
    )
    assert "No questions for VPO, VOO, VOC." in page
    c = rep["changes"]
    assert (c["added"], c["removed"], c["changed"]) == (1, 1, 1)
    assert [(x["before"]["answer"], x["after"]["answer"]) for x in c["changed_questions"]] == [("oA", "oC")]
    assert rep["statistics"]["categories"] == {
        "retail": {"videos": 1, "hours": 700 / 3600, "count_share": 1.0, "duration_share": 1.0}
    }
    assert rep["statistics"]["duration_bins"] == {"retail": {"10-30": 1}}
    assert "| retail | 1 | 100.00% |" in md


def test_verification_records_are_shown():
    rep = build_report([_row("VOC", "3")], [], [])
    rep["verification"] = {
        "s1_front.json": {
            "temporal_verified": True,
            "clips_verified": [0, 2],
            "questions": {"a": "accept", "b": "reject", "c": "accept"},
            "updated_at": "2026-12-01T10:00:00+00:00",
        },
        "notes.json": {"by": "someone", "videos": [1, 2]},
    }
    page = render_html(rep, [], [])
    assert (
        "<tr><td>s1_front</td><td>yes</td><td class=n>2</td><td class=n>2</td><td class=n>1</td>"
        "<td>2026-12-01T10:00:00+00:00</td></tr>"
    ) in page
    assert "<h3>notes.json</h3>" in page and "<td>2 items</td>" in page
