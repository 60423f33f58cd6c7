"""Parameters of a generated sample: a synthetic 360° walk with complete ground truth."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SampleParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source_id: str = Field("sample-walk", pattern=r"^sample-[a-z0-9][a-z0-9-]{0,62}$")
    seed: int = Field(0, description="textures, posters and object placement; the same seed gives the same bytes")
    duration_s: float = Field(120.0, gt=0, description="length of the walk (a closed route loops past its end)")
    width: int = Field(1280, ge=64, description="equirectangular width (height = width / 2), a multiple of 4")
    fps: float = Field(8.0, gt=0, le=60)
    route: Literal["loop", "short"] = Field(
        "loop",
        description="loop: 120 s plaza-street-hall-corridor-plaza (every motion direction, pauses, a "
        "revisit); short: 56 s plaza-street-plaza",
    )
    route_offset_s: float = Field(0.0, ge=0, description="start this far into the route (tests cut a window)")
    n_per_category: int | None = Field(
        None,
        ge=1,
        le=10,
        description="instances per object category (6 categories, half of each in the plaza); "
        "None: the default layout (world.DEFAULT_LAYOUT: 2-8 per category, placed so that the sample exercises "
        "every QA rule)",
    )
    faces: int = Field(1, ge=0, le=3, description="face photographs placed in the world (slot 0: the hall)")
    crf: int = Field(23, ge=0, le=51, description="x264 quality (23: ~28 MB for the default 2 min)")
    x264_preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow"] = "veryfast"
    gop_s: float = Field(2.0, gt=0, description="keyframe interval (seconds)")
    encoder_threads: int = Field(2, ge=1, le=16, description="fixed, so that the same parameters give the same bytes")
    render_threads: int | None = Field(None, ge=1, description="numba threads (None: numba's default)")
    supersample: int = Field(1, ge=1, le=3, description="render at k x k rays per pixel and average (anti-aliasing)")
    truth_view_width: int = Field(640, ge=16, description="resolution of the per-view ground truth")
    truth_view_height: int = Field(360, ge=16)
    truth_hfov_deg: float = Field(90.0, gt=0, lt=180)

    @field_validator("width")
    @classmethod
    def _even_height(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"width must be a multiple of 4 (H.264 4:2:0 needs an even height), got {v}")
        return v

    @property
    def height(self) -> int:
        return self.width // 2
