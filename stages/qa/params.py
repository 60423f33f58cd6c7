"""Parameters of the rule-based QA generation (config section ``qa``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# "Seen clearly": a mask of 50 pixels in a 640x360 view (a 7x7 patch), as a fraction of the view's
# pixels so that it means the same at any view size.
CLEAR_AREA_FRAC = 50 / (640 * 360)


class Sighting(BaseModel):
    """One reading of "I saw it": what a viewer takes as having seen an object at some moment.

    A timestamp of the visibility track counts when the instance's mask covers at least
    ``min_area_frac`` of the view; a sighting is a run of such 2 FPS timestamps without a break at
    least ``min_visible_s`` long (0.5 s per timestamp; 0: one frame suffices)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="how skipped rows and the report name the reading")
    min_area_frac: float = Field(
        0.0,
        ge=0,
        le=1,
        description="mask area / view area in one frame (0: any mask "
        "the metadata has, i.e. what segment.min_area keeps)",
    )
    min_visible_s: float = Field(0.0, ge=0, description="visible without a break at least this long")


class QAParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(0, description="every random choice is seeded by hash(seed, video, task, index)")
    clip_seconds: float = Field(
        300.0,
        gt=0,
        description="the paper's clip length: VMR asks one question per clip; the default VOC checkpoint interval",
    )

    # One right answer (stages/qa/readings.py): a question is asked only when its answer is the same
    # under every reading below; the first reading of each list gives the answer.
    stable_answers: bool = Field(
        True,
        description="ask a question only when its answer holds under every reading (VOC, VOO: the "
        "sightings below; VMR: a viewer's misjudgement over the evidence window; VPO: another visit of an "
        "anchor's place, and what each rotated view shows); off: the first reading alone, unchecked",
    )

    # VMR
    vmr_evidence_s: float = Field(
        1.0,
        ge=0,
        description="half-width of the pose window the motion direction was measured on: "
        "evidence [pivot - w, pivot + w], query time pivot + w",
    )
    vmr_judgement_deg: float = Field(
        5.0,
        ge=0,
        lt=22.5,
        description="a viewer may judge the direction of motion this far off (a reading: "
        "the answer must hold for every direction within it, at every moment of the evidence window)",
    )
    vmr_angle_error_deg: float = Field(
        5.0,
        ge=0,
        lt=22.5,
        description="the metadata's direction may be this far from the true one (the CPU pose "
        "backend's bench target is a 10 degree median over all moving moments, steady stretches are far better): "
        "the direction keeps judgement + error from its sector's edges",
    )

    # VPO
    vpo_per_video: int = Field(3, ge=0, description="VPO questions per view video")
    vpo_min_gap_s: float = Field(30.0, ge=0, description="any two anchors at least this far apart in time")
    vpo_min_position_frac: float = Field(
        0.1,
        ge=0,
        description="where poses exist, any two anchors at least this fraction of the "
        "trajectory's extent (its diameter: the largest distance between two of its ground positions) apart on the "
        "ground plane (heights drift); scale-free, "
        "as pose scale is arbitrary",
    )
    vpo_drift_per_distance: float = Field(
        0.05,
        ge=0,
        description="... plus this fraction of the path walked between them (pose drift grows with "
        "it: a loop's end can seem metres from its start); 0: the place condition as it is",
    )
    vpo_visit_error_frac: float = Field(
        0.02,
        ge=0,
        description="with stable_answers, how far the metadata's distance between two moments may be off, a "
        "fraction of the trajectory's extent: the walk is maybe back at a place within the place radius plus "
        "this, surely still there within the radius minus this (stages/qa/vpo.py other_visits). 0.02: the p95 "
        "of the error on the training renders' closed tracks, 0.0188 (bench/pose_track_error.py "
        "place_distance_error_frac, pairs half to twice the radius apart)",
    )
    vpo_edge_margin_s: float = Field(1.0, ge=0, description="no anchor closer than this to either end")
    vpo_offset_min_deg: float = Field(30.0, ge=0, le=180)
    vpo_offset_max_deg: float = Field(60.0, ge=0, le=180)
    vpo_pitch_deg: float = 0.0
    vpo_attempts: int = Field(64, ge=1, description="random restarts when searching anchor sets")
    vpo_min_landmarks: int = Field(
        0,
        ge=0,
        description="with stable_answers, each rotated view shows at least this many objects that tie it to its "
        "anchor (stages/qa/vpo.py ViewContent): predicted clearly in the view, seen by the video only between the "
        "anchors before and after it, and in no other view of the question; 0: not checked. Off by default: on "
        "the sample the metadata's objects are too sparse to tie most views (README, 'one right answer')",
    )
    vpo_rotation_attempts: int = Field(
        4,
        ge=0,
        description="a view that does not show its place is turned the other way, then to this many further "
        "seeded offsets, before its anchor set is given up",
    )
    image_width: int | None = Field(None, ge=16, description="rendered VPO views; None = the view's size")
    image_height: int | None = Field(None, ge=16)
    image_format: Literal["jpg", "png"] = "jpg"
    jpeg_quality: int = Field(95, ge=1, le=100)

    # VOO
    voo_first: int = Field(5, ge=0, description="first-appearance questions per view video")
    voo_last: int = Field(5, ge=0, description="last-appearance questions per view video")
    voo_min_gap_s: float = Field(2.0, ge=0, description="the 4 concepts' times pairwise at least this far apart")
    voo_readings: tuple[Sighting, ...] = Field(
        (Sighting(name="sustained", min_visible_s=1.0), Sighting(name="glimpse", min_area_frac=CLEAR_AREA_FRAC)),
        min_length=1,
        description="what counts as an appearance: sustained, 1 s visible without a break (a "
        "one-frame glimpse does not reorder the answer); glimpse, one frame seen clearly (a viewer who saw a "
        "hydrant clearly for half a second says it appeared then). The order, and voo_min_gap_s between "
        "consecutive appearances, must hold under each",
    )

    # VOC
    voc_checkpoint_s: float | None = Field(None, gt=0, description="streaming checkpoint interval; None = clip_seconds")
    voc_max_per_video: int | None = Field(
        None, ge=1, description="cap on VOC concepts per view video (seeded choice); None = all retained"
    )
    voc_readings: tuple[Sighting, ...] = Field(
        (Sighting(name="at all"), Sighting(name="clearly", min_area_frac=CLEAR_AREA_FRAC)),
        min_length=1,
        description="what makes an instance count: seen at all (any mask), or seen clearly at "
        "least once (50 px of a 640x360 view). A count is asked only where both give it: every counted "
        "instance is seen clearly, and no other is seen at all",
    )
    voc_checkpoint_shift: float = Field(
        0.25,
        ge=0,
        lt=0.5,
        description="a streaming checkpoint whose count differs between readings moves to the "
        "nearest 2 FPS moment where it does not, at most this fraction of the checkpoint interval away (else "
        "it is not asked)",
    )
    provisional_risk: float = Field(
        0.05,
        gt=0,
        le=1,
        description="the probability of a wrong answer at or above which a VOC question says it is provisional "
        "(stages/qa/provisional.py: the sum, over the unreviewed reconciliation decisions whose reversal would "
        "change its answer, of each one's probability of being wrong). 0.05: an answer exported as settled is, "
        "by reconciliation's own posteriors, at least 95 % likely right, the share of right VOC answers the "
        "benchmark asks for; a question with a review item is provisional whatever its risk",
    )

    # answer distributions (export: the selection is global, over every video of a task)
    max_answer_ratio: float = Field(
        1.5,
        ge=1.0,
        description="MC: within a task and subtype, no option text is the correct one of more than "
        "this multiple of the uniform share (1 / the number of distinct option texts there); the export drops "
        "questions of an over-represented text (seeded) until the bound holds",
    )
    answer_balance_min_n: int = Field(
        20,
        ge=1,
        description="a task/subtype (or VOC concept) group of fewer questions is not balanced: too few "
        "to carry a shortcut, and any bound would drop most of them",
    )
    voc_max_answer_share: float = Field(
        1 / 3,
        gt=0,
        le=1,
        description="VOC: no count is the answer of more than this share of the questions, "
        "over the task and within each concept (the per-concept median prior); enforced as max_answer_ratio is",
    )

    # difficulty strata (seed 002's near / medium / far bins): [near | medium edge, medium | far edge]
    voo_gap_bins_s: tuple[float, float] = Field(
        (10.0, 60.0), description="VOO: the smallest gap between the 4 ordered appearances -> near / medium / far"
    )
    vpo_gap_bins_s: tuple[float, float] = Field(
        (60.0, 180.0), description="VPO: the smallest gap between the 4 anchors in time -> near / medium / far"
    )
    voc_since_new_bins_s: tuple[float, float] = Field(
        (30.0, 120.0), description="VOC: seconds from the last new instance to the query time -> near / medium / far"
    )
    vmr_since_turn_bins_s: tuple[float, float] = Field(
        (10.0, 60.0),
        description="VMR: seconds from the last turn (or stop) to the queried moment -> near / medium / far",
    )
    vmr_turn_deg: float = Field(
        45.0, gt=0, le=180, description="VMR: a change of the travel direction by more than this is a turn"
    )
    horizon_edges: tuple[float, float] = Field(
        (1 / 3, 2 / 3), description="query time / video duration -> early / middle / late (the video's horizon)"
    )

    # invariance splits (export)
    repeat_times: list[int] = Field(default_factory=lambda: [2, 3, 4, 5], description="VOC-Repeat factors")
    repeat_materialize: bool = Field(
        True, description="write the repeated videos (stream copy); off: only the rows and ffconcat lists"
    )

    # human review (`review_question` fixes, docs/fixes.md)
    require_reviewed: bool = Field(
        False,
        description="export only questions a person accepted, with the answers they accepted (a rejected one is "
        "never asked)",
    )
    require_verified_videos: bool = Field(
        False,
        description="export only videos whose temporal metadata a person marked verified in `vsi-wild "
        "verify` (and of their VMR questions, those of motion clips marked verified)",
    )

    # text leak probe (export; stages/leak_probe.py)
    debias_text: bool = Field(
        False,
        description="drop the questions the text-only probe answers best, retraining after each round, until "
        "the probe is at chance (or its lead over chance is not significant); the dropped ones are listed in "
        "text_debias.parquet and the report",
    )
    debias_text_margin: float = Field(
        0.05,
        ge=0,
        description="stop once the probe's accuracy (VOC: its MRA) is at most this far above chance "
        "(VOC: the best constant answer)",
    )
    debias_text_step: float = Field(
        0.05, gt=0, le=1, description="fraction of a task's remaining questions dropped per round (at least one)"
    )

    @model_validator(mode="after")
    def _check(self) -> QAParams:
        if self.vpo_offset_min_deg > self.vpo_offset_max_deg:
            raise ValueError("vpo_offset_min_deg must not exceed vpo_offset_max_deg")
        if 0 < self.vpo_min_position_frac <= self.vpo_visit_error_frac:
            raise ValueError(
                f"vpo_visit_error_frac ({self.vpo_visit_error_frac:g}) must be below vpo_min_position_frac "
                f"({self.vpo_min_position_frac:g}): a camera is surely at its place within the radius less the "
                "error, and with nothing left its own visit is its one moment"
            )
        if (self.image_width is None) != (self.image_height is None):
            raise ValueError("set both image_width and image_height, or neither")
        for name in (
            "voo_gap_bins_s",
            "vpo_gap_bins_s",
            "voc_since_new_bins_s",
            "vmr_since_turn_bins_s",
            "horizon_edges",
        ):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"{name}: edges must satisfy 0 <= first <= second, got [{lo}, {hi}]")
        if self.horizon_edges[1] > 1:
            raise ValueError("horizon_edges are fractions of the video's duration (at most 1)")
        if any(k < 2 for k in self.repeat_times):
            raise ValueError("repeat_times are factors >= 2")
        return self

    @property
    def checkpoint_s(self) -> float:
        return self.voc_checkpoint_s if self.voc_checkpoint_s is not None else self.clip_seconds
