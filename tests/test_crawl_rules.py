"""The crawl's rules without yt-dlp's network: queries, the release file, 360° evidence, filters,
failure classes of yt-dlp's messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vsi_wild.config import Config, load_config
from vsi_wild.errors import UnitError
from vsi_wild.stages import crawl

RELEASE = Path("/work/shared/reference/vsi_super_wild_qa.jsonl")
REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ queries


def test_query_table_covers_every_category_in_every_language():
    table = crawl.load_query_table(REPO / "configs" / "queries.yaml")
    assert len(table.languages) >= 6
    for lang, lq in table.languages.items():
        assert set(lq.categories) == set(crawl.SCENE_CATEGORIES), lang
        assert all(terms for terms in lq.categories.values()), lang
        assert lq.cues, lang


def test_queries_are_cue_x_term_with_category_and_language(tmp_path):
    p = tmp_path / "q.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "languages": {
                    "en": {
                        "cues": ["360°", "VR"],
                        "categories": {"street view": ["city walk", "old town"], "medical": ["hospital"]},
                    },
                    "ja": {"template": "{term} {cue}", "cues": ["360度"], "categories": {"street view": ["街歩き"]}},
                }
            },
            allow_unicode=True,
        )
    )
    params = crawl.SearchParams(queries_file=str(p), languages=["*"])
    qs = crawl.queries_for(params)
    got = {(q.text, q.category, q.language) for q in qs}
    assert got == {
        ("360° city walk", "street view", "en"),
        ("VR city walk", "street view", "en"),
        ("360° old town", "street view", "en"),
        ("VR old town", "street view", "en"),
        ("360° hospital", "medical", "en"),
        ("VR hospital", "medical", "en"),
        ("街歩き 360度", "street view", "ja"),
    }
    only = crawl.queries_for(params.model_copy(update={"categories": ["medical"], "cues": ["VR"], "languages": ["en"]}))
    assert [(q.text, q.category) for q in only] == [("VR hospital", "medical")]
    assert len(crawl.queries_for(params.model_copy(update={"max_queries": 3}))) == 3


def test_query_table_errors_name_the_key(tmp_path):
    p = tmp_path / "q.yaml"
    p.write_text(yaml.safe_dump({"languages": {"en": {"cues": ["360"], "categories": {"streetview": ["walk"]}}}}))
    with pytest.raises(UnitError, match=r"languages\.en\.categories: unknown categories \['streetview'\]"):
        crawl.load_query_table(p)
    p.write_text(yaml.safe_dump({"languages": {"en": {"categories": {"medical": ["x"]}}}}))
    with pytest.raises(UnitError, match=r"languages\.en\.cues"):
        crawl.load_query_table(p)
    with pytest.raises(UnitError, match="not in the query table"):
        crawl.build_queries(
            crawl.load_query_table(REPO / "configs" / "queries.yaml"), crawl.SearchParams(languages=["xx"])
        )


class VariantExpander:
    """A query-expansion plugin (stands where the paper's MLLM does): adds 'walking tour' variants
    and one Italian query, returning a dict for one of them (plugins may)."""

    name = "variants"

    def __init__(self, suffix: str = "walking tour"):
        self.suffix = suffix

    def expand(self, queries):
        for q in queries:
            yield crawl.Query(f"{q.term} {self.suffix} {q.cue}", q.category, q.language)
        yield {"text": "360° passeggiata in città", "category": "street view", "language": "it"}


def make_expander(**kw):
    return VariantExpander(**kw)


class BadExpander:
    name = "bad"

    def expand(self, queries):
        return [crawl.Query("360 somewhere", "outer space", "en")]


def make_bad():
    return BadExpander()


def test_expander_plugin_adds_queries_that_keep_category_and_language(tmp_path):
    params = crawl.SearchParams(
        categories=["medical"], cues=["360°"], expander=f"{__name__}:make_expander", expander_options={"suffix": "tour"}
    )
    qs = crawl.queries_for(params)
    table = [q for q in qs if q.origin == "table"]
    extra = [q for q in qs if q.origin == "expander:variants"]
    assert table and len(extra) == len(table) + 1
    assert ("hospital tour tour 360°", "medical", "en") in {(q.text, q.category, q.language) for q in extra}
    assert ("360° passeggiata in città", "street view", "it") in {(q.text, q.category, q.language) for q in extra}
    with pytest.raises(UnitError, match="scene categories"):
        crawl.queries_for(params.model_copy(update={"expander": f"{__name__}:make_bad", "expander_options": {}}))


def test_no_network_model_by_default():
    assert Config().crawl.search.expander is None
    assert Config().crawl.enabled is False  # a full run does not crawl unless asked


# ------------------------------------------------------------------------------------ release


@pytest.mark.skipif(not RELEASE.is_file(), reason="reference release file not present")
def test_release_ids_are_the_113_sources_of_the_442_videos():
    got = crawl.release_ids(RELEASE)
    names = {json.loads(line)["video_name"] for line in RELEASE.open()}
    assert len(names) == 442
    expected = sorted({n[: -len(".mp4")].rsplit("_", 1)[0] for n in names})
    assert got == expected and len(got) == 113
    assert "-lg61evVFn4" in got  # ids may start with '-': never passed through a shell


def test_release_file_errors_name_the_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"video_name": "Z7ta3z5qcMA_back.mp4"}\n\n{"video_name": "Z7ta3z5qcMA_up.mp4"}\n')
    with pytest.raises(UnitError, match=r"r\.jsonl:3:"):
        crawl.release_ids(p)
    p.write_text('{"video_name": "Z7ta3z5qcMA_back.mp4"}\nnot json\n')
    with pytest.raises(UnitError, match=r"r\.jsonl:2:"):
        crawl.release_ids(p)


# ------------------------------------------------------------------------------------ 360° and filters


def _info(w, h, note="", **kw):
    return {
        "id": "x",
        "duration": 600,
        "formats": [{"format_id": "1", "width": w, "height": h, "vcodec": "vp9", "format_note": note}],
        **kw,
    }


@pytest.mark.parametrize(
    "info,spherical,kind,key",
    [
        (_info(3840, 1920, "1920p, equirectangular"), None, "equirectangular", "format_note"),
        (
            _info(3840, 3840, "2160p60, equirectangular_threed_top_bottom"),
            None,
            "equirectangular_stereo",
            "format_note",
        ),
        (_info(3840, 2160, "2160p, mesh"), None, "mesh", "format_note"),
        (_info(3840, 2160), {"projection": "equirectangular"}, "equirectangular", "spherical"),
        (_info(4096, 2048), None, "equirectangular", "aspect"),
        (_info(1920, 1080), None, "flat", "aspect"),
        ({"id": "x"}, None, "unknown", None),
    ],
)
def test_projection_evidence(info, spherical, kind, key):
    p = crawl.detect_projection(info, spherical)
    assert p.kind == kind
    if key:
        assert key in p.evidence


def test_filters_give_reasons():
    params = crawl.SearchParams(min_height=1920, min_duration_s=60, max_duration_s=3600)
    ok = _info(3840, 1920, "equirectangular")
    assert crawl.reject_reason(ok, params) is None
    assert "too short" in crawl.reject_reason({**ok, "duration": 30}, params)
    assert "too long" in crawl.reject_reason({**ok, "duration": 7200}, params)
    assert "live" in crawl.reject_reason({**ok, "live_status": "is_live"}, params)
    assert "live" in crawl.reject_reason({**ok, "live_status": "is_upcoming"}, params)
    assert crawl.reject_reason({**ok, "live_status": "was_live"}, params) is None  # a finished stream is a video
    assert crawl.reject_reason({**ok, "media_type": "short"}, params) == "a short"
    assert crawl.reject_reason({**ok, "webpage_url": "https://www.youtube.com/shorts/abcdefghijk"}, params) == "a short"
    assert "resolution too low" in crawl.reject_reason(_info(2560, 1280, "equirectangular"), params)
    assert "no 360° evidence" in crawl.reject_reason(_info(3840, 2160), params)
    assert "stereoscopic" in crawl.reject_reason(_info(3840, 3840, "equirectangular_threed_top_bottom"), params)
    assert crawl.reject_reason(_info(3840, 2160), params.model_copy(update={"require_360": False})) is None
    # before the full info: a flat search entry is rejected only on what it shows
    assert crawl.prefilter({"duration": 10}, params).startswith("too short")
    assert crawl.prefilter({"duration": None, "title": "x"}, params) is None


def test_format_selector_caps_height():
    assert crawl.format_selector(crawl.DownloadParams(max_height=1920, audio=False)).startswith("bv*[height<=1920]")
    assert "+ba" in crawl.format_selector(crawl.DownloadParams(max_height=1920, audio=True))
    assert crawl.format_selector(crawl.DownloadParams(format="18")) == "18"


# ------------------------------------------------------------------------------------ failure classes

# Messages as yt-dlp reports them (DownloadError text), from its YouTube extractor and from users'
# reports of real failures.
MESSAGES = [
    ("ERROR: [youtube] abcdefghijk: Video unavailable. This video is unavailable", "unavailable", False),
    ("ERROR: [youtube] abcdefghijk: Video unavailable", "unavailable", False),
    (
        "ERROR: [youtube] abcdefghijk: Private video. Sign in if you've been granted access to this video. Use "
        "--cookies-from-browser or --cookies for the authentication.",
        "private",
        False,
    ),
    ("ERROR: [youtube] abcdefghijk: Video unavailable. This video is private", "private", False),
    ("ERROR: [youtube] abcdefghijk: Video unavailable. This video has been removed by the uploader", "removed", False),
    (
        "ERROR: [youtube] abcdefghijk: Video unavailable. This video is no longer available because the YouTube "
        "account associated with this video has been terminated.",
        "removed",
        False,
    ),
    (
        "ERROR: [youtube] abcdefghijk: This video has been removed for violating YouTube's Terms of Service",
        "removed",
        False,
    ),
    (
        "ERROR: [youtube] abcdefghijk: Video unavailable. This video is no longer available due to a copyright claim "
        "by Someone",
        "removed",
        False,
    ),
    (
        "ERROR: [youtube] abcdefghijk: Sign in to confirm your age. This video may be inappropriate for some users. "
        "Use --cookies-from-browser or --cookies for the authentication.",
        "gated",
        False,
    ),
    (
        "ERROR: [youtube] abcdefghijk: Join this channel to get access to members-only content like this video, and "
        "other exclusive perks.",
        "gated",
        False,
    ),
    (
        "ERROR: [youtube] tpUr8xVxj-w: Sign in to confirm you\u2019re not a bot. Use --cookies-from-browser or "
        "--cookies for the authentication.",
        "gated",
        True,
    ),
    (
        "ERROR: [youtube] abcdefghijk: The uploader has not made this video available in your country\nThis video is "
        "available in Germany.\nYou might want to use a VPN or a proxy server (with --proxy) to workaround.",
        "geo_blocked",
        False,
    ),
    (
        "ERROR: [youtube] ltcd1B8WyTM: Video unavailable. The "
        "uploader has not made this video available in your country",
        "geo_blocked",
        False,
    ),
    (
        "ERROR: [youtube] abcdefghijk: Video unavailable. This video contains content from SME, who has blocked it in "
        "your country on copyright grounds",
        "geo_blocked",
        False,
    ),
    (
        "ERROR: [youtube] abcdefghijk: This content isn't available, try again later. The current session has been "
        "rate-limited by YouTube for up to an hour.",
        "rate_limited",
        True,
    ),
    (
        "ERROR: [youtube:search] q: Unable to download API page: HTTP Error 429: Too Many Requests (caused by "
        "<HTTPError 429: Too Many Requests>)",
        "rate_limited",
        True,
    ),
    (
        "ERROR: [youtube] abcdefghijk: Unable to download webpage: <urlopen error [Errno -3] Temporary failure in name "
        "resolution> (caused by TransportError('<urlopen error [Errno -3] Temporary failure in name resolution>'))",
        "network",
        True,
    ),
    ("ERROR: unable to download video data: HTTP Error 403: Forbidden", "network", True),
    ("ERROR: [download] Got error: The read operation timed out", "network", True),
    ("ERROR: [youtube] abcdefghijk: This live event will begin in 3 hours.", "unavailable", True),
    ("ERROR: something yt-dlp has never said", "ytdlp_error", True),
]


@pytest.mark.parametrize("message,kind,retryable", MESSAGES)
def test_classify_messages(message, kind, retryable):
    e = crawl.classify_error(message, "unit")
    assert (e.kind, e.retryable) == (kind, retryable)
    assert str(e).startswith(f"unit: {kind}: ")
    assert "ERROR:" not in str(e)


def test_every_error_kind_is_declared():
    assert {k for _, k, _ in MESSAGES} == set(crawl.ERROR_KINDS)


def test_crawl_config_validates_ids_and_categories():
    with pytest.raises(Exception, match="not a YouTube id"):
        load_config(None, {"crawl.ids": ["short"]})
    with pytest.raises(Exception, match="unknown categories"):
        load_config(None, {"crawl.search.categories": ["offices"]})
    c = load_config(None, {"crawl.ids": ["-lg61evVFn4"]})
    assert c.section_json("crawl.download") != c.section_json("crawl.search")


def test_config_paths_resolve_in_the_project_folder(tmp_path, monkeypatch):
    """A relative config path not found from the working folder is in $VSI_WILD_HOME, else in the
    repo checkout this code runs from (never in the installed package's folder)."""
    elsewhere, home = tmp_path / "elsewhere", tmp_path / "home"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("VSI_WILD_HOME", str(home))
    assert crawl.resolve_path("configs/queries.yaml") == home / "configs" / "queries.yaml"
    monkeypatch.delenv("VSI_WILD_HOME")
    assert crawl.resolve_path("configs/queries.yaml") == REPO / "configs" / "queries.yaml"
    (elsewhere / "q.yaml").write_text("languages: {}")
    assert crawl.resolve_path("q.yaml") == Path("q.yaml")
