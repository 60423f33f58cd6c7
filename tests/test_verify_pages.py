"""The verification app's pages as a new reviewer meets them (issue 28's defects), in chromium on a
copy of the session's sample store: each test reads what the page shows (text, the canvas' pixels,
where elements are) and fails on the pages as they were. The right view has the sample's review
pairs. Tests leave the reviewer's draft empty for the next one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, copy_root
from playwright.sync_api import Page, expect
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
    return copy_root(sample_root[0], tmp_path_factory.mktemp("verify-pages") / "data")


@pytest.fixture(scope="module")
def live(root):
    app = create_app(load_config(REPO / "configs" / "sample.yaml"), Store(root), token=TOKEN, reviewer="ana")
    with serving(app) as base:
        yield base


def open_page(page: Page, live: str, path: str = "") -> None:
    page.goto(f"{live}/videos/{VID}{path}")
    page.wait_for_function("window.pageReady === true")


def seek(page: Page, t: float) -> None:
    page.evaluate(f"document.getElementById('video').currentTime = {t}")
    page.wait_for_function(f"document.getElementById('overlay').dataset.sample === '{round(t * 2)}'")


def no_draft(page: Page) -> None:
    page.evaluate("DRAFT.act({action: 'clear'})")
    expect(page.locator("#pending li.pending")).to_have_count(0)


# ------------------------------------------------------------------------------ lists after each op
def test_after_a_merge_the_pairs_name_the_instances_as_they_are_now(page: Page, live, root, screenshot_dir):
    """Merging pair #1 · #31 left the row #2 · #31 with a live merge button, though #31 was gone."""
    from vsi_wild.verify.review import Review

    review = Review(load_config(REPO / "configs" / "sample.yaml"), Store(root))
    vid, first = next(
        (v, p)
        for v in sorted(review.catalog.views())
        for p in review.payload(v).get("review_pairs", [])
        if not p["merged"]
    )  # a pair the metadata keeps apart
    page.goto(f"{live}/videos/{vid}")
    page.wait_for_function("window.pageReady === true")

    def key(p):
        return f"{p['clip_a']}:{p['local_a']}:{p['clip_b']}:{p['local_b']}"

    keep, gone = sorted((first["instance_a"], first["instance_b"]))
    others = [
        p
        for p in page.evaluate("S.view.review_pairs")
        if key(p) != key(first) and gone in (p["instance_a"], p["instance_b"])
    ]
    page.locator(f'tr[data-pair="{key(first)}"] button.merge-pair').click()
    expect(page.locator(f'tr[data-pair="{key(first)}"] td.state')).to_contain_text(
        "one instance · decided: merge by ana"
    )
    for p in others:  # a row that named the merged-away instance names the one it became, and offers no merge of it
        row = page.locator(f'tr[data-pair="{key(p)}"]')
        expect(row.locator("td.ids")).to_contain_text(f"#{keep} (was #{gone})")
        expect(row.locator("button.merge-pair", has_text=f"#{gone}")).to_have_count(0)
    # the split list follows too: the merged instance's members include the other side's
    page.check(f'#instances input.sel[data-id="{keep}"]')
    expect(page.locator("#split-member option")).to_have_count(
        sum(m["instance_id"] == keep for m in page.evaluate("S.view.members"))
    )
    assert page.evaluate(f"S.view.members.filter(m => m.instance_id === {gone}).length") == 0
    page.screenshot(path=str(screenshot_dir / "verify_pairs_after_merge.png"), full_page=True)
    no_draft(page)


def test_a_rename_keeps_its_concept_chosen_and_the_overlay_shows_the_new_name(page: Page, live, root):
    open_page(page, live)
    obs = [o for o in _current(root, "metadata", VID, "observations.parquet") if o["concept"] == "trash can"]
    t = obs[len(obs) // 2]["time"]
    seek(page, t)
    assert any(lbl["text"].startswith("trash can #") for lbl in page.evaluate("S.player.labels"))
    page.select_option("#rename-from", "trash can")
    page.fill("#rename-to", "garbage bin")
    page.click("#rename-add")
    expect(page.locator("#rename-from")).to_have_value("garbage bin")
    expect(page.locator("#rename-to")).to_have_value("")
    page.wait_for_function("S.player.labels.some(l => l.text.startsWith('garbage bin #'))")
    assert not any(lbl["text"].startswith("trash can #") for lbl in page.evaluate("S.player.labels"))
    page.click("#rename-add")  # a second click has nothing to rename to: refused, nothing else renamed
    expect(page.locator("#rename-error")).not_to_have_text("")
    expect(page.locator("#pending li.pending")).to_have_count(1)
    no_draft(page)


# ------------------------------------------------------------------------------ the player
def test_the_player_is_wide_its_controls_below_the_frame_and_labels_do_not_overlap(
    page: Page, live, root, screenshot_dir
):
    open_page(page, live)
    video = page.locator("#video")
    assert video.get_attribute("controls") is None  # the browser's controls covered the bottom of the frame
    vb, bar = video.bounding_box(), page.locator(".controls").bounding_box()
    assert vb["width"] > 800 and bar["y"] >= vb["y"] + vb["height"] - 1  # at 1400 px: wider than 640, bar below
    # the busiest timestamp of the view: every label placed apart from the others
    counts: dict[int, int] = {}
    for o in _current(root, "metadata", VID, "observations.parquet"):
        counts[o["sample_index"]] = counts.get(o["sample_index"], 0) + 1
    k = max(counts, key=counts.get)
    seek(page, k / 2)
    labels = page.evaluate("S.player.labels")
    assert len(labels) >= 4
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            assert not (
                a["x"] < b["x"] + b["w"]
                and b["x"] < a["x"] + a["w"]
                and a["y"] < b["y"] + b["h"]
                and b["y"] < a["y"] + a["h"]
            ), (a, b)
    # the scrubber seeks
    page.locator(".controls .scrub").evaluate("(s) => { s.value = 30; s.dispatchEvent(new Event('input')); }")
    page.wait_for_function("Math.abs(document.getElementById('video').currentTime - 30) < 0.01")
    page.screenshot(path=str(screenshot_dir / "verify_player_busy.png"))


def test_the_timeline_shows_every_concept_without_an_inner_scroll(page: Page, live):
    open_page(page, live)
    wrap = page.locator(".timeline-wrap")
    assert wrap.evaluate("w => w.scrollHeight <= w.clientHeight + 1")
    concepts = page.evaluate("[...byConcept().keys()]")
    assert len(concepts) == 6
    canvas = page.locator("#timeline").bounding_box()
    assert wrap.bounding_box()["height"] >= canvas["height"]


def test_clicking_a_mask_selects_its_instance(page: Page, live, root):
    open_page(page, live)
    obs = max(_current(root, "metadata", VID, "observations.parquet"), key=lambda o: o["area"] or 0)
    seek(page, obs["time"])
    r = page.locator("#overlay").bounding_box()
    w, h = page.evaluate("[document.getElementById('overlay').width, document.getElementById('overlay').height]")
    page.locator("#overlay").scroll_into_view_if_needed()
    r = page.locator("#overlay").bounding_box()
    # the middle of its box, a pixel of its mask for these solid objects
    page.mouse.click(
        r["x"] + (obs["x0"] + obs["x1"]) / 2 * r["width"] / w, r["y"] + (obs["y0"] + obs["y1"]) / 2 * r["height"] / h
    )
    expect(page.locator(f'#instances label[data-id="{obs["instance_id"]}"]')).to_have_class("selected")


# ------------------------------------------------------------------------------ spatial
def test_spatial_pivot_is_snapped_visibly_and_the_grey_arrow_is_the_estimate_at_the_pivot(page: Page, live):
    open_page(page, live, "/spatial")
    clip = page.evaluate("M.motion.find(c => c.state === 'ok').clip_index")
    page.click(f'#clips tr[data-clip="{clip}"]')
    pivot = page.evaluate("M.pivot")
    page.keyboard.press(".")  # one frame on: between two 2 FPS timestamps
    page.keyboard.press("p")
    shown = page.locator("#sel-pivot").inner_text()
    assert page.evaluate("M.pivot") == pivot  # the nearest 2 FPS timestamp, not the frame's time
    expect(page.locator("#pivot-note")).to_contain_text("2 FPS")
    assert abs(page.evaluate("document.getElementById('video').currentTime") - pivot) < 1e-3
    # the grey arrow: the estimate at the pivot, wherever the playhead is
    samples = page.evaluate("M.info.motion_samples")
    at_pivot = samples["angle_deg"][round(pivot * 2)]
    far = next(
        t
        for t, a in zip(samples["time"], samples["angle_deg"], strict=True)
        if a is not None and abs((a - at_pivot + 180) % 360 - 180) > 60
    )
    page.evaluate(f"document.getElementById('video').currentTime = {far}")
    page.wait_for_function(f"Math.abs(document.getElementById('video').currentTime - {far}) < 0.01")
    page.evaluate(f"M.angle = {at_pivot} + 180; render()")  # the blue arrow out of the way
    w = page.evaluate("document.getElementById('compass').width")
    rad = np.radians(at_pivot - 90)
    x, y = w / 2 + (w / 2 - 24) * 0.9 * np.cos(rad), w / 2 + (w / 2 - 24) * 0.9 * np.sin(rad)
    px = page.evaluate(
        f"Array.from(document.getElementById('compass').getContext('2d').getImageData({int(x)}, {int(y)}, 1, 1).data)"
    )
    assert abs(px[0] - 0x9A) < 12 and abs(px[2] - 0xAE) < 12, px  # grey at the pivot's direction
    page.click("#apply")
    # the server's draft holds the fix: the pivot is the clip's own, so the table's text below may
    # read the same before the answer comes, and a draft cleared before it would come back with it
    expect(page.locator("#pending li.pending")).to_have_count(1)
    expect(page.locator(f'#clips tr[data-clip="{clip}"] td').nth(3)).to_have_text(
        shown
    )  # the table says what was shown
    page.locator(".controls .scrub").evaluate("(s) => { s.value = 12; s.dispatchEvent(new Event('input')); }")
    page.wait_for_function("Math.abs(document.getElementById('video').currentTime - 12) < 0.01")  # a scrubber
    no_draft(page)


# ------------------------------------------------------------------------------ questions
def test_vpo_views_are_labelled_and_the_evidence_player_stays_in_view(page: Page, live, screenshot_dir):
    open_page(page, live, "/questions")
    vpo = page.locator(".card", has_text="VPO · rotated").first
    captions = vpo.locator("figcaption").all_inner_texts()
    assert [c.split(" as shown")[0] for c in captions if "as shown" in c] == [
        "Frame 1",
        "Frame 2",
        "Frame 3",
        "Frame 4",
    ]
    assert any(re.search(r"turned [+-]\d+°", c) for c in captions)
    last = page.locator(".card").last
    last.scroll_into_view_if_needed()
    last.locator("button.play").first.click()
    vb = page.locator("#video").bounding_box()
    assert vb["y"] >= -1 and vb["y"] + vb["height"] <= page.viewport_size["height"], vb  # the player stayed in view
    page.screenshot(path=str(screenshot_dir / "verify_questions_scrolled.png"))


def test_the_questions_page_holds_still_while_its_video_and_pictures_arrive(page: Page, live):
    """Once the page is ready nothing on it moves by itself: the video's size and the cards' pictures
    (loaded lazily, as the cards scroll into view) arrive after it, and a click aimed at a button
    must land on that button. Chromium's own layout-shift records (not those right after an input)
    from the second frame after the page is ready (the first paints what it rendered before) to the
    end of a scroll through every card."""
    page.add_init_script(
        """window.shifts = [];
        new PerformanceObserver(list => {
          for (const e of list.getEntries())
            if (!e.hadRecentInput) window.shifts.push({at: e.startTime, value: e.value});
        }).observe({type: "layout-shift", buffered: true});"""
    )
    open_page(page, live, "/questions")
    settled = page.evaluate(
        "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
    )
    assert page.locator(".card img").count() > 10  # pictures to arrive
    for _ in range(40):  # to the last card, a screen at a time, giving each screen's pictures time
        page.mouse.wheel(0, 600)
        page.wait_for_timeout(100)
    page.wait_for_function(
        "document.getElementById('video').readyState >= 1 && [...document.images].every(i => i.complete)"
    )
    page.wait_for_timeout(500)  # the last records are delivered
    assert page.evaluate("window.scrollY") > 0
    assert page.evaluate(f"window.shifts.filter(s => s.at > {settled})") == []


def test_a_custom_rejection_reason_is_shown_and_reviewed_counts_only_asked_questions(
    page: Page, live, root, screenshot_dir
):
    open_page(page, live, "/questions")
    card = page.locator(".card", has_text="VOC · total · release · bench ·")
    qid = card.get_attribute("data-question")
    card.locator("select.reason").select_option("other…")
    card.locator("input.reason-text").fill("the benches are hidden by glare")
    card.locator("button.reject").click()
    card = page.locator(f'.card[data-question="{qid}"]')
    expect(card).to_have_class(re.compile("rejected"))
    expect(card.locator("select.reason")).to_have_value("other…")  # it said "ambiguous"
    expect(card.locator("input.reason-text")).to_have_value("the benches are hidden by glare")
    # a provisional question says why on its card; once a person accepts it, it is no longer provisional
    before = {question_id(q): q for q in _current(root, "qa", VID, "questions.parquet")}
    notes = page.locator(".card .provisional")
    expect(notes).to_have_count(sum(q["provisional"] for q in before.values()))
    prov = page.locator(".card:not(.rejected)", has=page.locator(".provisional")).first
    accepted = prov.get_attribute("data-question")
    assert before[accepted]["provisional"]
    expect(prov.locator(".provisional")).to_have_text(f"provisional: {before[accepted]['provisional_reason']}")
    prov.evaluate(  # the card just below the sticky player
        "c => scrollTo(0, c.getBoundingClientRect().top + scrollY"
        " - document.querySelector('.sticky-player').offsetHeight - 8)"
    )
    page.screenshot(path=str(screenshot_dir / "verify_questions_provisional.png"))
    prov.locator("button.accept").click()
    expect(page.locator(".card.accepted")).to_have_count(1)
    page.click("#rederive")
    # the units it runs: the video's 4 segment clips (cached), reconcile, metadata, qa, export, report
    expect(page.locator("#job progress")).to_have_attribute("max", "9")
    expect(page.locator("#job")).to_contain_text("re-derive done: 9 / 9 units", timeout=300_000)
    now = {question_id(q): q for q in _current(root, "qa", VID, "questions.parquet")}
    assert (now[accepted]["provisional"], now[accepted]["provisional_reason"]) == (False, None)
    assert (
        sum(q["provisional"] for q in now.values()) == sum(q["provisional"] for k, q in before.items() if k != qid) - 1
    )
    expect(page.locator(f'.card[data-question="{accepted}"] .provisional')).to_have_count(
        0
    )  # reloaded by the re-derive
    asked = len(now)
    page.goto(live + "/")
    cell = page.locator(f'#videos tr[data-video="{VID}"] td').nth(10)
    expect(cell).to_have_text(f"1 / {asked} (+1 rejected, no longer asked)")  # it said 2 / asked


# ------------------------------------------------------------------------------ what a page says
def test_error_messages_do_not_show_the_data_roots_path(page: Page, live, root):
    r = page.request.get(f"{live}/api/videos/nope")
    assert r.status == 404 and str(root) not in r.text() and "nope" in r.json()["error"]
    store = Store(root)
    left = "sample-walk_left"
    error = f"{root}/fixes/{left}.yaml:3: field 'instances': no instance 99 in {left}"
    before = store.read_status("metadata", left)
    store.write_status({**before, "state": "failed", "error": error})
    try:
        page.goto(live + "/")
        cell = page.locator(f'#videos tr[data-video="{left}"] td').nth(4)
        expect(cell).to_have_text(f"failed: fixes/{left}.yaml:3: field 'instances': no instance 99 in {left}")
    finally:
        store.write_status(before)


def test_report_links_from_a_file_go_to_the_address_given(page: Page, root):
    report = root / "report.html"
    page.goto(report.as_uri())
    link = page.locator("a.verify").first
    assert link.get_attribute("href").startswith("http://127.0.0.1:8765/videos/")  # the default address
    page.fill("#verify-address", "http://127.0.0.1:9123")
    page.press("#verify-address", "Enter")
    assert link.get_attribute("href").startswith("http://127.0.0.1:9123/videos/")
    page.goto(report.as_uri())  # remembered
    assert page.locator("a.verify").first.get_attribute("href").startswith("http://127.0.0.1:9123/videos/")
    page.goto(report.as_uri() + "?verify=http://10.0.0.5:8800")  # or given in the address
    assert page.locator("a.verify").first.get_attribute("href").startswith("http://10.0.0.5:8800/videos/")
    assert json.loads(json.dumps(page.locator("#verify-address").input_value())) == "http://10.0.0.5:8800"
