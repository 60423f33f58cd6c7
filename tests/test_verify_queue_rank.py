"""The review queue's order of speck items, on constructed qa outputs (no store, no browser)."""

from __future__ import annotations

from types import SimpleNamespace

from vsi_wild.stages.qa.common import skipped_table
from vsi_wild.verify.queue import Queue

VID = "sample-x_front"


def _row(item: str, reason: str, specks: list[tuple[int, int, float]]) -> dict:
    return {
        "video_id": VID,
        "task_type": "VOC",
        "item": item,
        "reason": reason,
        "reading": "clearly",
        "specks": [{"clip_index": c, "local_id": lo, "first_time": t} for c, lo, t in specks],
    }


def test_the_speck_that_gives_a_count_back_alone_comes_first():
    """A count that waits on one speck is given back by one decision: that speck first. Then the
    specks of counts that wait on two, the one more counts wait on first; the rest by time. A
    speck a fix tells is done, and says what it was told."""
    skipped = skipped_table(
        [
            _row("cone", "total not asked", [(0, 1, 5.0), (0, 2, 6.0)]),
            _row("ball", "total not asked", [(2, 7, 70.0)]),
            _row("cone", "checkpoint 30 s not asked", [(0, 2, 6.0), (1, 3, 31.0), (1, 4, 40.0)]),
            _row("bench", "total not asked", [(0, 9, 2.0), (1, 8, 35.0)]),
            {"video_id": VID, "task_type": "VOO", "item": "x", "reason": "not stable", "reading": "glimpse"},
        ]
    )
    catalog = SimpleNamespace(table=lambda stage, unit, name: skipped)
    queue = Queue(SimpleNamespace(catalog=catalog))
    items = queue.speck_items(VID, {("speck", 0, 2): {"op": "speck", "instance": "none", "by": "ana"}})
    order = [(i["id"], i["waits_on"], i["counts_kept"]) for i in items]
    assert order == [
        (f"speck:{VID}:2:7", 1, 1),
        (f"speck:{VID}:0:2", 2, 2),
        (f"speck:{VID}:0:9", 2, 1),
        (f"speck:{VID}:0:1", 2, 1),
        (f"speck:{VID}:1:8", 2, 1),
        (f"speck:{VID}:1:3", 3, 1),
        (f"speck:{VID}:1:4", 3, 1),
    ]
    done = {i["id"]: (i["done"], i["by"], i["decision"]) for i in items if i["done"]}
    assert done == {f"speck:{VID}:0:2": (True, "ana", "no object")}
