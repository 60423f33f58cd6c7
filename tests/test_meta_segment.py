"""Clips, COCO RLE masks, and the metadata stage's positions (reconciliation: tests/test_reconcile.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pycocotools.mask as mask_utils
import pytest
from cameras import OPENCV_AXES

from vsi_wild import schema
from vsi_wild.stages import metadata as md
from vsi_wild.stages import pose as po
from vsi_wild.stages import segment as seg
from vsi_wild.stages.backends.base import FrameBatch, SegmentRecord


# ------------------------------------------------------------------------------ masks
def test_rle_round_trip_through_pycocotools():
    rng = np.random.default_rng(3)
    for h, w in ((1, 1), (7, 5), (360, 640)):
        m = rng.random((h, w)) < 0.3
        m[: h // 2, : w // 3] = True
        counts = seg.encode_rle(m)
        # pycocotools decodes our string ...
        dec = mask_utils.decode({"size": [h, w], "counts": counts.encode()})
        assert np.array_equal(dec.astype(bool), m)
        assert seg.rle_area(counts, h, w) == int(m.sum())
        # ... and we decode pycocotools' own encoding
        theirs = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))["counts"].decode()
        assert theirs == counts
        assert np.array_equal(seg.decode_rle(theirs, h, w), m)


# ------------------------------------------------------------------------------ clips
def test_clip_spans_cover_every_sample_once():
    spans = seg.clip_spans(125.0, 30.0)
    assert [(c.index, c.start, c.end, c.first_sample, c.n_samples) for c in spans] == [
        (0, 0.0, 30.0, 0, 60),
        (1, 30.0, 60.0, 60, 60),
        (2, 60.0, 90.0, 120, 60),
        (3, 90.0, 120.0, 180, 60),
        (4, 120.0, 125.0, 240, 10),
    ]
    assert seg.n_samples(125.0) == 250 == sum(c.n_samples for c in spans)
    assert len(seg.clip_spans(3600.0, 300.0)) == 12
    assert seg.clip_spans(0.0, 30.0) == []


def test_clip_tables_from_segmenter_records():
    img = np.zeros((40, 60, 3), np.uint8)
    img[:, :, 0] = 200  # red everywhere
    batch = FrameBatch("sample-x_front", [img, img], [10.0, 10.5], [80, 84], [20, 21], 8.0)
    m = np.zeros((40, 60), bool)
    m[5:15, 10:30] = True
    speck = np.zeros((40, 60), bool)
    speck[30:32, 50:53] = True  # 6 px, under min_area 16
    recs = [
        SegmentRecord(0, "cup", 7, (10, 5, 30, 15), 0.9, m),
        SegmentRecord(1, "cup", 7, (10, 5, 30, 15), 0.8, m),
        SegmentRecord(1, "cup", 8, (0, 0, 1, 1), 0.1, m),  # below min_score: dropped
        SegmentRecord(0, "cup", 9, (50, 30, 53, 32), 0.5, speck),  # a speck: kept apart, not tracked
        SegmentRecord(1, "cup", 9, (50, 30, 53, 32), 0.2, speck),  # a speck below min_score: dropped
        SegmentRecord(1, "cup", 10, (0, 0, 0, 0), 0.9, np.zeros((40, 60), bool)),  # an empty mask: dropped
    ]
    segs, insts, specks = seg.clip_tables("sample-x_front", 3, batch, recs, "test", seg.SegmentParams(min_score=0.3))
    assert len(segs) == 2 and len(insts) == 1
    assert [(r["sample_index"], r["time"], r["local_id"], r["area"]) for r in specks] == [(20, 10.0, 9, 6)]
    assert (specks[0]["x0"], specks[0]["y0"], specks[0]["x1"], specks[0]["y1"]) == (50.0, 30.0, 53.0, 32.0)
    schema.table(schema.CLIP_SPECKS, specks)  # the rows conform
    s = segs[0]
    assert (s["x0"], s["y0"], s["x1"], s["y1"], s["area"]) == (10.0, 5.0, 30.0, 15.0, 200)
    assert np.array_equal(seg.decode_rle(s["mask_rle"], 40, 60), m)
    i = insts[0]
    assert (i["clip_index"], i["local_id"], i["first_time"], i["last_time"], i["n_observations"]) == (
        3,
        7,
        10.0,
        10.5,
        2,
    )
    assert seg.bhattacharyya(i["appearance"], i["appearance"]) == pytest.approx(1.0)


def test_sam3_reads_the_clip_folder_when_the_frames_are_its_files(tmp_path):
    """The segment stage's JPEG folder goes to sam3 as a folder (decoded one frame at a time);
    anything else (arrays, a folder with other files, names out of order) as images."""
    import cv2

    from vsi_wild.errors import UnitError
    from vsi_wild.stages.backends.segment import sam3_frames

    rgb = np.zeros((12, 20, 3), np.uint8)
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i:05d}.jpg")
        cv2.imwrite(str(paths[-1]), rgb)

    def batch(images):
        return FrameBatch("v_front", images, [0.0, 0.5, 1.0], [0, 4, 8], [0, 1, 2], 8.0)

    assert sam3_frames(batch(seg.JpegFrames(paths))) == str(tmp_path)
    as_images = sam3_frames(batch([rgb] * 3))
    assert [im.size for im in as_images] == [(20, 12)] * 3
    assert isinstance(sam3_frames(batch(seg.JpegFrames(paths[::-1]))), list)  # sam3 would reorder them
    (tmp_path / "00007.jpg").write_bytes(paths[0].read_bytes())  # a stray frame sam3 would also read
    assert isinstance(sam3_frames(batch(seg.JpegFrames(paths))), list)
    (tmp_path / "00007.jpg").unlink()
    cv2.imwrite(str(paths[1]), np.zeros((14, 20, 3), np.uint8))
    with pytest.raises(UnitError, match="different sizes"):
        sam3_frames(batch(seg.JpegFrames(paths)))


# ------------------------------------------------------------------------------ positions (metadata)
W, H = 640, 360


def _level_camera(height: float = 1.6, focal: float = 320.0) -> po.Track:
    """One level camera at the origin looking along world +y (camera x: right, y: down = world -z)."""
    R = OPENCV_AXES[None]
    K = np.array([[[focal, 0.0, W / 2], [0.0, focal, H / 2], [0.0, 0.0, 1.0]]])
    return po.Track(
        np.array([10]), np.array([5.0]), np.array([40]), 8.0, R, np.array([[0.0, 0.0, height]]), K, np.array([True])
    )


def _ground_row(distance: float, height: float = 1.6, focal: float = 320.0) -> float:
    """The image row where the ground ``distance`` straight ahead of ``_level_camera`` is seen."""
    return H / 2 + focal * height / distance


def _still_camera(samples: Sequence[int], height: float = 1.6, focal: float = 320.0) -> po.Track:
    """``_level_camera`` standing still over several samples."""
    one = _level_camera(height, focal)
    n = len(samples)
    return po.Track(
        np.array(samples),
        np.array(samples) * 0.5,
        np.array(samples) * 4,
        8.0,
        np.repeat(one.R, n, 0),
        np.repeat(one.C, n, 0),
        np.repeat(one.K, n, 0),
        np.ones(n, bool),
    )


def test_the_metadata_positions_leave_out_hidden_feet_as_reconciliation_does():
    """A hydrant 10 m ahead is seen three times; in two of them a beach ball in front hides its
    foot, and its box ends where the ground 8 m away is seen. The nearer half of its ground
    contacts would be those two (8 m); left out, the one whole sighting places it at 10 m. The
    metadata stage locates the instances of instances.parquet again, from their observations
    (after a person's fixes): it must leave the hidden feet out too."""
    camera = _still_camera([10, 11, 12])
    ten, eight, ball_foot = _ground_row(10.0), _ground_row(8.0), _ground_row(5.0)

    def row(k, box):
        return {
            "time": k * 0.5,
            "frame": 4 * k,
            "fps": 8.0,
            "area": 200,
            "x0": box[0],
            "y0": box[1],
            "x1": box[2],
            "y1": box[3],
        }

    hydrant = md.Inst(
        1,
        "fire hydrant",
        {k: row(k, (W / 2 - 6, v - 20, W / 2 + 6, v)) for k, v in ((10, eight), (11, eight), (12, ten))},
    )
    ball = md.Inst(2, "beach ball", {k: row(k, (W / 2 - 14, eight, W / 2 + 14, ball_foot)) for k in (10, 11)})
    rows = {
        r["instance_id"]: r
        for r in md.instance_rows("sample-x_left", [hydrant, ball], 8.0, md.MetadataParams(), camera, 1.6, (W, H))
    }
    assert rows[1]["y"] == pytest.approx(10.0, abs=1e-6) and rows[1]["x"] == pytest.approx(0.0, abs=1e-6)
    assert rows[2]["y"] == pytest.approx(5.0, abs=1e-6)
