"""The view_pose stage opens one decoding feed per view, each named after its own view (the threads
show in a stack dump or a profile as ``feed-<view>``). The feeds are made in a comprehension
(``_view_inputs``, the pose stage's too) and opened later, inside ``estimate_views``: each must hold its
own view, not the comprehension's last one."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from vsi_wild.schema import VIEWS_FILE
from vsi_wild.stages import pose as po
from vsi_wild.tasks import metadata as tm


class Opened(Exception):
    """Stops the stage once every feed is opened: this test needs nothing after."""


def test_each_view_feed_decodes_and_is_named_for_its_own_view(monkeypatch) -> None:
    views = ["front", "right", "back", "left"]
    table = pa.Table.from_pylist(
        [
            {
                "view": v,
                "video_id": f"src_{v}",
                "yaw_deg": 90.0 * i,
                "hfov_deg": 90.0,
                "fps": 30.0,
                "width": 64,
                "path": f"src/{v}.mp4",
            }
            for i, v in enumerate(views)
        ]
    )
    opened: list[tuple[str, str]] = []
    monkeypatch.setattr(tm, "sampled_frames", lambda path, fps, max_width=None: iter([str(path)]))
    monkeypatch.setattr(tm, "prefetched", lambda items, depth, name: opened.append((next(items), name)) or iter(()))

    def estimate_views(inputs, make_estimator, params, progress):
        for vi in inputs.values():
            vi.frames()  # opened after the comprehension that made them
        raise Opened

    monkeypatch.setattr(po, "estimate_views", estimate_views)
    job = SimpleNamespace(
        config=SimpleNamespace(pose=po.PoseParams()),
        read=lambda stage, name: table if (stage, name) == ("project", VIEWS_FILE) else None,
        file=lambda stage, path: f"/root/{stage}/{path}",
    )
    with pytest.raises(Opened):
        tm.run_view_pose(job)
    wanted = [v for v in po.PoseParams().views if v in views]
    assert opened == [(f"/root/project/src/{v}.mp4", f"feed-{v}") for v in wanted]
