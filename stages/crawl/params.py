"""The `crawl` config section: what to search for, what a download produces, how to talk to YouTube."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from vsi_wild import ids

# The paper's 8 scene categories, exactly as the benchmark names them.
SCENE_CATEGORIES: tuple[str, ...] = (
    "culture & entertainment",
    "industry",
    "medical",
    "office & education",
    "residential space",
    "retail space",
    "street view",
    "transportation hubs",
)

# Where a relative path of the config resolves when it is not found from the working folder.
HOME_ENV = "VSI_WILD_HOME"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchParams(StrictModel):
    """What to search for and which results to keep (the `search` stage's cache key)."""

    queries_file: str = Field(
        "configs/queries.yaml", description="the query table (relative: to the working folder, then the project folder)"
    )
    categories: list[str] = Field(default_factory=lambda: list(SCENE_CATEGORIES), description="categories to search")
    languages: list[str] = Field(
        default_factory=lambda: ["en"], description="languages of the table to use; ['*'] = all"
    )
    cues: list[str] | None = Field(None, description="only these panorama cues (default: the table's)")
    max_queries: int | None = Field(None, ge=1, description="cap on the number of queries (trial runs)")
    results_per_query: int = Field(20, ge=1, le=500, description="N of ytsearchN:")
    expander: str | None = Field(
        None, description="query expansion plugin 'module:factory' (an MLLM in the paper); none by default"
    )
    expander_options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the factory")
    min_duration_s: float = Field(60.0, ge=0, description="shorter results are rejected")
    max_duration_s: float = Field(5 * 3600.0, gt=0, description="longer results are rejected")
    min_height: int = Field(1920, ge=0, description="minimum height of the best video format (4K equirect = 1920)")
    require_360: bool = Field(True, description="reject results without 360° evidence")
    allow_stereo: bool = Field(False, description="keep stereoscopic (top-bottom) 360° videos")
    reject_live: bool = True
    reject_shorts: bool = True

    @field_validator("categories")
    @classmethod
    def _known_categories(cls, v: list[str]) -> list[str]:
        bad = [c for c in v if c not in SCENE_CATEGORIES]
        if bad:
            raise ValueError(f"unknown categories {bad}; expected some of {list(SCENE_CATEGORIES)}")
        return v


class DownloadParams(StrictModel):
    """What a download produces (the `download` stage's cache key)."""

    max_height: int = Field(2880, ge=144, description="best format up to this height (5.7K equirect = 2880)")
    audio: bool = Field(True, description="keep an audio track")
    format: str | None = Field(None, description="a yt-dlp format selector; overrides max_height/audio")
    merge_output_format: str = Field("mp4/mkv", description="container of merged video+audio")


class NetParams(StrictModel):
    """How yt-dlp talks to the network. Not part of any cache key: it changes how, not what."""

    cookies_file: str | None = Field(None, description="Netscape cookies.txt (for gated videos and bot checks)")
    proxy: str | None = Field(None, description="http/socks proxy URL; '' forces a direct connection")
    min_interval_s: float = Field(2.0, ge=0, description="at least this long between two YouTube operations")
    sleep_requests_s: float = Field(1.0, ge=0, description="yt-dlp's sleep between requests of one extraction")
    sleep_before_download_s: float = Field(5.0, ge=0, description="yt-dlp's sleep before each download (min)")
    max_sleep_before_download_s: float = Field(15.0, ge=0, description="... (max; a random wait in between)")
    rate_limit: str | None = Field("10M", description="download bandwidth limit in bytes/s ('10M'); none = unlimited")
    socket_timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0, description="yt-dlp's own retries (http, fragments, extractor)")
    unit_retries: int = Field(2, ge=0, description="whole-unit retries after a network error")
    backoff_s: float = Field(10.0, ge=0, description="first retry wait; doubles each retry")
    max_backoff_s: float = Field(300.0, ge=0)
    max_consecutive_rate_limits: int = Field(
        2, ge=1, description="after this many rate-limited units in a row, stop contacting YouTube in this run"
    )
    max_consecutive_unreachable: int = Field(
        6,
        ge=1,
        description="after this many operations in a row that never reached YouTube (its name did not resolve, "
        "no route, refused: the machine is offline), stop contacting it in this run (6: two ids at unit_retries 2)",
    )
    max_concurrent: int = Field(1, ge=1, description="YouTube operations at once in one process")
    archive: str | None = Field(
        "crawl/archive.txt", description="yt-dlp download archive (relative: under the data root); none = off"
    )
    extractors: list[str] = Field(
        default_factory=list,
        description="extra yt-dlp InfoExtractor classes 'module:Class'; one with the key of a built-in replaces it",
    )
    extractor_args: dict[str, dict[str, list[str]]] = Field(
        default_factory=dict, description="yt-dlp extractor_args, e.g. {youtube: {player_client: [web]}}"
    )
    enable_file_urls: bool = Field(False, description="allow file:// media URLs (tests, local mirrors)")
    js_runtimes: dict[str, dict[str, str]] | None = Field(
        None,
        description="yt-dlp JavaScript runtimes for YouTube's challenges, e.g. {deno: {path: /usr/bin/deno}}; "
        "none = yt-dlp's default (deno on the PATH)",
    )
    remote_components: list[str] = Field(
        default_factory=list, description="components yt-dlp may fetch when missing, e.g. ['ejs:github']"
    )


class CrawlParams(StrictModel):
    """The `crawl` config section: search (keyed), download (keyed), net (not keyed), and which ids."""

    enabled: bool = Field(False, description="search YouTube in full runs too (`vsi-wild crawl` always does)")
    release_file: str | None = Field(
        None, description="download exactly the YouTube ids of this release QA file (jsonl) instead of searching"
    )
    ids: list[str] = Field(default_factory=list, description="download exactly these YouTube ids (with release_file)")
    search: SearchParams = SearchParams()
    download: DownloadParams = DownloadParams()
    net: NetParams = NetParams()

    @field_validator("ids")
    @classmethod
    def _youtube_ids(cls, v: list[str]) -> list[str]:
        for i in v:
            if not ids.YOUTUBE_ID.match(i):
                raise ValueError(f"not a YouTube id: {i!r} (11 characters of [A-Za-z0-9_-])")
        return v


def project_home() -> Path:
    """The project folder (``configs/``): ``$VSI_WILD_HOME``, else the repo checkout this code runs
    from (an editable install: the folder with pyproject.toml above ``stages/``), else the working
    folder. Installed, the package's own folder is never it: it holds no configs."""
    if home := os.environ.get(HOME_ENV):
        return Path(home).expanduser()
    checkout = Path(__file__).resolve().parents[2]
    return checkout if (checkout / "pyproject.toml").is_file() else Path.cwd()


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """A config-relative path: as given (absolute or from the working folder), else from the project folder."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return project_home() / p
