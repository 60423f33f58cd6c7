"""Parameters of a generated sample: a synthetic 360° walk with complete ground truth."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SampleParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source_id: str = Field("sample-walk", pattern=r"^sample-[a-z0-9][a-z0-9-]{0,62}$")
    seed: int = 0
    duration_s: float = Field(120.0, gt=0, description="length of the walk")
    width: int = Field(1280, ge=64, description="equirectangular width (height = width / 2)")
    fps: float = Field(8.0, gt=0)
    route: Literal["loop", "short"] = Field("loop", description="named route through the places")
    n_per_category: int = Field(4, ge=1, description="instances per object category")
    faces: int = Field(1, ge=0, description="face photographs placed in the world")
    crf: int = Field(18, ge=0, le=51, description="x264 quality of the rendered video")
    truth_view_width: int = Field(640, description="resolution of the per-view ground truth")
    truth_view_height: int = Field(360)
    truth_hfov_deg: float = 90.0

    @property
    def height(self) -> int:
        return self.width // 2
