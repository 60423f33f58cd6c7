"""The groundtruth detector and segmenter: truth rows in, clip-local ids out, rescaled to the frames."""

from __future__ import annotations

import numpy as np

from vsi_wild import schema
from vsi_wild.stages import segment as seg
from vsi_wild.stages.backends import (
    base,
    groundtruth,  # noqa: F401  (registers "groundtruth")
)
from vsi_wild.stages.backends.base import FrameBatch


def vis_row(k, iid, cat, x0, y0, x1, y1, view="front", w=64, h=36):
    m = np.zeros((h, w), bool)
    m[y0:y1, x0:x1] = True
    return {
        "source_id": "sample-t",
        "view": view,
        "sample_index": k,
        "time": k / 2,
        "frame": 4 * k,
        "fps": 8.0,
        "instance_id": iid,
        "category": cat,
        "x0": float(x0),
        "y0": float(y0),
        "x1": float(x1),
        "y1": float(y1),
        "image_width": w,
        "image_height": h,
        "pixels": int(m.sum()),
        "mask_rle": seg.encode_rle(m),
    }


def test_segmenter_gives_clip_local_ids_and_rescaled_masks():
    rows = [
        vis_row(10, 41, "bench", 2, 2, 10, 8),
        vis_row(11, 41, "bench", 3, 2, 11, 8),
        vis_row(11, 17, "bench", 30, 10, 40, 20),
        vis_row(11, 5, "cone", 50, 5, 54, 12),
        vis_row(11, 17, "bench", 0, 0, 4, 4, view="back"),
    ]
    gt = base.create("segmenter", "groundtruth", visibility=schema.table(schema.TRUTH_VISIBILITY, rows))
    imgs = [np.zeros((72, 128, 3), np.uint8)] * 2  # frames at twice the truth's resolution
    recs = gt.segment(FrameBatch("sample-t_front", imgs, [5.0, 5.5], [40, 44], [10, 11], 8.0), ["bench"])
    got = sorted((r.frame_pos, r.local_id, r.concept) for r in recs)
    # ids in order of first appearance within this clip, not the truth's 41 and 17; cone not asked
    assert got == [(0, 0, "bench"), (1, 0, "bench"), (1, 1, "bench")]
    r = next(r for r in recs if r.frame_pos == 1 and r.local_id == 1)
    assert r.box == (60.0, 20.0, 80.0, 40.0) and r.mask.shape == (72, 128) and int(r.mask.sum()) == 4 * 100
    # another clip numbers its own instances from 0 again
    recs2 = gt.segment(FrameBatch("sample-t_front", imgs[:1], [5.5], [44], [11], 8.0), ["bench", "cone"])
    assert sorted(r.local_id for r in recs2) == [0, 1, 2]


def test_detector_boxes_per_frame():
    rows = [vis_row(3, 1, "cone", 4, 4, 8, 10), vis_row(3, 2, "bench", 10, 10, 20, 20)]
    gt = base.create("open_vocab_detector", "groundtruth", visibility=schema.table(schema.TRUTH_VISIBILITY, rows))
    dets = gt.detect(
        FrameBatch("sample-t_front", [np.zeros((36, 64, 3), np.uint8)] * 2, [1.5, 2.0], [12, 16], [3, 4], 8.0), ["cone"]
    )
    assert dets[0].labels == ["cone"] and np.allclose(dets[0].boxes, [[4, 4, 8, 10]])
    assert dets[1].labels == [] and dets[1].boxes.shape == (0, 4)
