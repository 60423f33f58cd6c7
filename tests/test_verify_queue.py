"""The review queue walked with the keyboard only, and the benchmark's vocabulary seen in the build
report as one concept; in chromium on a copy of the session's sample store."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import REPO, copy_root
from playwright.sync_api import Page, expect
from ruamel.yaml import YAML
from test_verify import TOKEN, _current, serving

from vsi_wild.config import load_config
from vsi_wild.stages.qa.common import question_id
from vsi_wild.store import Store
from vsi_wild.verify.server import create_app

pytestmark = pytest.mark.slow
expect.set_options(timeout=30_000)

VID = "sample-walk_right"


@pytest.fixture(scope="module")
def root(sample_root, tmp_path_factory) -> Path:
    return copy_root(sample_root[0], tmp_path_factory.mktemp("verify-queue") / "data")


@pytest.fixture(scope="module")
def live(root):
    app = create_app(load_config(REPO / "configs" / "sample.yaml"), Store(root), token=TOKEN, reviewer="ana")
    with serving(app) as base:
        yield base


def test_the_queue_is_walked_to_the_end_with_the_keyboard_only(page: Page, live, root, screenshot_dir):
    page.goto(f"{live}/queue?video={VID}")
    page.wait_for_function("window.pageReady === true")
    items = page.evaluate("Z.items")
    kinds = [i["kind"] for i in items]
    # pairs first, then the specks that keep a count unasked, clips, questions
    assert kinds == sorted(kinds, key=["pair", "speck", "unit", "clip", "question"].index)
    # one pair per review item reconciliation left in the view (its merge_decisions' review rows)
    n_pairs = sum(d["review"] for d in _current(root, "reconcile", VID, "merge_decisions.parquet"))
    assert n_pairs > 0 and kinds.count("pair") == n_pairs and kinds.count("clip") == 8 and kinds.count("question") > 10
    expect(page.locator("#progress-all")).to_have_text(f"0 / {len(items)} done")
    # the questions whose answer rests on unreviewed reconciliation decisions (the qa stage's flag)
    # come first among the questions, and the list says so, with the reason
    asked = {question_id(q): q for q in _current(root, "qa", VID, "questions.parquet")}
    questions = [i for i in items if i["kind"] == "question"]
    assert {i["question_id"]: i["provisional"] for i in questions} == {k: q["provisional"] for k, q in asked.items()}
    flags = [i["provisional"] for i in questions]
    assert 0 < sum(flags) < len(flags) and flags == sorted(flags, reverse=True), flags
    # the likeliest wrong first: VOC's bound on P(wrong answer), which the list's band leads with
    bounds = [i["wrong_answer_bound"] or 0.0 for i in questions if i["provisional"]]
    assert bounds == sorted(bounds, reverse=True) and bounds[0] > 0, bounds
    notes = page.locator("#items li.question .provisional")
    expect(notes).to_have_count(sum(flags))
    first = asked[questions[0]["question_id"]]
    lead = f"P(wrong answer) ≤ {first['wrong_answer_bound']:.2f} · "
    expect(notes.first).to_have_text(f"provisional: {lead}{first['provisional_reason']}")
    page.screenshot(path=str(screenshot_dir / "verify_queue.png"), full_page=True)
    decided: dict[str, str] = {}
    for n in range(len(items)):
        page.wait_for_function("Z.detail && !Z.busy")
        d = page.evaluate("Z.detail")
        kind = d["kind"]
        if kind == "question":  # the item says why it is provisional, above the question
            q = asked[d["question"]["question_id"]]
            note = page.locator("#item p.provisional")
            if q["provisional"]:
                expect(note).to_have_text(f"provisional: {q['provisional_reason']}")
                if not (screenshot_dir / "verify_queue_provisional.png").exists():
                    page.screenshot(path=str(screenshot_dir / "verify_queue_provisional.png"))
            else:
                expect(note).to_have_count(0)
        if kind == "pair":  # the first pair merged, the others kept apart (a pair merged meanwhile is kept merged)
            key = "m" if n == 0 else "a"
        elif kind == "question":
            key = "1" if d["question"]["task_type"] == "VOO" and "reject" not in decided.values() else "y"
        elif kind == "speck":  # no object (telling its instance needs a click: its own test)
            key = "x"
        else:
            key = "y"
        decided[d["id"]] = {"m": "merge", "a": "apart", "1": "reject", "y": "accept", "x": "no object"}[key]
        page.keyboard.press(key)
        page.wait_for_function(f"Z.detail === null || Z.detail.id !== {d['id']!r}")
    expect(page.locator("#item .done-all")).to_have_text("Nothing left to review: every item is done.")
    expect(page.locator("#progress-all")).to_have_text(f"{len(items)} / {len(items)} done")
    expect(page.locator("#progress-reviewers")).to_have_text(f"by reviewer: ana {len(items)}")
    expect(page.locator(f'#segments tr[data-video="{VID}"] td').nth(1)).to_have_text(f"{len(items)}/{len(items)}")
    # what was saved: one decision per pair and question, each by the reviewer; the clips marked verified
    fixes = YAML(typ="safe").load((root / "fixes" / f"{VID}.yaml").read_text())["fixes"]
    pairs = [f for f in fixes if f["op"] == "review_pair"]
    assert (
        len(pairs) == n_pairs and pairs[0]["decision"] == "merge" and all(f["by"] == "ana" and f["at"] for f in fixes)
    )
    assert [f["instance"] for f in fixes if f["op"] == "speck"] == ["none"] * kinds.count("speck")
    verdicts = [f for f in fixes if f["op"] == "review_question"]
    assert len(verdicts) == kinds.count("question") and sum(f["verdict"] == "reject" for f in verdicts) == 1
    page.reload()  # the server counts as the page did
    page.wait_for_function("window.pageReady === true")
    expect(page.locator("#progress-all")).to_have_text(f"{len(items)} / {len(items)} done")
    page.screenshot(path=str(screenshot_dir / "verify_queue_done.png"), full_page=True)


def test_a_benchmark_rename_is_one_concept_in_the_report(page: Page, live, root, screenshot_dir):
    page.goto(f"{live}/vocabulary")
    page.wait_for_function("window.pageReady === true")
    expect(page.locator('#concepts tr[data-concept="trash can"]')).to_have_count(1)
    page.select_option("#rename-from", "trash can")
    page.fill("#rename-to", "garbage bin")
    page.click("#rename-add")
    expect(page.locator('#concepts tr[data-concept="trash can"] td').nth(1)).to_have_text("→ garbage bin")
    page.click("#save")
    expect(page.locator("#status")).to_contain_text("saved fixes/vocabulary.yaml")
    doc = YAML(typ="safe").load((root / "fixes" / "vocabulary.yaml").read_text())
    assert [{k: v for k, v in f.items() if k not in ("by", "at")} for f in doc["vocabulary"]] == [
        {"op": "rename_concept", "from": "trash can", "to": "garbage bin"}
    ]
    page.click("#rederive")
    # every video's 4 segment clips (cached), reconcile, metadata and qa, then export and report
    expect(page.locator("#job")).to_contain_text("re-derive done: 30 / 30 units", timeout=600_000)
    # the build report names one concept, in every video; a video page completes it from the vocabulary
    page.goto(f"{live}/report")
    concepts = page.locator("#visibility tbody tr td:first-child").all_inner_texts()  # the report's concepts
    assert "garbage bin" in concepts and "trash can" not in concepts, concepts
    rows = {r.split("\t")[0]: r for r in page.locator("#visibility tbody tr").all_inner_texts()}
    assert rows["garbage bin"].split("\t")[1] == "20"  # one concept: every view's 5
    page.screenshot(path=str(screenshot_dir / "verify_vocabulary_report.png"), full_page=True)
    page.goto(f"{live}/videos/{VID}")
    page.wait_for_function("window.pageReady === true")
    assert "garbage bin" in page.evaluate("[...document.querySelectorAll('#concepts option')].map(o => o.value)")
    expect(page.locator('#voc tr[data-concept="garbage bin"]')).to_have_count(1)
    # a video's own rename is still possible, on top of the vocabulary
    page.select_option("#rename-from", "garbage bin")
    page.fill("#rename-to", "litter bin")
    page.click("#rename-add")
    expect(page.locator('#voc tr[data-concept="litter bin"]')).to_have_count(1)
    page.evaluate("DRAFT.act({action: 'clear'})")


LEFT = "sample-walk_left"


def test_a_question_shows_its_instances_clip_members_and_one_is_split_out_with_a_key(
    page: Page, live, root, screenshot_dir
):
    # an instance reconciliation joined across clips, of a concept the view has a VOC total question about
    members = _current(root, "reconcile", LEFT, "members.parquet")
    of: dict[int, list[tuple[int, int]]] = {}
    for m in members:
        of.setdefault(m["instance_id"], []).append((m["clip_index"], m["local_id"]))
    concept_of = {m["instance_id"]: m["concept"] for m in members}
    totals = {
        q["concepts"][0]: q
        for q in _current(root, "qa", LEFT, "questions.parquet")
        if q["task_type"] == "VOC" and q["subtype"] == "total"
    }
    joined = next(i for i in sorted(of) if len({c for c, _ in of[i]}) >= 2 and concept_of[i] in totals)
    concept, question = concept_of[joined], totals[concept_of[joined]]
    before = [r for r in _current(root, "metadata", LEFT, "instances.parquet") if r["concept"] == concept]
    qid, count = question_id(question), int(question["answers"][0])
    item = f"question:{LEFT}:{qid}"
    page.goto(f"{live}/queue?video={LEFT}&item={item}")
    page.wait_for_function("window.pageReady === true && Z.detail && !Z.busy")
    # a person accepts its count first (the queue moves on), then comes back and finds two objects in one
    page.keyboard.press("y")
    page.wait_for_function(f"Z.detail === null || Z.detail.id !== {item!r}")
    assert page.evaluate(f"Z.items.find(i => i.id === {item!r}).done") is True
    page.goto(f"{live}/queue?video={LEFT}&item={item}")
    page.wait_for_function("window.pageReady === true && Z.detail && !Z.busy")
    # every instance it counts; the joined one with one picture per clip member (clip, local id, time)
    expect(page.locator("figure.inst")).to_have_count(len(before))
    expect(page.locator("#item p.stale")).to_have_count(0)  # no saved fix: the answer is the metadata's
    shown = page.locator(f'figure.inst[data-instance="{joined}"] figure.member')
    expect(shown).to_have_count(len(of[joined]))
    for n, (c, lo) in enumerate(sorted(of[joined])):
        expect(shown.nth(n).locator("figcaption")).to_contain_text(f"clip {c} · #{lo}")
        expect(shown.nth(n).locator("img.crop")).to_be_visible()
    # only instances joined from two or more clip members show them (the others are their one picture)
    n_joined = sum(len(of[r["instance_id"]]) for r in before if len(of.get(r["instance_id"], [])) >= 2)
    expect(page.locator("figure.member")).to_have_count(n_joined)
    for width in (1400, 1920):
        page.set_viewport_size({"width": width, "height": 1000})
        page.wait_for_function("(v => v.readyState >= 2 && !v.seeking)(document.querySelector('#item video'))")
        page.screenshot(path=str(screenshot_dir / f"verify_queue_members_{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    # the last member split out from the keyboard: selected with a click, then `a`
    clip, local = sorted(of[joined])[-1]
    page.click(f'figure.member[data-member="{clip}:{local}"]')
    expect(page.locator(f'figure.member[data-member="{clip}:{local}"]')).to_have_class(re.compile("selected"))
    page.keyboard.press("a")
    expect(page.locator("figure.inst")).to_have_count(len(before) + 1)  # recomputed from the saved fixes
    expect(page.locator(f'figure.inst[data-instance="{joined}"] figure.member')).to_have_count(
        0 if len(of[joined]) == 2 else len(of[joined]) - 1
    )
    page.wait_for_function("!Z.busy")
    # the question still shows the last derive's answer, and says the saved fix has made it out of date
    expect(page.locator("#item p.stale")).to_have_text(
        f"the saved fixes make {len(before) + 1} {concept} instances where this question was derived from "
        f"{len(before)}: re-derive the video to update its answer"
    )
    page.wait_for_function("[...document.querySelectorAll('#item img.crop')].every(i => i.complete)")
    page.screenshot(path=str(screenshot_dir / "verify_queue_split_stale.png"), full_page=True)
    fixes = YAML(typ="safe").load((root / "fixes" / f"{LEFT}.yaml").read_text())["fixes"]
    assert [{k: v for k, v in f.items() if k != "at"} for f in fixes] == [
        # the verdict records the answer the person judged
        {"op": "review_question", "question": qid, "verdict": "accept", "answers": [str(count)], "by": "ana"},
        {"op": "split", "clip": clip, "local_id": local, "by": "ana"},
    ]
    # re-derived: one instance more of the concept, holding the member's observations; the question asks again
    job = page.evaluate(f"api('/api/videos/{LEFT}/rederive', {{}})")
    deadline = time.time() + 300
    while (state := page.evaluate(f"api('/api/jobs/{job['id']}')")["state"]) == "running" and time.time() < deadline:
        time.sleep(1)
    assert state == "done"
    after = [r for r in _current(root, "metadata", LEFT, "instances.parquet") if r["concept"] == concept]
    assert len(after) == len(before) + 1
    new = ({r["instance_id"] for r in after} - {r["instance_id"] for r in before}).pop()
    cs = load_config(REPO / "configs" / "sample.yaml").segment.clip_seconds
    obs = _current(root, "metadata", LEFT, "observations.parquet")
    assert {o["time"] for o in obs if o["instance_id"] == new} == {
        o["time"]
        for o in _current(root, "reconcile", LEFT, "observations_auto.parquet")
        if o["instance_id"] == joined and clip * cs <= o["time"] < (clip + 1) * cs
    }
    asked = {question_id(q): q for q in _current(root, "qa", LEFT, "questions.parquet")}
    assert asked[qid]["answers"] == [str(count + 1)]
    # the accept was of another answer: the question is provisional again, and says why
    accepted_then = f"accepted by a person when its answer was {count}; it is {count + 1} now"
    assert asked[qid]["provisional"] and asked[qid]["provisional_reason"].startswith(accepted_then)
    reviews = _current(root, "qa", LEFT, "question_reviews.parquet")
    assert [(r["question_id"], r["answers"], r["holds"]) for r in reviews] == [(qid, [str(count)], False)]
    exported = root / "exports" / "reviewed.parquet"
    assert not exported.exists() or qid not in pq.read_table(exported)["question_id"].to_pylist()
    # once re-derived, the item shows the new answer and no longer says it is out of date; it is to do again
    page.goto(f"{live}/queue?video={LEFT}&item={item}")
    page.wait_for_function("window.pageReady === true && Z.detail && !Z.busy")
    expect(page.locator("#item")).to_contain_text(f": {count + 1}")
    expect(page.locator("#item p.stale")).to_have_count(0)
    expect(page.locator("#item p.provisional")).to_contain_text(accepted_then)
    assert page.evaluate(f"Z.items.find(i => i.id === {item!r}).done") is False
    # the questions page opens its card again, saying what was accepted
    page.goto(f"{live}/videos/{LEFT}/questions?q={qid}")
    page.wait_for_function("window.pageReady === true")
    card = page.locator(f'.card[data-question="{qid}"]')
    expect(card).to_have_class(re.compile(r"^card( focus)?$"))
    expect(card.locator("b.stale")).to_have_text(f" accepted by ana when its answer was {count}: review again")
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / "verify_questions_accept_of_another_answer.png"))


def test_a_speck_that_keeps_a_count_unasked_is_told_its_instance_and_the_count_is_asked(
    page: Page, sample_root, tmp_path, screenshot_dir
):
    """The right view's beach-ball total is not asked: a ball seen only as a speck (a mask under
    segment.min_area) tells no instance. The queue shows the speck ringed in the view around it and
    the balls; a reviewer clicks the ball it shows and presses `t`. Re-derived, the speck is that
    ball's sighting and the total is asked."""
    root = copy_root(sample_root[0], tmp_path / "data")
    waiting = [r for r in _current(root, "qa", VID, "skipped.parquet") if r["specks"]]
    assert waiting, "the sample's right view has a count kept unasked by a speck"
    concept = waiting[0]["item"]
    speck = waiting[0]["specks"][0]
    clip, local = speck["clip_index"], speck["local_id"]
    totals = {q["concepts"][0] for q in _current(root, "qa", VID, "questions.parquet") if q["subtype"] == "total"}
    assert concept not in totals
    balls = [r for r in _current(root, "metadata", VID, "instances.parquet") if r["concept"] == concept]
    shown = _instance_by_truth(root, concept, clip, local)
    assert shown in {r["instance_id"] for r in balls}
    app = create_app(load_config(REPO / "configs" / "sample.yaml"), Store(root), token=TOKEN, reviewer="ana")
    with serving(app) as live:
        item = f"speck:{VID}:{clip}:{local}"
        page.goto(f"{live}/queue?video={VID}&item={item}")
        page.wait_for_function("window.pageReady === true && Z.detail && !Z.busy")
        assert [i["kind"] for i in page.evaluate("Z.items")].count("speck") == len(
            {(s["clip_index"], s["local_id"]) for r in waiting for s in r["specks"]}
        )
        expect(page.locator("#item h2")).to_contain_text(
            f"{concept}: what does the speck at clip {clip} #{local} show?"
        )
        expect(page.locator("#item")).to_contain_text(f"a {concept} mask too small to track: clip {clip} #{local}")
        expect(page.locator("#item p.speck-count").first).to_have_text(waiting[0]["reason"])
        expect(page.locator("#item figure.inst")).to_have_count(len(balls))
        expect(page.locator("#item")).to_contain_text("1 count(s) wait on it, on it alone")
        # those whose positions fit it first, then the ball seen nearest it
        order = [(not i["fits"], i["gap_s"]) for i in page.evaluate("Z.detail.instances")]
        assert order == sorted(order) and all(gap > 0 for _, gap in order), order
        # the picture of the view around the speck, with the speck ringed in magenta
        page.wait_for_function("(i => i && i.complete && i.naturalWidth > 0)(document.querySelector('img.speck'))")
        ring = page.evaluate(
            """() => { const i = document.querySelector('img.speck'), c = document.createElement('canvas');
                c.width = i.naturalWidth; c.height = i.naturalHeight;
                const g = c.getContext('2d'); g.drawImage(i, 0, 0);
                const d = g.getImageData(0, 0, c.width, c.height).data; let n = 0;
                for (let k = 0; k < d.length; k += 4) if (d[k] > 200 && d[k + 1] < 90 && d[k + 2] > 200) n++;
                return [n, c.width, c.height]; }"""
        )
        assert ring[0] > 40 and ring[2] == 240, ring
        # the video at the speck's largest moment, the speck outlined there (dashed, magenta)
        best = page.evaluate("Z.detail.speck.best")
        page.wait_for_function(
            f"document.querySelector('#item canvas.overlay').dataset.sample == {round(best['time'] * 2)}"
        )
        x0, y0, x1, y1 = best["box"]
        outline = page.evaluate(
            f"""() => {{ const c = document.querySelector('#item canvas.overlay'), g = c.getContext('2d');
                const d = g.getImageData({int(x0) - 8}, {int(y0) - 8}, {int(x1 - x0) + 17}, {int(y1 - y0) + 17}).data;
                let n = 0; for (let k = 0; k < d.length; k += 4) if (d[k] > 200 && d[k + 1] < 60 && d[k + 2] > 200) n++;
                return n; }}"""
        )
        assert outline > 10, outline
        page.wait_for_function("[...document.querySelectorAll('#item img.crop')].every(i => i.complete)")
        page.screenshot(path=str(screenshot_dir / "verify_queue_speck.png"), full_page=True)
        page.keyboard.press("t")  # nothing chosen yet: it says what to do, and saves nothing
        expect(page.locator("#item-error")).to_contain_text("choose the instance it shows")
        page.click(f'#item figure.inst[data-instance="{shown}"]')
        page.keyboard.press("t")
        page.wait_for_function(f"Z.items.find(i => i.id === {item!r}).done")
        fixes = YAML(typ="safe").load((root / "fixes" / f"{VID}.yaml").read_text())["fixes"]
        assert [{k: v for k, v in f.items() if k != "at"} for f in fixes] == [
            {"op": "speck", "clip": clip, "local_id": local, "instance": shown, "by": "ana"}
        ]
        job = page.evaluate(f"api('/api/videos/{VID}/rederive', {{}})")
        deadline = time.time() + 300
        while (
            state := page.evaluate(f"api('/api/jobs/{job['id']}')")["state"]
        ) == "running" and time.time() < deadline:
            time.sleep(1)
        assert state == "done"
        told = [
            r
            for r in _current(root, "metadata", VID, "specks.parquet")
            if (r["clip_index"], r["local_id"]) == (clip, local)
        ]
        assert told and {(r["instance_id"], r["attributed_by"]) for r in told} == {(shown, "fix")}
        # the ball is seen at all from the speck on: the readings agree, and the total is asked
        asked = {q["concepts"][0]: q for q in _current(root, "qa", VID, "questions.parquet") if q["subtype"] == "total"}
        assert asked[concept]["answers"] == [str(len(balls))]
        page.goto(f"{live}/queue?video={VID}")
        page.wait_for_function("window.pageReady === true")
        assert item not in {i["id"] for i in page.evaluate("Z.items")}


def _box_iou(a: tuple, b: tuple) -> float:
    w, h = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0.0, w) * max(0.0, h)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _instance_by_truth(root: Path, concept: str, clip: int, local: int) -> int:
    """The instance a speck of the right view shows, by the sample's truth (not the pipeline's
    positions): the rendered object whose visible box overlaps the speck's, then the metadata's
    instance whose boxes match that object's (IoU > 0.5) at the most timestamps."""
    from vsi_wild.tasks.sample import load_truth

    truth = [
        r
        for r in load_truth(Store(root), "sample-walk")["visibility"].to_pylist()
        if r["view"] == "right" and r["category"] == concept
    ]
    box = lambda r: (r["x0"], r["y0"], r["x1"], r["y1"])  # noqa: E731
    specks = [
        s
        for s in _current(root, "metadata", VID, "specks.parquet")
        if (s["clip_index"], s["local_id"]) == (clip, local)
    ]
    (rendered,) = {
        t["instance_id"]
        for s in specks
        for t in truth
        if t["sample_index"] == s["sample_index"]
        and t["x0"] <= s["x1"]
        and s["x0"] <= t["x1"]
        and t["y0"] <= s["y1"]
        and s["y0"] <= t["y1"]
    }
    boxes = {t["sample_index"]: box(t) for t in truth if t["instance_id"] == rendered}
    votes: dict[int, int] = {}
    for o in _current(root, "metadata", VID, "observations.parquet"):
        if o["concept"] == concept and o["sample_index"] in boxes and _box_iou(box(o), boxes[o["sample_index"]]) > 0.5:
            votes[o["instance_id"]] = votes.get(o["instance_id"], 0) + 1
    return max(votes, key=lambda i: votes[i])
