"""A video's metadata in the formats annotation tools read and write: CVAT for video 1.1 (XML) and
COCO-RLE / YouTube-VIS (JSON); and a CVAT job's corrections turned back into fix ops.

**CVAT for video 1.1** (`vsi-wild fixes export-cvat VIDEO`): one task in interpolation mode, the
view video's frames. Each instance is two tracks of its concept's label (a box track, a mask track;
CVAT keeps one shape type per track), grouped by ``group_id`` = the instance id, every shape
carrying the label attribute ``instance_id``. A shape per 2 FPS observation, each a keyframe; an
``outside`` keyframe ends each visible span (so CVAT does not carry the box past it). Masks in
CVAT's own run-length code: alternating runs of 0 and 1, row by row, over the mask's tight box
(``left``, ``top``, ``width``, ``height``). The XML is written the way CVAT itself writes it
(the standard library's XML writer; CVAT's exporter is ~100 lines over ``XMLGenerator``).

Why not datumaro: its CVAT exporter works on datasets of *images* (a video must first be cut
into image files), writes masks full-frame from a transposed array, and brings a large dependency
tree; CVAT's own video dumper does not use it. pycocotools (already a dependency) does COCO RLE.

**Import** (`vsi-wild fixes import-cvat FILE`): the box tracks of an exported-and-edited file
against the video's current metadata, as fix ops: a relabelled track -> ``rename_concept`` (its
instances); moved or resized boxes, or an ``outside`` keyframe added -> ``set_box`` (the changed
keyframes with their neighbours, which bound CVAT's interpolation); one track holding shapes of
several instances (CVAT's merge) -> ``merge``; two tracks of one instance (CVAT's split) ->
``split_at`` the later one's first frame; an instance with no track left -> ``remove_instance``;
a new track -> ``add_instance`` with its keyframes. They are saved like any edit: rebased onto
the fix file, each through the pipeline's validation. Mask edits are not imported (no fix op holds
a mask).

**COCO-RLE / YouTube-VIS** (`--format coco`): ``videos`` (frame file names of the 2 FPS
timestamps), ``categories``, and one ``annotations`` entry per instance with ``segmentations``
(COCO RLE, compressed counts), ``bboxes`` (x, y, w, h) and ``areas`` per timestamp (null where
it is not seen).
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from pycocotools import mask as mask_utils

from vsi_wild.stages.segment import SAMPLE_STEP
from vsi_wild.verify.masks import MaskServer
from vsi_wild.verify.review import Review

ATTRIBUTE = "instance_id"
MOVED_PX = 0.5  # a box moved by more than this (any side) is an edit


class ExchangeError(ValueError):
    """A file that cannot be read as what it says it is; the message names the file and where."""


# ------------------------------------------------------------------------------ CVAT's mask code
def cvat_rle(mask: np.ndarray) -> tuple[list[int], int, int, int, int] | None:
    """CVAT's run-length code of a binary mask: (runs, left, top, width, height) over its tight
    box, runs alternating 0 and 1 row by row, starting with 0; None for an empty mask."""
    ys, xs = np.nonzero(mask)
    if not len(xs):
        return None
    left, top, right, bottom = int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())
    flat = (mask[top : bottom + 1, left : right + 1] > 0).astype(np.uint8).ravel()
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [len(flat)]])
    runs = np.diff(bounds).tolist()
    if flat[0] == 1:
        runs = [0] + runs
    return runs, left, top, right - left + 1, bottom - top + 1


def cvat_mask(runs: list[int], left: int, top: int, width: int, height: int, frame_w: int, frame_h: int) -> np.ndarray:
    """A frame-sized binary mask from CVAT's run-length code."""
    flat = np.zeros(width * height, np.uint8)
    pos, value = 0, 0
    for n in runs:
        flat[pos : pos + n] = value
        pos, value = pos + n, 1 - value
    out = np.zeros((frame_h, frame_w), np.uint8)
    out[top : top + height, left : left + width] = flat.reshape(height, width)[: frame_h - top, : frame_w - left]
    return out


# ------------------------------------------------------------------------------ what the video has now
def current(review: Review, video_id: str) -> dict[str, Any]:
    """The video's current metadata as the exporters use it: view, instances, observations per instance."""
    view = review.catalog.video(video_id)
    instances = review.catalog.table("metadata", video_id, "instances.parquet").to_pylist()
    obs: dict[int, list[dict]] = defaultdict(list)
    for o in review.catalog.table("metadata", video_id, "observations.parquet").to_pylist():
        obs[o["instance_id"]].append(o)
    for rows in obs.values():
        rows.sort(key=lambda o: o["sample_index"])
    return {"view": view, "instances": sorted(instances, key=lambda r: r["instance_id"]), "observations": obs}


def _frame_of(t: float, fps: float) -> int:
    return int(round(t * fps))


def _masks_by_instance(masks: MaskServer, video_id: str, samples: list[int], size: tuple[int, int]) -> dict:
    """(instance, sample) -> the frame-sized binary mask (view pixels)."""
    w, h = size
    out = {}
    for k in samples:
        for d in masks.decoded(video_id, k):
            m = d["mask"]
            if m.shape != (h, w):
                m = cv2.resize(m, (w, h), interpolation=cv2.INTER_NEAREST)
            out[(d["instance_id"], k)] = m
    return out


# ------------------------------------------------------------------------------ CVAT for video 1.1
def export_cvat(review: Review, masks: MaskServer, video_id: str) -> tuple[bytes, dict[str, int]]:
    """The video's metadata as a CVAT for video 1.1 XML file (bytes) and what it holds."""
    cur = current(review, video_id)
    view = cur["view"]
    fps, n_frames, w, h = float(view["fps"]), int(view["n_frames"]), int(view["width"]), int(view["height"])
    samples = sorted({o["sample_index"] for rows in cur["observations"].values() for o in rows})
    mask_of = _masks_by_instance(masks, video_id, samples, (w, h))
    root = ET.Element("annotations")
    ET.SubElement(root, "version").text = "1.1"
    meta = ET.SubElement(root, "meta")
    task = ET.SubElement(meta, "task")
    for k, v in (
        ("id", "0"),
        ("name", video_id),
        ("size", str(n_frames)),
        ("mode", "interpolation"),
        ("overlap", "0"),
        ("bugtracker", ""),
        ("flipped", "False"),
        ("created", ""),
        ("updated", ""),
        ("start_frame", "0"),
        ("stop_frame", str(n_frames - 1)),
        ("frame_filter", ""),
        ("z_order", "False"),
    ):
        ET.SubElement(task, k).text = v
    labels = ET.SubElement(task, "labels")
    for concept in sorted({r["concept"] for r in cur["instances"]}):
        label = ET.SubElement(labels, "label")
        ET.SubElement(label, "name").text = concept
        ET.SubElement(label, "type").text = "any"
        attrs = ET.SubElement(label, "attributes")
        a = ET.SubElement(attrs, "attribute")
        for k, v in (
            ("name", ATTRIBUTE),
            ("mutable", "False"),
            ("input_type", "text"),
            ("default_value", ""),
            ("values", ""),
        ):
            ET.SubElement(a, k).text = v
    size = ET.SubElement(task, "original_size")
    ET.SubElement(size, "width").text = str(w)
    ET.SubElement(size, "height").text = str(h)
    ET.SubElement(meta, "dumped").text = datetime.now(UTC).isoformat(timespec="seconds")
    n_tracks = n_boxes = n_masks = 0
    for inst in cur["instances"]:
        iid, rows = (
            inst["instance_id"],
            [o for o in cur["observations"].get(inst["instance_id"], []) if o["x0"] is not None],
        )
        if not rows:
            continue
        source = "manual" if inst["origin"] == "fix" else "auto"
        for kind in ("box", "mask"):
            track = None
            last_k = None
            for o in rows:
                k = o["sample_index"]
                m = mask_of.get((iid, k)) if kind == "mask" else None
                code = cvat_rle(m) if m is not None else None
                if kind == "mask" and code is None:
                    continue
                if track is None:
                    track = ET.SubElement(
                        root,
                        "track",
                        {
                            "id": str(2 * iid + (kind == "mask")),
                            "label": inst["concept"],
                            "source": source,
                            "group_id": str(iid),
                        },
                    )
                    n_tracks += 1
                if last_k is not None and k > last_k + 1:  # a gap: out of view after the last one
                    _outside(track, kind, _frame_of((last_k + 1) * SAMPLE_STEP, fps), iid)
                shape_attrs = {"frame": str(o["frame"]), "keyframe": "1", "outside": "0", "occluded": "0"}
                if kind == "box":
                    shape_attrs.update(
                        xtl=f"{o['x0']:.2f}", ytl=f"{o['y0']:.2f}", xbr=f"{o['x1']:.2f}", ybr=f"{o['y1']:.2f}"
                    )
                    n_boxes += 1
                else:
                    assert code is not None  # a mask row without a mask was skipped above
                    runs, left, top, mw, mh = code
                    shape_attrs.update(
                        rle=", ".join(map(str, runs)), left=str(left), top=str(top), width=str(mw), height=str(mh)
                    )
                    n_masks += 1
                shape_attrs["z_order"] = "0"
                shape = ET.SubElement(track, kind, shape_attrs)
                ET.SubElement(shape, "attribute", {"name": ATTRIBUTE}).text = str(iid)
                last_k = k
            if track is not None and last_k is not None and _frame_of((last_k + 1) * SAMPLE_STEP, fps) < n_frames:
                _outside(track, kind, _frame_of((last_k + 1) * SAMPLE_STEP, fps), iid)
    ET.indent(root, "  ")
    data = b'<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"
    return data, {"tracks": n_tracks, "boxes": n_boxes, "masks": n_masks}


def _outside(track: ET.Element, kind: str, frame: int, iid: int) -> None:
    last = track[-1]
    attrs = {**last.attrib, "frame": str(frame), "outside": "1", "keyframe": "1"}
    shape = ET.SubElement(track, kind, attrs)
    ET.SubElement(shape, "attribute", {"name": ATTRIBUTE}).text = str(iid)


def read_cvat(path: Path) -> dict[str, Any]:
    """A CVAT for video 1.1 file's task name, frame rate hints and box tracks (mask tracks skipped)."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise ExchangeError(f"{path}: not XML ({e})") from None
    if root.tag != "annotations" or (root.findtext("version") or "").strip() != "1.1":
        raise ExchangeError(f"{path}: not a CVAT 1.1 annotations file (<annotations><version>1.1</version>)")
    name = (root.findtext("meta/task/name") or root.findtext("meta/job/name") or "").strip()
    tracks = []
    for t in root.iter("track"):
        shapes: list[dict[str, Any]] = []
        for s in t:
            if s.tag != "box":
                continue
            try:
                frame = int(s.attrib["frame"])
                outside = s.attrib.get("outside") == "1"
                box = None if outside else tuple(float(s.attrib[k]) for k in ("xtl", "ytl", "xbr", "ybr"))
            except (KeyError, ValueError) as e:
                raise ExchangeError(
                    f"{path}: track {t.attrib.get('id')}: box at frame {s.attrib.get('frame')}: "
                    f"missing or bad attribute {e}"
                ) from None
            attr = next((a.text for a in s.findall("attribute") if a.attrib.get("name") == ATTRIBUTE), None)
            shapes.append(
                {
                    "frame": frame,
                    "outside": outside,
                    "keyframe": s.attrib.get("keyframe", "1") == "1",
                    "box": box,
                    "instance": int(attr) if attr and attr.strip().isdigit() else None,
                }
            )
        if shapes:
            tracks.append(
                {
                    "id": t.attrib.get("id"),
                    "label": t.attrib.get("label", ""),
                    "shapes": sorted(shapes, key=lambda s: s["frame"]),
                }
            )
    return {"name": name, "tracks": tracks}


def import_cvat(review: Review, path: Path, video_id: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The fix ops that make the video's metadata what the edited CVAT file says (see the module doc)."""
    doc = read_cvat(path)
    vid = video_id or doc["name"]
    if not vid:
        raise ExchangeError(f"{path}: no task name to tell the video: give the video id")
    review.catalog.video(vid)
    cur = current(review, vid)
    fps = float(cur["view"]["fps"])
    concept = {r["instance_id"]: r["concept"] for r in cur["instances"]}
    ours: dict[tuple[int, int], tuple] = {}  # (instance, frame) -> box
    for iid, rows in cur["observations"].items():
        for o in rows:
            if o["x0"] is not None:
                ours[(iid, o["frame"])] = (o["x0"], o["y0"], o["x1"], o["y1"])
    renames, boxes, merges, splits, adds = [], [], [], [], []
    seen: dict[int, list[dict]] = defaultdict(list)  # instance -> its tracks
    for t in doc["tracks"]:
        ids = sorted({s["instance"] for s in t["shapes"] if s["instance"] is not None})
        if not ids:
            frames = [s for s in t["shapes"] if s["keyframe"]]
            adds.append(
                {
                    "op": "add_instance",
                    "concept": t["label"],
                    "boxes": [
                        {"time": _time(s["frame"], fps), "outside": True}
                        if s["outside"]
                        else {"time": _time(s["frame"], fps), "box": [round(v, 2) for v in s["box"]]}
                        for s in frames
                    ],
                }
            )
            continue
        for i in ids:
            seen[i].append(t)
        for i in ids:
            if i in concept and concept[i] != t["label"]:
                renames.append((concept[i], t["label"], i))
        boxes += _box_edits(t, ours, fps)
        if len(ids) >= 2:
            merges.append({"op": "merge", "instances": ids})
    for i, tracks in sorted(seen.items()):
        if len(tracks) >= 2:  # split in CVAT: every later track starts a new instance
            starts = sorted(min(s["frame"] for s in t["shapes"] if not s["outside"]) for t in tracks)
            splits += [{"op": "split_at", "instance": i, "time": _time(f, fps)} for f in reversed(starts[1:])]
    removes = [
        {"op": "remove_instance", "instance": i}
        for i in sorted(concept)
        if i not in seen and any(k[0] == i for k in ours)
    ]
    grouped: dict[tuple[str, str], list[int]] = defaultdict(list)
    for frm, to, i in renames:
        grouped[(frm, to)].append(i)
    rename_ops = [
        {"op": "rename_concept", "from": frm, "to": to, "instances": sorted(ids)}
        for (frm, to), ids in sorted(grouped.items())
    ]
    return vid, rename_ops + boxes + merges + splits + removes + adds


def _time(frame: int, fps: float) -> float:
    return round(frame / fps, 3)


def _box_edits(track: dict[str, Any], ours: dict[tuple[int, int], tuple], fps: float) -> list[dict[str, Any]]:
    """``set_box`` ops for the keyframes of a track that differ from the metadata, each run of them
    with the keyframes beside it (CVAT interpolates between keyframes: they bound the edit)."""
    keys = [s for s in track["shapes"] if s["keyframe"]]
    edited = []
    for j, s in enumerate(keys):
        if s["instance"] is None:
            continue
        mine = ours.get((s["instance"], s["frame"]))
        if s["outside"]:
            if mine is not None:  # made out of view where the metadata sees it
                edited.append(j)
        elif mine is None or max(abs(a - b) for a, b in zip(s["box"], mine, strict=True)) > MOVED_PX:
            edited.append(j)
    runs: list[list[int]] = []
    for j in edited:
        span = [x for x in (j - 1, j, j + 1) if 0 <= x < len(keys) and keys[x]["instance"] == keys[j]["instance"]]
        if runs and span[0] <= runs[-1][-1] + 1 and keys[runs[-1][0]]["instance"] == keys[j]["instance"]:
            runs[-1] = sorted(set(runs[-1]) | set(span))
        else:
            runs.append(span)
    out = []
    for run in runs:
        frames: list[dict[str, Any]] = []
        for x in run:
            s = keys[x]
            if s["outside"] and not frames:
                continue  # a run cannot start out of view: the box before it bounds it
            frames.append(
                {"time": _time(s["frame"], fps), "outside": True}
                if s["outside"]
                else {"time": _time(s["frame"], fps), "box": [round(v, 2) for v in s["box"]]}
            )
        if frames:
            out.append({"op": "set_box", "instance": keys[run[0]]["instance"], "boxes": frames})
    return out


# ------------------------------------------------------------------------------ COCO-RLE / YouTube-VIS
def export_ytvis(review: Review, masks: MaskServer, video_id: str) -> tuple[bytes, dict[str, int]]:
    """The video's metadata as YouTube-VIS JSON with COCO RLE masks (bytes) and what it holds."""
    cur = current(review, video_id)
    view = cur["view"]
    w, h, fps = int(view["width"]), int(view["height"]), float(view["fps"])
    n = int(math.floor(float(view["duration_s"]) / SAMPLE_STEP - 1e-9)) + 1  # 2 FPS timestamps k / 2 < duration
    mask_of = _masks_by_instance(masks, video_id, list(range(n)), (w, h))
    categories = {c: i + 1 for i, c in enumerate(sorted({r["concept"] for r in cur["instances"]}))}
    annotations, n_masks = [], 0
    for inst in cur["instances"]:
        iid = inst["instance_id"]
        segs: list[Any] = [None] * n
        bboxes: list[Any] = [None] * n
        areas: list[Any] = [None] * n
        for o in cur["observations"].get(iid, []):
            k = o["sample_index"]
            if not 0 <= k < n or o["x0"] is None:
                continue
            bboxes[k] = [o["x0"], o["y0"], o["x1"] - o["x0"], o["y1"] - o["y0"]]
            m = mask_of.get((iid, k))
            if m is not None:
                rle = mask_utils.encode(np.asfortranarray(m))
                segs[k] = {"size": [h, w], "counts": rle["counts"].decode("ascii")}
                areas[k] = float(mask_utils.area(rle))
                n_masks += 1
            else:
                areas[k] = float(bboxes[k][2] * bboxes[k][3])
        if any(b is not None for b in bboxes):
            annotations.append(
                {
                    "id": iid,
                    "video_id": 1,
                    "category_id": categories[inst["concept"]],
                    "iscrowd": 0,
                    "width": w,
                    "height": h,
                    "length": 1,
                    "segmentations": segs,
                    "bboxes": bboxes,
                    "areas": areas,
                }
            )
    doc = {
        "info": {
            "description": f"vsi-wild metadata of {video_id}",
            "version": "1.0",
            "date_created": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "licenses": [],
        "videos": [
            {
                "id": 1,
                "name": video_id,
                "width": w,
                "height": h,
                "length": n,
                "file_names": [f"{video_id}/{_frame_of(k * SAMPLE_STEP, fps):06d}.jpg" for k in range(n)],
            }
        ],
        "categories": [{"id": i, "name": c, "supercategory": "object"} for c, i in categories.items()],
        "annotations": annotations,
    }
    return json.dumps(doc).encode(), {"instances": len(annotations), "frames": n, "masks": n_masks}
