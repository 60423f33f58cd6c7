"""CVAT for video 1.1 and YouTube-VIS (COCO RLE) export, and a CVAT job's corrections imported as fix
ops: a round trip on a copy of the session's sample store (no browser)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from conftest import REPO, copy_root
from pycocotools import mask as mask_utils
from ruamel.yaml import YAML
from typer.testing import CliRunner

from vsi_wild.verify import exchange

VID = "sample-walk_front"


def cli(*args: str):
    from vsi_wild.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def root(sample_root, tmp_path_factory):
    return copy_root(sample_root[0], tmp_path_factory.mktemp("exchange") / "data")


def common(root):
    return ["-c", str(REPO / "configs" / "sample.yaml"), "--data-root", str(root)]


def test_cvat_rle_is_cvats_row_major_code_of_the_tight_box():
    m = np.zeros((6, 8), np.uint8)
    m[1, 2:5] = 1
    m[2, 3:6] = 1
    runs, left, top, w, h = exchange.cvat_rle(m)
    # the box x 2..5, y 1..2; rows "1110" and "0111": 0 zeros, 3 ones, 2 zeros, 3 ones
    assert (left, top, w, h) == (2, 1, 4, 2) and runs == [0, 3, 2, 3]
    assert np.array_equal(exchange.cvat_mask(runs, left, top, w, h, 8, 6), m)


def test_export_edit_as_cvat_would_import_gives_the_edit(root, tmp_path):
    xml = tmp_path / "front.xml"
    out = cli("fixes", "export-cvat", VID, "-o", str(xml), *common(root))
    assert out.exit_code == 0, out.output
    tree = ET.parse(xml)
    doc = tree.getroot()
    assert doc.findtext("version") == "1.1" and doc.findtext("meta/task/mode") == "interpolation"
    boxes = [t for t in doc.iter("track") if t.find("box") is not None]
    masks = [t for t in doc.iter("track") if t.find("mask") is not None]
    assert boxes and len(masks) == len(boxes)
    # the masks in CVAT's code are the segment stage's, read back through pycocotools independently
    ytvis = tmp_path / "front.json"
    assert cli("fixes", "export-cvat", VID, "--format", "coco", "-o", str(ytvis), *common(root)).exit_code == 0
    vis = json.loads(ytvis.read_text())
    ann = {a["id"]: a for a in vis["annotations"]}
    w, h = vis["videos"][0]["width"], vis["videos"][0]["height"]
    track = masks[0]
    iid = int(track.attrib["group_id"])
    shape = track.find("mask")
    k = round(int(shape.attrib["frame"]) / 8 * 2)  # the sample's 8 fps, 2 FPS timestamps
    mine = exchange.cvat_mask(
        [int(v) for v in shape.attrib["rle"].split(",")],
        *(int(shape.attrib[a]) for a in ("left", "top", "width", "height")),
        w,
        h,
    )
    coco = mask_utils.decode({"size": [h, w], "counts": ann[iid]["segmentations"][k]["counts"].encode()})
    assert mine.sum() > 50 and np.array_equal(mine, coco)
    assert ann[iid]["areas"][k] == mine.sum()

    # edit as CVAT would: relabel one track, move one box, delete one track, merge two tracks of one
    # label, split one, draw a new one
    by_id = {int(t.attrib["group_id"]): t for t in boxes}
    label = {i: t.attrib["label"] for i, t in by_id.items()}
    fps = 8.0
    cones = sorted(i for i in by_id if label[i] == "traffic cone")
    relabel, moved, gone, (keep, into), split = cones[0], cones[1], cones[2], cones[3:5], cones[5]
    by_id[relabel].attrib["label"] = "pylon"
    shapes = [s for s in by_id[moved].findall("box") if s.attrib["outside"] == "0"]
    mid = len(shapes) // 2
    s = shapes[mid]
    new_box = [float(s.attrib[a]) + 12 for a in ("xtl", "ytl", "xbr", "ybr")]
    for a, v in zip(("xtl", "ytl", "xbr", "ybr"), new_box, strict=True):
        s.attrib[a] = f"{v:.2f}"
    doc.remove(by_id[gone])
    for shape in list(by_id[into]):  # merge: the other track's shapes join the first (keeping their attributes)
        by_id[keep].append(shape)
    doc.remove(by_id[into])
    parts = [s for s in by_id[split].findall("box")]
    cut = parts[len(parts) // 2]
    second = ET.SubElement(doc, "track", {**by_id[split].attrib, "id": "9999"})
    for shape in parts[len(parts) // 2 :]:
        by_id[split].remove(shape)
        second.append(shape)
    drawn = ET.SubElement(doc, "track", {"id": "10000", "label": "bench", "source": "manual"})
    for frame, box, outside in (
        (320, (100, 200, 160, 260), "0"),
        (344, (130, 200, 190, 262), "0"),
        (360, (130, 200, 190, 262), "1"),
    ):
        b = ET.SubElement(
            drawn,
            "box",
            {
                "frame": str(frame),
                "keyframe": "1",
                "outside": outside,
                "occluded": "0",
                "xtl": f"{box[0]:.2f}",
                "ytl": f"{box[1]:.2f}",
                "xbr": f"{box[2]:.2f}",
                "ybr": f"{box[3]:.2f}",
                "z_order": "0",
            },
        )
        ET.SubElement(b, "attribute", {"name": "instance_id"}).text = ""  # CVAT fills the default
    tree.write(xml, encoding="utf-8", xml_declaration=True)

    def t(f):
        return round(int(f) / fps, 3)

    def box(s):
        return [float(s.attrib[a]) for a in ("xtl", "ytl", "xbr", "ybr")]

    expected = [
        {"op": "rename_concept", "from": "traffic cone", "to": "pylon", "instances": [relabel]},
        {
            "op": "set_box",
            "instance": moved,
            "boxes": [
                {"time": t(shapes[mid - 1].attrib["frame"]), "box": box(shapes[mid - 1])},
                {"time": t(s.attrib["frame"]), "box": new_box},
                {"time": t(shapes[mid + 1].attrib["frame"]), "box": box(shapes[mid + 1])},
            ],
        },
        {"op": "merge", "instances": [keep, into]},
        {"op": "split_at", "instance": split, "time": t(cut.attrib["frame"])},
        {"op": "remove_instance", "instance": gone},
        {
            "op": "add_instance",
            "concept": "bench",
            "boxes": [
                {"time": 40.0, "box": [100.0, 200.0, 160.0, 260.0]},
                {"time": 43.0, "box": [130.0, 200.0, 190.0, 262.0]},
                {"time": 45.0, "outside": True},
            ],
        },
    ]
    dry = cli("fixes", "import-cvat", str(xml), "--dry-run", "--json", *common(root))
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output) == {"video_id": VID, "fixes": expected}
    done = cli("fixes", "import-cvat", str(xml), "--reviewer", "cvat-ana", *common(root))
    assert done.exit_code == 0 and f"{VID}: 6 of 6 fix ops saved" in done.output, done.output
    saved = YAML(typ="safe").load((root / "fixes" / f"{VID}.yaml").read_text())["fixes"]
    assert [{k: v for k, v in f.items() if k not in ("by", "at")} for f in saved] == expected
    assert {f["by"] for f in saved} == {"cvat-ana"}
    check = cli("fixes", "check", VID, *common(root))
    assert check.exit_code == 0 and "ok (6 fixes)" in check.output, check.output
    bad = cli("fixes", "import-cvat", str(tmp_path / "front.json"), *common(root))  # not a CVAT file
    assert bad.exit_code == 2 and "front.json" in bad.output
