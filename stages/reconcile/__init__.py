"""Cross-clip reconciliation: which clip-local instances of a view video are one object.

The paper (A.2.1) segments each 5-minute clip independently (``stages.segment``: clip-local ids)
and reconciles repeated instances across clips by hand. Here one association model proposes the
global instances, and every decision it makes is recorded with its evidence
(``schema.MERGE_DECISIONS``) for a person to confirm or overrule:

1. ``locate``: where each clip instance stands on the ground, with a covariance;
2. ``layout``: which clips revisit a place, recognised by a similarity that lays one clip's objects
   onto another's (RANSAC), accepted by an a-contrario test (fewer than one chance alignment
   expected per video);
3. ``associate``: for every pair of one concept's instances never seen together, the log odds of
   "one object" as a sum of named log-likelihood-ratio terms (position, look-alike prior,
   continuity across a cut, appearance), then per concept the partition that maximises the
   summed log odds of the pairs it joins, never joining two instances seen in one sample
   (correlation clustering: exact by integer programming where the size allows). Pairs whose
   posterior lies in the uncertain band are review items; the partition's decision stands
   meanwhile, and ``answer_impact`` says how many VOC and VOO answers the opposite one changes.

``reconcile`` runs the three and numbers the global instances by first appearance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vsi_wild.stages.pose import Track
from vsi_wild.stages.reconcile import associate as asc
from vsi_wild.stages.reconcile import locate as loc
from vsi_wild.stages.reconcile.answers import AnswerRules
from vsi_wild.stages.reconcile.associate import ASSOCIATE_PARAMS, Appearance
from vsi_wild.stages.reconcile.instances import ClipInstance, Obs, load_clip_instances, mark_occluded_bottoms
from vsi_wild.stages.reconcile.layout import align_clips
from vsi_wild.stages.reconcile.locate import Location, ground_basis, locate_instances
from vsi_wild.stages.segment import SAMPLE_STEP, ClipSpan

__all__ = [
    "ASSOCIATE_PARAMS",
    "AnswerRules",
    "Appearance",
    "ClipInstance",
    "Location",
    "Obs",
    "ReconcileParams",
    "Reconciled",
    "load_clip_instances",
    "mark_occluded_bottoms",
    "reconcile",
]


class ReconcileParams(BaseModel):
    """Reconciliation's parameters. The nine of ``associate`` (``ASSOCIATE_PARAMS``) are fitted by
    bench/fit_reconcile.py on the bench's training seeds 1-16 (six look-alikes per category, noise
    levels none and moderate pooled; docs/metadata.md), never set by hand: refit them when the
    segmenter, the pose backend or the footage changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # locate
    pixel_error: float = Field(
        1.0,
        ge=0,
        description="how far (pixels) a box edge or centre may be off, the poses' tilt included: what "
        "an instance's covariance is propagated from",
    )
    min_ray_spread_deg: float = Field(
        3.0, ge=0, description="an instance's rays must span this angle to be triangulated"
    )
    level_views: bool = Field(
        True,
        description="views are level (360° videos usually are horizon-levelled): the ground is below each "
        "camera's own down axis, whatever the drift of the estimated pitch; false: below the cameras' mean down",
    )
    use_positions: bool = Field(True, description="false: ignore the poses (only continuity across cuts links)")
    # layout
    max_false_alarms: float = Field(
        1.0,
        gt=0,
        description="a layout alignment is accepted when fewer chance alignments than this are expected "
        "in the whole video (the a-contrario test's threshold)",
    )
    # associate: fitted (bench/fit_reconcile.py)
    position_scale: float = Field(
        1.176, gt=0, description="kappa: the location errors' scale over the propagated covariances"
    )
    position_tail: float = Field(
        5.9, gt=0, description="nu: the Student-t's degrees of freedom (how heavy the location errors' tails are)"
    )
    drift_per_distance: float = Field(
        0.02024,
        ge=0,
        description="q: pose drift (standard deviation) per unit walked between the cameras that placed two positions",
    )
    prior_log_odds: float = Field(
        0.8887,
        description="b0: log odds of one object when one look-alike is expected within the match's uncertainty ellipse "
        "(with the position term, whose normalisation it carries)",
    )
    unplaced_log_odds: float = Field(
        -0.7611,
        description="bu: log odds of one object for a pair with no position term (no poses, or an instance not "
        "located) when one look-alike is in the clip: the prior is bu - log N there",
    )
    chance_alignment_log10: float = Field(
        3.269,
        description="g: a layout alignment is a chance one with probability F / (1 + F), F = 10^g x its number "
        "of false alarms (how many more chance alignments the scenes' layouts give than the a-contrario null expects)",
    )
    continuity_weight: float = Field(4.15, ge=0, description="beta: log odds per unit of box overlap across a cut")
    appearance_weight: float = Field(
        0.08053,
        ge=0,
        description="a: log odds per unit of appearance similarity (the colour histograms' Bhattacharyya "
        "coefficient, or the image embeddings' cosine: segment.appearance); fitted with the descriptor in use",
    )
    review_expected_errors: float = Field(
        0.3996,
        gt=0,
        description="c: a decision is a review item when the answers the opposite decision would change, "
        "times the probability that the decision is wrong, reach this (the answers it is expected to get wrong)",
    )
    # the solver (no model parameter)
    exact_max_instances: int = Field(
        40,
        ge=2,
        description="connected groups of up to this many instances are partitioned exactly (integer "
        "programming); larger ones by greedy contraction and single-instance moves",
    )


@dataclass
class Reconciled:
    members: list[dict]  # schema.INSTANCE_MEMBERS rows
    decisions: list[dict]  # schema.MERGE_DECISIONS rows
    observations: list[dict]  # schema.OBSERVATIONS rows
    positions: dict[int, tuple[float, float, float]]  # instance id -> world position


def walked_distance(poses: Track) -> Callable[[int, int], float]:
    """distance(k0, k1): path length of the camera between two samples (pose units)."""
    rows = poses.valid_rows()
    cum = np.concatenate(
        [[0.0], np.cumsum([np.linalg.norm(poses.C[b] - poses.C[a]) for a, b in zip(rows, rows[1:], strict=False)])]
    )
    idx = np.array([int(poses.sample_indices[i]) for i in rows])

    def distance(k0: int, k1: int) -> float:
        i0, i1 = np.searchsorted(idx, [k0, k1])
        i0, i1 = min(i0, len(cum) - 1), min(i1, len(cum) - 1)
        return float(abs(cum[i1] - cum[i0]))

    return distance


def global_instances(
    video_id: str,
    groups: Iterable[Sequence[ClipInstance]],
    poses: Track | None,
    camera_height: float | None,
    params: ReconcileParams,
) -> tuple[list[dict], list[dict], dict[int, tuple[float, float, float]]]:
    """Number the groups by first appearance: their members, merged observations and positions."""
    ordered = sorted(
        (list(g) for g in groups), key=lambda g: (min(c.first_time for c in g), g[0].concept, min(c.key for c in g))
    )
    members: list[dict[str, Any]] = []
    observations: list[dict[str, Any]] = []
    positions: dict[int, tuple[float, float, float]] = {}
    for gid, g in enumerate(ordered, start=1):
        merged_samples: dict[int, Obs] = {}
        for ci in sorted(g, key=lambda c: c.key):
            members.append(
                {
                    "video_id": video_id,
                    "instance_id": gid,
                    "concept": ci.concept,
                    "clip_index": ci.clip,
                    "local_id": ci.local,
                    "first_time": ci.first_time,
                    "last_time": ci.last_time,
                }
            )
            merged_samples.update(ci.samples)
        for k, o in sorted(merged_samples.items()):
            observations.append(
                {
                    "video_id": video_id,
                    "instance_id": gid,
                    "concept": g[0].concept,
                    "sample_index": k,
                    "time": o.time,
                    "frame": o.frame,
                    "fps": o.fps,
                    "x0": o.box[0],
                    "y0": o.box[1],
                    "x1": o.box[2],
                    "y1": o.box[3],
                    "area": o.area,
                    "origin": "auto",
                }
            )
        if poses is not None:
            found = loc.locate(merged_samples, poses, camera_height, params.min_ray_spread_deg, params.level_views)
            if found is not None:
                positions[gid] = cast(tuple[float, float, float], tuple(float(x) for x in found[0]))  # a 3-vector
    return members, observations, positions


def default_rules(clips: Sequence[ClipSpan]) -> AnswerRules:
    """Answer rules from the clips' extent and the qa stage's defaults (callers that know the view's
    duration and the qa section pass their own)."""
    from vsi_wild.stages.qa.params import QAParams

    qa = QAParams()
    end = max((c.first_sample + c.n_samples for c in clips), default=1) * SAMPLE_STEP
    return AnswerRules(end, qa.checkpoint_s, qa.voo_readings[0].min_visible_s)


def prepare(
    instances: Sequence[ClipInstance], params: ReconcileParams, poses: Track | None, camera_height: float | None
) -> tuple[dict, Callable[[int, int], float] | None]:
    """Locate the instances (in place: ``ClipInstance.where``) and align the clips' layouts: the
    alignments and the walked-distance function ``associate`` reads (none without poses)."""
    for ci in instances:  # an earlier call's places must not stay
        ci.where = None
    mark_occluded_bottoms(ci.samples for ci in instances)
    if poses is None or not (params.use_positions and poses.valid.any()):
        return {}, None
    locate_instances(
        instances,
        poses,
        ground_basis(poses),
        camera_height,
        params.min_ray_spread_deg,
        params.pixel_error,
        params.level_views,
    )
    return align_clips(instances, params.max_false_alarms), walked_distance(poses)


def reconcile(
    video_id: str,
    instances: list[ClipInstance],
    clips: Sequence[ClipSpan],
    params: ReconcileParams,
    poses: Track | None = None,
    camera_height: float | None = None,
    rules: AnswerRules | None = None,
    appearance: Appearance = "histogram",
) -> Reconciled:
    """Link clip-local instances into global instances (the module docstring). ``camera_height``:
    the camera's height above the ground in the poses' units (instances are then located where
    they meet the ground); ``rules``: what the qa stage's answers read (``default_rules``: the
    qa section's defaults), for each decision's ``answer_impact``; ``appearance``: what the
    appearance term compares (the colour histograms, or the instances' image embeddings)."""
    if poses is not None and not (params.use_positions and poses.valid.any()):
        poses = None
    instances = sorted(instances, key=lambda c: c.key)
    alignments, walked = prepare(instances, params, poses, camera_height)
    groups, decided = asc.associate(
        instances,
        alignments,
        walked,
        params,
        rules or default_rules(clips),
        params.exact_max_instances,
        appearance=appearance,
    )
    members, observations, positions = global_instances(video_id, groups, poses, camera_height, params)
    rows = sorted(
        (d.row(video_id) for d in decided),
        key=lambda r: (r["concept"], r["clip_a"], r["local_a"], r["clip_b"], r["local_b"]),
    )
    return Reconciled(members, rows, observations, positions)
