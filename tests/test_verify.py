"""The verification app end to end on the embedded sample, in Debian's chromium (pytest-playwright).

One copy of the session's sample store; a reviewer's session on its front view: the videos page,
the masks over the video against the truth, a stale save, merging back a duplicate (the VOC count
returns to the truth's), renaming a concept, adding a missed instance, then re-deriving from the
page and reading the pipeline's new outputs. Misuse: a bad token, traversal ids, a POST without
the token. Every page is saved as a screenshot (``screenshot_dir``).
"""

from __future__ import annotations

import contextlib
import http.client
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import uvicorn
from conftest import REPO, copy_root
from playwright.sync_api import Page, expect
from pycocotools import mask as mask_utils
from ruamel.yaml import YAML
from typer.testing import CliRunner

from vsi_wild.config import load_config
from vsi_wild.stages.qa.common import question_id
from vsi_wild.store import Store
from vsi_wild.verify.server import create_app

pytestmark = pytest.mark.slow
# A save goes through the pipeline's own validation (a dry-run apply on the metadata stage's inputs):
# seconds on a loaded machine, beyond expect's default 5 s (a CI run saw an accept not shown in time)
expect.set_options(timeout=30_000)

SID = "sample-walk"
VID = f"{SID}_front"
TOKEN = "test-token"
# a concept whose front-view count reconciliation gets right (no review item) and joins across clips
CONCEPT = "traffic cone"
# The clip of the front view a reviewer marks `none` by hand (one with an automatic question), and
# the clip whose pivot and angle they fix
FIXED_CLIP = 2


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1400, "height": 1000}}


@pytest.fixture(scope="module")
def root(sample_root, tmp_path_factory) -> Path:
    return copy_root(sample_root[0], tmp_path_factory.mktemp("verify") / "data")


@pytest.fixture(scope="module")
def config():
    return load_config(REPO / "configs" / "sample.yaml")


def _current(root: Path, stage: str, unit: str, name: str) -> list[dict]:
    store = Store(root)
    return pq.read_table(root / "artifacts" / stage / unit / store.read_status(stage, unit)["key"] / name).to_pylist()


@pytest.fixture(scope="module")
def split(root) -> dict[str, int]:
    """A CONCEPT instance of the front view that reconciliation joined across clips: the
    hand-written file splits its last clip's member out, a duplicate for the interface to merge back."""
    members = [m for m in _current(root, "reconcile", VID, "members.parquet") if m["concept"] == CONCEPT]
    clips: dict[int, list[dict]] = {}
    for m in members:
        clips.setdefault(m["instance_id"], []).append(m)
    joined = sorted(i for i, ms in clips.items() if len({m["clip_index"] for m in ms}) >= 2)
    assert joined, f"no {CONCEPT} of {VID} seen in two clips"
    last = max(clips[joined[0]], key=lambda m: m["clip_index"])
    return {"clip": last["clip_index"], "local_id": last["local_id"], "instance": joined[0]}


@pytest.fixture(scope="module")
def hand_written(split) -> str:
    return f"""# checked by hand: a duplicate for the interface to merge back
video_id: {VID}
fixes:
  - op: split   # seen again later, split on purpose
    clip: {split["clip"]}
    local_id: {split["local_id"]}
"""


@pytest.fixture(scope="module")
def none_clip(root) -> int:
    """The first motion clip after FIXED_CLIP with an automatic direction: the one marked `none`."""
    motion = _current(root, "metadata", VID, "motion.parquet")
    return min(m["clip_index"] for m in motion if m["clip_index"] > FIXED_CLIP and m["state"] == "ok")


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """The app served on a free loopback port: its address inside the block, the server stopped after."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    while not srv.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        t.join(5)


@pytest.fixture(scope="module")
def live(root, config):
    with serving(create_app(config, Store(root), token=TOKEN)) as base:
        yield base


def fix_file(root: Path) -> Path:
    return root / "fixes" / f"{VID}.yaml"


def truth_count(root: Path, config, concept: str) -> int:
    """Instances of the concept in the front view that the segment stage can see (min_area)."""
    from vsi_wild.tasks.sample import load_truth

    v = load_truth(Store(root), SID)["visibility"]
    v = v.filter(pc.and_(pc.equal(v["view"], "front"), pc.equal(v["category"], concept)))
    scale = (v["image_width"][0].as_py() * v["image_height"][0].as_py()) / (
        config.project.width * config.project.height
    )
    return len({r["instance_id"] for r in v.to_pylist() if r["pixels"] >= config.segment.min_area * scale})


def voc_final(page: Page, concept: str) -> int:
    return int(page.locator(f'#voc tr[data-concept="{concept}"] td').last.inner_text())


def open_temporal(page: Page, live: str) -> None:
    page.goto(f"{live}/videos/{VID}")
    page.wait_for_function("window.pageReady === true")


def save(page: Page) -> None:
    page.click("#save")
    expect(page.locator("#status")).to_contain_text("saved")


# ------------------------------------------------------------------------------ videos page
def test_videos_page_lists_every_view_sortable_and_filterable(page: Page, live, config, screenshot_dir):
    page.goto(live + "/")
    rows = page.locator("#videos tbody tr")
    expect(rows).to_have_count(4)
    assert rows.first.get_attribute("data-video") == f"{SID}_back"
    page.click('th[data-key="video_id"]')  # descending
    assert rows.first.get_attribute("data-video") == f"{SID}_right"
    cells = rows.first.locator("td")
    assert cells.nth(4).inner_text() == "done" and int(cells.nth(5).inner_text()) > 0
    n_clips = math.ceil(config.sample.duration_s / config.metadata.motion_clip_seconds - 1e-9)
    assert cells.nth(6).inner_text() == str(n_clips)  # the motion clips of the sample
    page.select_option("#filter", "temporal")
    expect(rows).to_have_count(0)
    page.select_option("#filter", "all")
    page.screenshot(path=str(screenshot_dir / "verify_videos.png"), full_page=True)


# ------------------------------------------------------------------------------ masks vs truth
def test_masks_drawn_cover_the_truth_mask_at_a_seeked_time(page: Page, live, root, screenshot_dir):
    from vsi_wild.tasks.sample import load_truth

    v = load_truth(Store(root), SID)["visibility"]
    v = v.filter(pc.equal(v["view"], "front")).to_pylist()
    big = max((r for r in v if 20 <= r["time"] <= 100), key=lambda r: r["pixels"])
    open_temporal(page, live)
    page.uncheck("#show-boxes")
    page.evaluate(f"document.getElementById('video').currentTime = {big['time']}")
    page.wait_for_function(f"document.getElementById('overlay').dataset.sample === '{big['sample_index']}'")
    w, h = page.evaluate("[document.getElementById('overlay').width, document.getElementById('overlay').height]")
    alpha = np.array(
        page.evaluate(
            "(() => { const c = document.getElementById('overlay');"
            " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            " const a = new Array(c.width * c.height); for (let i = "
            "0; i < a.length; i++) a[i] = d[4 * i + 3]; return a; })()"
        ),
        dtype=np.uint8,
    ).reshape(h, w)
    truth = mask_utils.decode({"size": [big["image_height"], big["image_width"]], "counts": big["mask_rle"].encode()})
    truth = np.asarray(truth, dtype=np.uint8)
    if truth.shape != (h, w):
        import cv2

        truth = cv2.resize(truth, (w, h), interpolation=cv2.INTER_NEAREST)
    painted = (alpha > 0)[truth > 0].mean()
    assert painted > 0.95, (painted, big["category"], big["time"])
    x0, y0, x1, y1 = (int(round(big[k] * w / big["image_width"])) for k in ("x0", "y0", "x1", "y1"))
    assert (alpha[y0:y1, x0:x1] > 0).mean() > 0.3  # the truth box is covered, not a stray pixel
    page.screenshot(path=str(screenshot_dir / "verify_temporal_masks.png"), full_page=True)


# ------------------------------------------------------------------------------ a reviewer's session
def plain_fixes(root: Path) -> list[dict]:
    """The fix file's fixes without who made them and when (the app stamps every fix it writes)."""
    return [
        {k: v for k, v in f.items() if k not in ("by", "at")}
        for f in YAML(typ="safe").load(fix_file(root).read_text())["fixes"]
    ]


def test_stale_saves_are_rebased_and_a_reload_loses_nothing(page: Page, live, root, hand_written, screenshot_dir):
    """Issue 28's lost work: a save after another page or a person saved is rebased onto their file
    (it was refused with "reload: nothing is lost", and the reload lost the pending rename)."""
    open_temporal(page, live)  # loaded before the file exists
    page.select_option("#rename-from", "vending machine")
    page.fill("#rename-to", "drinks machine")
    page.click("#rename-add")
    expect(page.locator("#pending li.pending")).to_have_count(1)
    fix_file(root).parent.mkdir(parents=True, exist_ok=True)
    fix_file(root).write_text(hand_written)  # meanwhile, a person writes the file by hand ...
    other = page.context.new_page()  # ... and a second tab's verdict is saved at once
    other.goto(f"{live}/videos/{VID}/questions")
    other.wait_for_function("window.pageReady === true")
    first = other.locator(".card", has_text="VOO ·").first
    REVIEWED["other_tab"] = first.get_attribute("data-question")
    first.locator("button.accept").click()
    expect(first).to_have_class(re.compile("accepted"))
    other.close()
    page.reload()  # the pending rename is the server's draft: a reload keeps it
    page.wait_for_function("window.pageReady === true")
    expect(page.locator("#pending li.pending")).to_contain_text("drinks machine")
    save(page)
    expect(page.locator("#save-error")).to_have_text("")
    text = fix_file(root).read_text()
    assert text.startswith("# checked by hand") and "# seen again later, split on purpose" in text  # comments kept
    fixes = YAML(typ="safe").load(text)["fixes"]
    assert [f["op"] for f in fixes] == ["split", "review_question", "rename_concept"]
    assert fixes[2]["to"] == "drinks machine" and fixes[2]["by"] and fixes[2]["at"]  # who and when
    history = sorted((fix_file(root).parent / ".history" / VID).glob("*.yaml"), key=lambda p: int(p.stem))
    assert history[0].read_text() == hand_written
    expect(page.locator("#pending li.pending")).to_have_count(0)
    expect(page.locator("#pending li.saved")).to_have_count(3)
    page.screenshot(path=str(screenshot_dir / "verify_temporal_rebased.png"), full_page=True)


def test_leaving_with_pending_fixes_asks_first(page: Page, live):
    open_temporal(page, live)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.type), d.dismiss()))
    page.select_option("#rename-from", "trash can")
    page.fill("#rename-to", "bin")
    page.click("#rename-add")
    expect(page.locator("#pending li.pending")).to_have_count(1)
    page.click("header nav a:has-text('Videos')")
    page.wait_for_timeout(500)
    assert dialogs == ["beforeunload"] and "/videos/" in page.url  # dismissed: still on the page
    page.keyboard.press("Control+z")  # undo: nothing pending
    expect(page.locator("#pending li.pending")).to_have_count(0)
    expect(page.locator('#voc tr[data-concept="trash can"]')).to_have_count(1)
    page.keyboard.press("Control+Shift+z")  # redo
    expect(page.locator('#voc tr[data-concept="bin"]')).to_have_count(1)
    page.click("#undo")
    expect(page.locator("#pending li.pending")).to_have_count(0)
    page.click("header nav a:has-text('Videos')")
    page.wait_for_url(f"{live}/")
    assert dialogs == ["beforeunload"]  # nothing pending: no question


def test_merge_the_duplicate_back_and_the_voc_count_is_the_truths(
    page: Page, live, root, config, split, hand_written, screenshot_dir
):
    truth = truth_count(root, config, CONCEPT)
    open_temporal(page, live)
    expect(page.locator("#pending li.saved")).to_have_count(3)  # the hand-written split, a verdict, a rename
    assert voc_final(page, CONCEPT) == truth + 1  # the preview of the file: one too many
    new_id = int(page.locator("#instances .sel").evaluate_all("els => Math.max(...els.map(e => +e.dataset.id))"))
    for i in (split["instance"], new_id):
        page.check(f'#instances input.sel[data-id="{i}"]')
    page.click("#merge-add")
    expect(page.locator("#pending li")).to_have_count(4)
    assert voc_final(page, CONCEPT) == truth
    page.screenshot(path=str(screenshot_dir / "verify_temporal_merge.png"), full_page=True)
    before = fix_file(root).read_text()
    save(page)
    text = fix_file(root).read_text()
    assert text.startswith("# checked by hand") and "# seen again later, split on purpose" in text  # comments kept
    assert plain_fixes(root)[3] == {"op": "merge", "instances": [split["instance"], new_id]}
    history = sorted((fix_file(root).parent / ".history" / VID).glob("*.yaml"), key=lambda p: int(p.stem))
    assert history[-1].read_text() == before  # the previous version kept


def test_an_invalid_fix_is_refused_next_to_its_control(page: Page, live, root):
    open_temporal(page, live)
    before = fix_file(root).read_text()
    concept_of = {i["instance_id"]: i["concept"] for i in _current(root, "metadata", VID, "instances.parquet")}
    a = min(concept_of)
    b = min(i for i, c in concept_of.items() if c != concept_of[a])
    page.check(f'#instances input.sel[data-id="{a}"]')
    page.check(f'#instances input.sel[data-id="{b}"]')  # two instances of different concepts
    page.click("#merge-add")
    expect(page.locator("#merge-error")).to_contain_text("different concepts")
    expect(page.locator("#pending li")).to_have_count(4)
    expect(page.locator("#pending li.pending")).to_have_count(0)
    assert fix_file(root).read_text() == before


def seek(page: Page, t: float) -> None:
    page.evaluate(f"document.getElementById('video').currentTime = {t}")
    page.wait_for_function(
        f"Math.abs(document.getElementById('video').currentTime - {t}) < 0.01 && "
        f"document.getElementById('overlay').dataset.sample === '{round(t * 2)}'"
    )


def drag_box(page: Page, box: tuple[float, float, float, float]) -> None:
    """Drag a box on the frame, given in view pixels (the overlay canvas' own coordinates)."""
    page.locator("#overlay").scroll_into_view_if_needed()
    r = page.locator("#overlay").bounding_box()
    w, h = page.evaluate("[document.getElementById('overlay').width, document.getElementById('overlay').height]")
    sx, sy = r["width"] / w, r["height"] / h
    page.mouse.move(r["x"] + box[0] * sx, r["y"] + box[1] * sy)
    page.mouse.down()
    page.mouse.move(r["x"] + box[2] * sx, r["y"] + box[3] * sy, steps=4)
    page.mouse.up()


DRAWN: dict[str, list] = {}  # the keyframes the drawing test laid, checked after the re-derive


def truth_box(root: Path, t: float) -> tuple[float, float, float, float]:
    """The view-pixel box of the biggest truth object of the front view that is seen at 40 s and
    at 44.5 s (the one the drawing test outlines), at time ``t``."""
    from vsi_wild.tasks.sample import load_truth

    v = load_truth(Store(root), SID)["visibility"]
    rows = [r for r in v.filter(pc.equal(v["view"], "front")).to_pylist() if r["time"] in (40.0, 44.5)]
    both = {
        i
        for i in {r["instance_id"] for r in rows}
        if {r["time"] for r in rows if r["instance_id"] == i} == {40.0, 44.5}
    }
    best = max(both, key=lambda i: sum(r["pixels"] for r in rows if r["instance_id"] == i))
    r = next(r for r in rows if r["instance_id"] == best and r["time"] == t)
    s = 640 / r["image_width"]
    return tuple(round(r[k] * s, 1) for k in ("x0", "y0", "x1", "y1"))


def test_rename_and_draw_a_missed_instance(page: Page, live, root):
    open_temporal(page, live)
    benches = voc_final(page, "bench")
    page.select_option("#rename-from", "bench")
    page.fill("#rename-to", "park bench")
    page.click("#rename-add")
    expect(page.locator('#voc tr[data-concept="park bench"]')).to_have_count(1)
    # the renamed concept stays chosen under its new name, and the box is cleared (a second click
    # renamed another concept to the name left in the box)
    expect(page.locator("#rename-from")).to_have_value("park bench")
    expect(page.locator("#rename-to")).to_have_value("")
    # a missed object, drawn around a real one of the truth (the groundtruth segmenter, like SAM3 on a
    # GPU worker, takes box prompts: the drawn boxes become masks in the segment stage)
    page.fill("#add-concept", "park bench")
    page.click("#draw-toggle")
    for t, box in ((40.0, truth_box(root, 40.0)), (44.5, truth_box(root, 44.5))):
        seek(page, t)
        drag_box(page, box)
    DRAWN["frames"] = page.evaluate("S.draw.frames")
    assert [f["time"] for f in DRAWN["frames"]] == [40.0, 44.5]
    seek(page, 42.0)  # between the keyframes the page shows the interpolated box, as the stage lays it
    expect(page.locator("#draw-keys")).to_contain_text("keyframes: 0:40.0")
    shown = page.evaluate("S.player.extra[0].box")
    expected = [a + (b - a) * 4 / 9 for a, b in zip(DRAWN["frames"][0]["box"], DRAWN["frames"][1]["box"], strict=True)]
    assert np.allclose(shown, expected, atol=0.01)
    page.click("#add-add")
    expect(page.locator("#pending li")).to_have_count(6)  # 4 saved, 2 pending
    assert voc_final(page, "park bench") == benches + 1
    save(page)
    fixes = plain_fixes(root)
    assert fixes[4] == {"op": "rename_concept", "from": "bench", "to": "park bench"}
    assert fixes[5] == {"op": "add_instance", "concept": "park bench", "boxes": DRAWN["frames"]}


REVIEWED: dict[str, str] = {}  # what the review tests chose, checked after the re-derive


def test_reject_and_accept_questions(page: Page, live, root, screenshot_dir):
    page.goto(f"{live}/videos/{VID}/questions")
    page.wait_for_function("window.pageReady === true")
    rejected = page.locator(".card", has_text="VOC · total · release · trash can ·")
    REVIEWED["reject"] = rejected.get_attribute("data-question")
    rejected.locator("select.reason").select_option("not answerable from the video")
    rejected.locator("button.reject").click()
    expect(rejected).to_have_class("card rejected")
    accepted = page.locator(".card", has_text="VPO · rotated · release").first
    REVIEWED["accept"] = accepted.get_attribute("data-question")
    accepted.locator("button.accept").click()
    expect(accepted).to_have_class("card accepted")
    page.screenshot(path=str(screenshot_dir / "verify_questions.png"))
    # the filter shows each verdict's cards, and the rest as not reviewed
    total = page.locator(".card").count()
    shown = {}
    for f in ("accept", "reject", "open"):
        page.select_option("#filter", f)
        shown[f] = page.locator(".card").evaluate_all("cs => cs.map(c => c.dataset.question)")
        expect(page.locator("#count")).to_contain_text(f"{len(shown[f])} of {total} questions · ")
        page.screenshot(path=str(screenshot_dir / f"verify_questions_filter_{f}.png"))
    reviewed = len(shown["accept"]) + len(shown["reject"])
    expect(page.locator("#count")).to_have_text(f"{len(shown['open'])} of {total} questions · {reviewed} reviewed")
    page.select_option("#filter", "all")
    assert REVIEWED["accept"] in shown["accept"] and REVIEWED["reject"] in shown["reject"]
    assert reviewed + len(shown["open"]) == total
    assert len({q for qs in shown.values() for q in qs}) == total  # each card under one filter
    # each verdict records the answers the person judged (an accept holds only while they stay)
    answers = {question_id(q): q["answers"] for q in _current(root, "qa", VID, "questions.parquet")}
    assert plain_fixes(root)[-2:] == [
        {
            "op": "review_question",
            "question": REVIEWED["reject"],
            "verdict": "reject",
            "answers": answers[REVIEWED["reject"]],
            "reason": "not answerable from the video",
        },
        {
            "op": "review_question",
            "question": REVIEWED["accept"],
            "verdict": "accept",
            "answers": answers[REVIEWED["accept"]],
        },
    ]


def test_vmr_pivot_from_the_keyboard_angle_from_the_compass_and_a_clip_marked_none(
    page: Page, live, root, none_clip, screenshot_dir
):
    page.goto(f"{live}/videos/{VID}/spatial")
    page.wait_for_function("window.pageReady === true")
    auto = float(page.locator(f'#clips tr[data-clip="{FIXED_CLIP}"] td').nth(4).inner_text().rstrip("°"))
    page.click(f'#clips tr[data-clip="{FIXED_CLIP}"]')  # seeks to its pivot
    pivot = page.evaluate("document.getElementById('video').currentTime")
    for key in ("ArrowRight", "ArrowRight", ".", ","):
        page.keyboard.press(key)
    page.keyboard.press("p")
    assert abs(page.evaluate("M.pivot") - (pivot + 2)) < 1e-6
    target = -135.0 if abs(auto - -135.0) > 60 else 45.0  # a sector other than the automatic one
    box = page.locator("#compass").bounding_box()
    cx, cy, r = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, box["width"] / 3
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx + r * np.sin(np.radians(target)), cy - r * np.cos(np.radians(target)), steps=4)
    page.mouse.up()
    assert page.evaluate("M.angle") == target
    page.click("#apply")
    expect(page.locator(f'#clips tr[data-clip="{FIXED_CLIP}"] td').nth(7)).to_have_text("fix")
    page.click(f'#clips tr[data-clip="{none_clip}"]')
    page.click("#none")
    expect(page.locator(f'#clips tr[data-clip="{none_clip}"] td').nth(6)).to_have_text("none")
    page.check("#clip-verified")
    page.screenshot(path=str(screenshot_dir / "verify_spatial.png"), full_page=True)
    save(page)
    assert plain_fixes(root)[-2:] == [
        {"op": "motion", "clip": FIXED_CLIP, "pivot_time": pivot + 2, "angle_deg": target},
        {"op": "motion", "clip": none_clip, "state": "none"},
    ]
    REVIEWED["vmr_sector"] = {-135.0: "backward-left", 45.0: "forward-right"}[target]


def test_rederive_from_the_page_updates_the_outputs(page: Page, live, root, config, none_clip, screenshot_dir):
    truth = truth_count(root, config, CONCEPT)
    benches = truth_count(root, config, "bench")
    open_temporal(page, live)
    page.click("#rederive")
    expect(page.locator("#job")).to_contain_text("re-derive done", timeout=300_000)
    store = Store(root)
    key = store.read_status("metadata", VID)["key"]
    inst = pq.read_table(root / "artifacts" / "metadata" / VID / key / "instances.parquet").to_pylist()
    counts: dict[str, int] = {}
    for r in inst:
        counts[r["concept"]] = counts.get(r["concept"], 0) + 1
    assert counts[CONCEPT] == truth and "bench" not in counts and counts["park bench"] == benches + 1
    added = [r for r in inst if r["concept"] == "park bench" and r["first_time"] == 40.0 and r["last_time"] == 44.5]
    assert len(added) == 1 and added[0]["origin"] == "fix"
    # the drawn track's observations, read back from the artifacts: a box at every 2 FPS timestamp,
    # interpolated between the keyframes; and visibility rows like any instance's
    obs = [
        o
        for o in _current(root, "metadata", VID, "observations.parquet")
        if o["instance_id"] == added[0]["instance_id"]
    ]
    (t0, a), (t1, b) = ((f["time"], np.array(f["box"])) for f in DRAWN["frames"])
    assert [o["time"] for o in obs] == [40.0 + 0.5 * i for i in range(10)]
    for o in obs:
        assert np.allclose([o["x0"], o["y0"], o["x1"], o["y1"]], a + (b - a) * (o["time"] - t0) / (t1 - t0))
    vis = [
        v for v in _current(root, "metadata", VID, "visibility.parquet") if v["instance_id"] == added[0]["instance_id"]
    ]
    assert {v["time"] for v in vis if v["state"] == "visible"} == {o["time"] for o in obs}
    assert len(vis) > len(obs)  # a state at every timestamp of the video, as for the automatic instances
    # the drawn boxes became masks in the segment stage (its clip 30-60 s), at least at both keyframes
    prompted = _current(root, "segment", f"{VID}@0001", "prompted.parquet")
    assert {40.0, 44.5} <= {r["time"] for r in prompted if r["area"] > 0}
    qa = pq.read_table(root / "exports" / "qa.parquet").to_pylist()
    voc = {
        r["concepts"][0]: int(r["answer"])
        for r in qa
        if r["video_id"] == VID and r["task_type"] == "VOC" and r["split"] == "release"
    }
    assert voc[CONCEPT] == truth and voc["park bench"] == benches + 1
    assert "trash can" not in voc  # the rejected question left the export
    answers = [
        r["answer_text"] for r in qa if r["video_id"] == VID and r["task_type"] == "VMR" and r["split"] == "release"
    ]
    assert REVIEWED["vmr_sector"] in answers
    motion = _current(root, "metadata", VID, "motion.parquet")  # after the fixes: the marked clip is none
    assert [m["state"] for m in motion if m["clip_index"] == none_clip] == ["none"]
    assert len(answers) == sum(m["state"] == "ok" for m in motion)  # one question per clip with a direction
    reviewed = pq.read_table(root / "exports" / "reviewed.parquet").to_pylist()
    # the accepted ones that are exported (the other tab's VOO question may be left out by the balance)
    assert REVIEWED["accept"] in {r["question_id"] for r in reviewed} <= {REVIEWED["accept"], REVIEWED["other_tab"]}
    assert any(r["split"] == "release" for r in reviewed)
    qa_key = store.read_status("qa", VID)["key"]
    skipped = pq.read_table(root / "artifacts" / "qa" / VID / qa_key / "skipped.parquet").to_pylist()
    assert any(r["reason"] == "rejected by a person: not answerable from the video" for r in skipped)
    expect(page.locator("#pending li.saved")).to_have_count(10)  # the page reloaded from the new outputs
    seek(page, 40.0)  # the overlay draws the drawn instance with its mask
    page.wait_for_function(
        f"S.player.shownMasks.masks.some(m => m.instance_id === {added[0]['instance_id']} && m.prompt)"
    )
    page.screenshot(path=str(screenshot_dir / "verify_temporal_rederived.png"), full_page=True)
    # the app serves the re-derived build report, whose video names lead back to these pages
    page.click("header nav a:has-text('Report')")
    expect(page.locator("h1")).to_have_text("VSI-Super-Wild build report")
    link = page.locator(f".card a.verify:has-text('{VID}')").first
    assert link.get_attribute("href") == f"/videos/{VID}"
    link.click()
    expect(page.locator("header h1")).to_contain_text(VID)


def test_timeline_seeks_and_zooms_and_a_reordered_appearance_becomes_set_appearance(page: Page, live):
    open_temporal(page, live)
    box = page.locator("#timeline").bounding_box()
    x = box["x"] + 70 + (box["width"] - 70) * 0.75  # 3/4 of the axis right of the 70 px labels
    page.mouse.click(x, box["y"] + 30)
    page.wait_for_function("Math.abs(document.getElementById('video').currentTime - 90) < 0.6")
    page.mouse.move(x, box["y"] + 30)
    page.mouse.wheel(0, -120)
    page.wait_for_function("S.t1 - S.t0 < 100 && S.t0 < 90 && S.t1 > 90")
    n = page.evaluate("DRAFT.edits.length")
    last = page.locator("#last-order li").last
    concept = last.get_attribute("data-concept")
    last.locator("button.up").click()
    expect(page.locator("#last-order li").last).not_to_have_attribute("data-concept", concept)
    added = page.evaluate("DRAFT.edits.map(e => e.fix)")[n:]
    assert added and all(f["op"] == "set_appearance" and "last_time" in f for f in added)


def test_progress_is_kept_and_shown_by_status(page: Page, live, root, config):
    open_temporal(page, live)
    page.check("#verified")
    expect(page.locator("#status")).to_contain_text("marked verified")
    page.goto(live + "/")
    page.select_option("#filter", "temporal")
    expect(page.locator("#videos tbody tr")).to_have_count(1)
    from vsi_wild.cli import app

    out = CliRunner().invoke(app, ["status", "-c", str(REPO / "configs" / "sample.yaml"), "--data-root", str(root)])
    assert out.exit_code == 0, out.output
    n_clips = math.ceil(config.sample.duration_s / config.metadata.motion_clip_seconds - 1e-9)
    assert f"{VID}: temporal verified, clips 1/{n_clips}, questions 3/" in out.output


def test_fixes_check_validates_without_running(root):
    from vsi_wild.cli import app

    args = ["fixes", "check", VID, "-c", str(REPO / "configs" / "sample.yaml"), "--data-root", str(root)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0 and f"{VID}: ok (10 fixes)" in out.output, out.output
    bad = root / "fixes" / f"{SID}_back.yaml"
    bad.write_text(f"video_id: {SID}_back\nfixes:\n  - op: remove_instance\n    instance: 999\n")
    out = CliRunner().invoke(app, [*args[:2], f"{SID}_back", *args[3:]])
    assert out.exit_code == 1 and "yaml:4: field 'instance': no instance 999" in out.output, out.output
    bad.unlink()


# ------------------------------------------------------------------------------ misuse
def raw(base: str, method: str, path: str, headers: dict[str, str] | None = None, body: str | None = None):
    """A request with the path sent as written (no client-side normalisation of '..' or %2F)."""
    host, port = base.removeprefix("http://").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    return r.status, r.read().decode(errors="replace")


def test_traversal_ids_and_posts_without_the_token_are_refused(live, root):
    before = sorted(p for p in root.rglob("*"))
    for vid in (
        "..",
        "%2E%2E",
        "..%2F..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "sample-walk_front%2F..%2F..",
        "..%5C..%5Cetc",
    ):
        for path in (
            f"/api/videos/{vid}",
            f"/api/videos/{vid}/media",
            f"/api/videos/{vid}/masks?k=1",
            f"/videos/{vid}",
        ):
            status, _ = raw(live, "GET", path)
            assert status == 404, (path, status)
        status, _ = raw(
            live, "POST", f"/api/videos/{vid}/fixes", {"X-Verify-Token": TOKEN}, '{"fixes": [], "sha256": "none"}'
        )
        assert status == 404, (vid, status)
    status, _ = raw(live, "GET", f"/api/videos/{VID}/images/..%2F..%2F..%2Fstatus%2Fqa%2F{VID}.parquet")
    assert status == 404
    status, body = raw(live, "POST", f"/api/videos/{VID}/progress", {}, '{"progress": {}}')
    assert status == 403 and "token" in body
    status, _ = raw(live, "POST", f"/api/videos/{VID}/progress", {"X-Verify-Token": "wrong"}, '{"progress": {}}')
    assert status == 403
    assert sorted(p for p in root.rglob("*")) == before  # nothing written


def test_beyond_loopback_every_request_needs_the_token(root, config, page: Page):
    with serving(create_app(config, Store(root), token=TOKEN, require_token=True)) as base:
        for path in ("/", f"/videos/{VID}", "/api/videos", f"/api/videos/{VID}/media", "/static/common.js"):
            assert raw(base, "GET", path)[0] == 401, path
            assert raw(base, "GET", path, {"X-Verify-Token": "nope"})[0] == 401, path
        assert raw(base, "GET", "/api/videos", {"X-Verify-Token": TOKEN})[0] == 200
        page.goto(f"{base}/?token={TOKEN}")  # the URL `vsi-wild verify` prints; a cookie carries on
        expect(page.locator("#videos tbody tr")).to_have_count(4)
        page.goto(f"{base}/videos/{VID}")
        page.wait_for_function("window.pageReady === true")


def test_a_video_whose_metadata_failed_shows_the_state_and_its_error(page: Page, live, root, screenshot_dir):
    store = Store(root)
    left = f"{SID}_left"
    error = f"fixes/{left}.yaml:3: field 'instances': no instance 99 in {left}"
    store.write_status({**store.read_status("metadata", left), "state": "failed", "error": error})
    page.goto(live + "/")
    expect(page.locator(f'#videos tr[data-video="{left}"] td').nth(4)).to_have_text(f"failed: {error}")
    page.goto(f"{live}/videos/{left}")
    expect(page.locator("#state")).to_have_text(f"failed: {error}")
    expect(page.locator("#status")).to_have_text("no metadata to verify yet")
    page.screenshot(path=str(screenshot_dir / "verify_failed_metadata.png"))
