"""The review queue walked with the keyboard only, and the benchmark's vocabulary seen in the build
report as one concept; in chromium on a copy of the session's sample store."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, copy_root
from playwright.sync_api import Page, expect
from ruamel.yaml import YAML
from test_verify import TOKEN, _current, serve

from vsi_wild.config import load_config
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
    base, srv, t = serve(
        create_app(load_config(REPO / "configs" / "sample.yaml"), Store(root), token=TOKEN, reviewer="ana")
    )
    yield base
    srv.should_exit = True
    t.join(5)


def test_the_queue_is_walked_to_the_end_with_the_keyboard_only(page: Page, live, root, screenshot_dir):
    page.goto(f"{live}/queue?video={VID}")
    page.wait_for_function("window.pageReady === true")
    items = page.evaluate("Z.items")
    kinds = [i["kind"] for i in items]
    assert kinds == sorted(kinds, key=["pair", "unit", "clip", "question"].index)  # pairs first, then clips, questions
    # one pair per review item reconciliation left in the view (its merge_decisions' review rows)
    n_pairs = sum(d["review"] for d in _current(root, "reconcile", VID, "merge_decisions.parquet"))
    assert n_pairs > 0 and kinds.count("pair") == n_pairs and kinds.count("clip") == 8 and kinds.count("question") > 10
    expect(page.locator("#progress-all")).to_have_text(f"0 / {len(items)} done")
    page.screenshot(path=str(screenshot_dir / "verify_queue.png"), full_page=True)
    decided: dict[str, str] = {}
    for n in range(len(items)):
        page.wait_for_function("Z.detail && !Z.busy")
        d = page.evaluate("Z.detail")
        kind = d["kind"]
        if kind == "pair":  # the first pair merged, the others kept apart (a pair merged meanwhile is kept merged)
            key = "m" if n == 0 else "a"
        elif kind == "question":
            key = "1" if d["question"]["task_type"] == "VOO" and "reject" not in decided.values() else "y"
        else:
            key = "y"
        decided[d["id"]] = {"m": "merge", "a": "apart", "1": "reject", "y": "accept"}[key]
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
