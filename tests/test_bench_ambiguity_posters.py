"""bench_ambiguity's poster landmarks (``Posters``): the sample's world built again with every poster's
quad labelled, the fixed views' sightings and a rotated view's render agreeing with each other."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from conftest import load_bench

from vsi_wild.config import load_config
from vsi_wild.stages.sample.world import QUAD, build_world


def test_every_placed_poster_is_labelled_and_a_view_turned_to_one_shows_it() -> None:
    amb = load_bench("bench_ambiguity")
    sample = load_config("configs/sample.yaml").sample
    world = build_world(sample.seed, sample.route, sample.n_per_category, sample.faces)
    poster_tex = {world.atlas.index(n) for n in world.atlas.names if n.startswith("poster")}
    placed = sum(
        1 for k in range(len(world.ptype)) if world.ptype[k] == QUAD and world.mtex[world.pmat[k, 0]] in poster_tex
    )
    poses = []
    for k in range(0, 41):  # the walk's first 20 s at 2 FPS
        x, y, z, yaw = world.route.pose(sample.route_offset_s + k / 2)
        poses.append({"time": k / 2, "x": x, "y": y, "z": z, "yaw_deg": yaw})
    truth = SimpleNamespace(size=(320, 180), poses=poses, pose_at=lambda t: poses[round(t * 2)])
    posters = amb.Posters(sample, truth)
    labels = posters.renderer.w.plabel
    assert placed > 0 and int(np.sum(labels >= amb.Posters.LABEL)) == placed  # each placed poster, and nothing else
    seen = {lab: times for per in posters.seen.values() for lab, times in per.items()}
    assert seen, "no poster in the walk's first 20 s of any view"
    # a view turned to where a fixed view saw a poster most shows it: the fixed view's own yaw
    view, lab, t = max(
        ((v, lab, t) for v, per in posters.seen.items() for lab, ts in per.items() for t in ts),
        key=lambda x: posters._labels(
            posters.camera.view(320, 180, 90.0, amb.VIEW_YAW[x[0]]), poses[round(x[2] * 2)]
        ).get(x[1], 0),
    )
    assert lab in posters.shown(t, amb.VIEW_YAW[view], 90.0)
    assert lab not in posters.shown(t, amb.VIEW_YAW[view] + 180.0, 90.0)  # turned away: not shown
