"""The crawl on the real yt-dlp code path, offline: search results and info dicts come from
fixtures (``ytdlp_offline``), media from ``file://`` URLs, failures from yt-dlp's own errors."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
import ytdlp_offline as off
from typer.testing import CliRunner

from vsi_wild.config import load_config
from vsi_wild.stages import crawl
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import crawl as tc

A, B, C, D, E, F, G, H = (f"{c * 10}{i}" for i, c in enumerate("ABCDEFGH", 1))


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("media")
    small = off.make_video(d / "eq256.mp4", 256, 128, seconds=2)
    big = off.make_video(d / "eq512.mp4", 512, 256, seconds=2)
    flat = off.make_video(d / "flat.mp4", 256, 144, seconds=2)
    tiny = off.make_video(d / "eq64.mp4", 64, 32, seconds=2)
    sph = off.inject_spherical_v1(off.make_video(d / "plain.mp4", 256, 128, seconds=2), d / "sph256.mp4")
    return {"small": small, "big": big, "flat": flat, "tiny": tiny, "sph": sph}


@pytest.fixture
def env(tmp_path, media):
    fx = tmp_path / "fixtures"
    work = tmp_path / "work"  # media the fixtures point at: tests delete it to prove nothing is fetched
    work.mkdir()
    for _k, p in media.items():
        shutil.copy(p, work / p.name)
    queries = tmp_path / "queries.yaml"
    queries.write_text(
        yaml.safe_dump(
            {
                "languages": {
                    "en": {
                        "cues": ["360°"],
                        "categories": {"street view": ["city walk"], "transportation hubs": ["train station walk"]},
                    }
                }
            },
            allow_unicode=True,
        )
    )
    crawl.SESSION.reset()

    def config(**over):
        o = {
            "crawl.enabled": True,
            "crawl.search.queries_file": str(queries),
            "crawl.search.min_height": 128,
            "crawl.search.min_duration_s": 60,
            "crawl.download.max_height": 200,
            "crawl.download.audio": False,
            "crawl.net.extractors": off.EXTRACTORS,
            "crawl.net.extractor_args": {"youtube": {"fixtures_dir": [str(fx)]}},
            "crawl.net.enable_file_urls": True,
            "crawl.net.proxy": "",
            "crawl.net.min_interval_s": 0,
            "crawl.net.sleep_requests_s": 0,
            "crawl.net.sleep_before_download_s": 0,
            "crawl.net.max_sleep_before_download_s": 0,
            "crawl.net.rate_limit": None,
            "crawl.net.retries": 0,
            "crawl.net.unit_retries": 1,
            "crawl.net.backoff_s": 0,
        }
        o.update(over)
        return load_config(None, o)

    return {"fx": fx, "work": work, "root": tmp_path / "root", "config": config, "tmp": tmp_path}


def eq(work: Path, name: str, w: int, h: int, note: str = "", fid: str | None = None) -> dict:
    return off.fmt(work / name, w, h, note=note, format_id=fid)


def search_fixtures(env) -> None:
    fx, w = env["fx"], env["work"]
    off.write_info(
        fx,
        A,
        [
            eq(w, "eq256.mp4", 256, 128, "128p, equirectangular", "small"),
            eq(w, "eq512.mp4", 512, 256, "256p, equirectangular", "big"),
        ],
        title="Walk A",
    )
    off.write_info(fx, B, [eq(w, "flat.mp4", 256, 144, "144p")], title="Flat B")
    off.write_info(fx, C, [eq(w, "eq256.mp4", 256, 128, "equirectangular")], duration=30)
    off.write_info(fx, D, [eq(w, "eq256.mp4", 256, 128, "equirectangular")], live_status="is_live", duration=None)
    off.write_info(fx, E, [eq(w, "eq256.mp4", 256, 128, "equirectangular")], media_type="short")
    off.write_error(fx, F, reason="Private video", subreason="Sign in if you've been granted access to this video")
    off.write_info(fx, F, [eq(w, "eq256.mp4", 256, 128, "equirectangular")], title="Private F")  # for the flat entry
    off.write_info(fx, G, [eq(w, "eq64.mp4", 64, 32, "32p, equirectangular")])
    off.write_info(fx, H, [eq(w, "sph256.mp4", 256, 128, "128p")], title="Spherical H", license="Creative Commons")
    off.write_search(fx, {"360° city walk": [A, B, C, D, H], "360° train station walk": [E, F, G, H, A]})


def test_search_filters_download_register_and_the_archive(env):
    search_fixtures(env)
    cfg, store = env["config"](), Store(env["root"])
    summary = tc.run_crawl(cfg, store)
    states = {(o.stage, o.unit): o.state for o in summary.outcomes}
    assert states == {("search", "all"): "computed", ("download", A): "computed", ("download", H): "computed"}

    # the candidates: every rejection with its reason; info dicts kept
    st = store.read_status("search", "all")
    out = Path(store.unit_dir(UnitRef("search", "all", st["key"])))
    cands = {r["source_id"]: r for r in pq.read_table(out / "candidates.parquet").to_pylist()}
    assert set(cands) == {A, B, C, D, E, F, G, H}
    assert {k for k, r in cands.items() if r["accepted"]} == {A, H}
    assert "no 360° evidence" in cands[B]["reject_reason"]
    assert cands[C]["reject_reason"].startswith("too short") and not cands[C]["extracted"]
    assert cands[D]["reject_reason"].startswith("live") and not cands[D]["extracted"]
    assert cands[E]["reject_reason"] == "a short"
    assert cands[F]["error_class"] == "private" and "private" in cands[F]["reject_reason"]
    assert "resolution too low" in cands[G]["reject_reason"]
    assert cands[H]["query"] == "360° city walk" and cands[H]["category"] == "street view"
    assert cands[H]["queries"] == ["360° city walk", "360° train station walk"]
    assert cands[H]["projection"] == "equirectangular" and "aspect" in json.loads(cands[H]["projection_evidence"])
    assert len(json.loads(cands[A]["info_json"])["formats"]) == 2
    qrows = pq.read_table(out / "queries.parquet").to_pylist()
    assert [(q["query"], q["category"], q["language"], q["results"]) for q in qrows] == [
        ("360° city walk", "street view", "en", 5),
        ("360° train station walk", "transportation hubs", "en", 5),
    ]

    # the registry: one row per downloaded source with its provenance
    reg = {r["source_id"]: r for r in store.registry().to_pylist()}
    assert set(reg) == {A, H}
    a = reg[A]
    file_a = Path(store.root) / a["path"]
    assert not Path(a["path"]).is_absolute() and a["path"].startswith(f"artifacts/download/{A}/")
    assert sha(file_a) == sha(env["work"] / "eq256.mp4")  # the best format under 200 px, byte for byte
    assert a["content_sha256"] == sha(file_a) and a["size_bytes"] == file_a.stat().st_size
    assert (a["width"], a["height"], a["origin"], a["projection"]) == (256, 128, "youtube", "equirectangular")
    assert a["url"] == f"https://www.youtube.com/watch?v={A}" and a["title"] == "Walk A" and a["channel"] == "Walker"
    assert a["upload_date"] == "20240501" and a["duration_s"] == 600
    assert (a["query"], a["category"], a["language"]) == ("360° city walk", "street view", "en")
    assert a["ytdlp_version"] == crawl.ytdlp_version() and a["crawl_time"] is not None
    assert a["fps"] == pytest.approx(10.0)
    prov = json.loads(a["provenance"])
    info = json.loads((Path(store.root) / prov["info_json"]).read_text())
    assert info["id"] == A and info["format_id"] == "small"
    h = reg[H]
    assert h["license"] == "Creative Commons"
    assert json.loads(h["provenance"])["projection_evidence"]["spherical"]["projection"] == "equirectangular"
    archive = (Path(store.root) / "crawl" / "archive.txt").read_text().split("\n")
    assert sorted(x for x in archive if x) == [f"youtube {A}", f"youtube {H}"]

    # a second run recomputes nothing
    again = tc.run_crawl(cfg, store)
    assert {o.state for o in again.outcomes} == {"cached"}

    # forced, with the media gone: the archive makes it download nothing (the file is reused)
    for p in env["work"].iterdir():
        p.unlink()
    forced = tc.run_crawl(cfg, store, force=True)
    assert {(o.unit, o.state) for o in forced.outcomes if o.stage == "download"} == {(A, "computed"), (H, "computed")}
    reg2 = {r["source_id"]: r for r in store.registry().to_pylist()}
    assert reg2[A]["content_sha256"] == a["content_sha256"]
    assert sha(Path(store.root) / reg2[A]["path"]) == a["content_sha256"]
    assert json.loads(reg2[A]["provenance"])["reused_from"] == a["path"]


def test_a_removed_source_stays_removed_until_undone(env):
    """`vsi-wild remove` of a crawled source: the next crawl neither registers it from the cached
    download nor downloads it again; `--undo` brings it back from the cache with nothing fetched."""
    from vsi_wild.cli import app

    search_fixtures(env)
    cfg, store = env["config"](), Store(env["root"])
    tc.run_crawl(cfg, store)
    assert {r["source_id"] for r in store.registry().to_pylist()} == {A, H}
    cli = CliRunner()
    bad = cli.invoke(app, ["remove", "../registry/x", "--data-root", str(env["root"])])
    assert bad.exit_code == 2 and "bad source id '../registry/x'" in bad.output
    r = cli.invoke(app, ["remove", A, "--reason", "faces too close", "--data-root", str(env["root"])])
    assert r.exit_code == 0, r.output
    again = tc.run_crawl(cfg, store)
    assert {(o.stage, o.unit) for o in again.outcomes} == {("search", "all"), ("download", H)}
    # the report still accounts for every accepted id, the removed one with its reason
    assert {(r["source_id"], r["state"], r["error"]) for r in again.report} == {
        (H, "done", None),
        (A, "removed", "faces too close"),
    }
    assert f"{A},removed," in (Path(env["root"]) / "crawl" / "report.csv").read_text()
    assert {r["source_id"] for r in store.registry().to_pylist()} == {H}
    listing = cli.invoke(app, ["sources", "--data-root", str(env["root"])])
    assert listing.exit_code == 0 and f"{A} (faces too close)" in listing.output.replace("\n", "")
    for p in env["work"].iterdir():  # nothing may be fetched to bring it back
        p.unlink()
    assert cli.invoke(app, ["remove", A, "--undo", "--data-root", str(env["root"])]).exit_code == 0
    back = tc.run_crawl(cfg, store)
    assert {(o.unit, o.state) for o in back.outcomes if o.stage == "download"} == {(A, "cached"), (H, "cached")}
    assert {r["source_id"] for r in store.registry().to_pylist()} == {A, H}


def test_archive_without_the_file_downloads_again(env):
    search_fixtures(env)
    cfg = env["config"](**{"crawl.net.archive": str(env["tmp"] / "shared-archive.txt"), "crawl.ids": [A]})
    assert tc.run_crawl(cfg, Store(env["root"])).outcomes[0].state == "computed"
    other = Store(env["tmp"] / "other-root")  # same archive, a fresh data root: the file must be fetched
    res = tc.run_crawl(cfg, other)
    assert [(o.unit, o.state) for o in res.outcomes] == [(A, "computed")]
    reg = other.registry().to_pylist()[0]
    assert sha(Path(other.root) / reg["path"]) == sha(env["work"] / "eq256.mp4")
    assert "reused_from" not in json.loads(reg["provenance"])


FAILURES = {  # id -> (expected class, retryable)
    "unavail0001": ("unavailable", False),
    "private0001": ("private", False),
    "removed0001": ("removed", False),
    "removed0002": ("removed", False),
    "gatedage001": ("gated", False),
    "gatedbot001": ("gated", True),
    "geoblock001": ("geo_blocked", False),
    "ratelimit01": ("rate_limited", True),
    "ratelimit02": ("rate_limited", True),
    "network0001": ("network", True),
    "network0002": ("network", True),
    "netmedia001": ("network", True),
}


def failure_fixtures(env, server_429: str, server_503: str) -> None:
    fx = env["fx"]
    # unavail0001: no fixture at all, as for an id YouTube does not know
    off.write_error(
        fx, "private0001", reason="Private video", subreason="Sign in if you've been granted access to this video"
    )
    off.write_error(
        fx, "removed0001", reason="Video unavailable", subreason="This video has been removed by the uploader"
    )
    off.write_error(
        fx,
        "removed0002",
        reason="Video unavailable",
        subreason=(
            "This video is no longer available because the YouTube "
            "account associated with this video has been terminated."
        ),
    )
    off.write_error(
        fx,
        "gatedage001",
        reason="Sign in to confirm your age",
        subreason="This video may be inappropriate for some users.",
    )
    off.write_error(
        fx,
        "gatedbot001",
        reason="Sign in to confirm you\u2019re not a bot",
        subreason="This helps protect our community. Learn more",
    )
    off.write_error(
        fx,
        "geoblock001",
        reason="Video unavailable",
        subreason="The uploader has not made this video available in your country",
        countries=["DE", "FR"],
    )
    off.write_error(fx, "ratelimit01", reason="This content isn't available, try again later.")
    off.write_error(fx, "ratelimit02", fetch=server_429)
    off.write_error(fx, "network0001", fetch=off.closed_port_url())
    off.write_error(fx, "network0002", fetch=server_503 + "network0002")
    media = off.fmt(env["work"] / "eq256.mp4", 256, 128, note="equirectangular")
    media["url"] = off.closed_port_url() + "video.mp4"  # the info is there; the media server is down
    off.write_info(fx, "netmedia001", [media])


def test_each_failure_class_is_a_status_row_and_reruns_retry_only_what_can_succeed(env):
    with off.http_status_server(429) as url, off.http_status_server(503) as down:
        failure_fixtures(env, url, down)
        cfg = env["config"](**{"crawl.ids": sorted(FAILURES), "crawl.net.max_consecutive_rate_limits": 50})
        store = Store(env["root"])
        res = tc.run_crawl(cfg, store)
        # a network error is retried within the run (crawl.net.unit_retries = 1); a rate limit is not
        assert down.hits == ["/network0002", "/network0002"] and len(url.hits) == 1
        assert {o.unit: o.state for o in res.outcomes} == {u: "failed" for u in FAILURES}
        for u, (kind, retryable) in FAILURES.items():
            row = store.read_status("download", u)
            assert (row["state"], row["error_class"], row["retryable"]) == ("failed", kind, retryable), (
                u,
                row["error"],
            )
            assert row["error"] and row["attempts"] == 1
        assert "HTTP Error 429" in store.read_status("download", "ratelimit02")["error"]
        assert "in your country" in store.read_status("download", "geoblock001")["error"]
        assert "Connection refused" in store.read_status("download", "netmedia001")["error"]
        assert store.registry().num_rows == 0
        report = (Path(store.root) / "crawl" / "report.csv").read_text().splitlines()
        assert report[0].startswith("source_id,state,error_class,retryable") and len(report) == 1 + len(FAILURES)

        again = tc.run_crawl(cfg, store)
        for u, (_kind, retryable) in FAILURES.items():
            row = store.read_status("download", u)
            assert row["attempts"] == (2 if retryable else 1), u
        assert all("not retried" in o.error for o in again.outcomes if not FAILURES[o.unit][1])

        forced = tc.run_crawl(cfg, store, force=True)  # --force retries everything
        assert all(store.read_status("download", u)["attempts"] >= 2 for u in FAILURES)
        assert len(forced.outcomes) == len(FAILURES)


def test_rate_limits_open_the_circuit_then_a_later_run_goes_on(env):
    search_fixtures(env)
    off.write_error(env["fx"], "ratelimit01", reason="This content isn't available, try again later.")
    off.write_error(env["fx"], "ratelimit02", reason="This content isn't available, try again later.")
    cfg = env["config"](**{"crawl.ids": ["ratelimit01", "ratelimit02", "zzzzzzzzzz9"]})
    off.write_info(env["fx"], "zzzzzzzzzz9", [off.fmt(env["work"] / "eq256.mp4", 256, 128, note="equirectangular")])
    store = Store(env["root"])
    tc.run_crawl(cfg, store)
    row = store.read_status("download", "zzzzzzzzzz9")
    assert (row["state"], row["error_class"], row["retryable"]) == ("failed", "rate_limited", True)
    assert "not contacting YouTube" in row["error"]
    # YouTube calmed down: the next run fetches it (and retries the rate-limited ones)
    for u in ("ratelimit01", "ratelimit02"):
        (env["fx"] / f"{u}.error.json").unlink()
        off.write_info(env["fx"], u, [off.fmt(env["work"] / "eq256.mp4", 256, 128, note="equirectangular")])
    res = tc.run_crawl(cfg, store)
    assert {o.state for o in res.outcomes} == {"computed"}


def test_a_search_that_fails_half_way_resumes_without_asking_again(env):
    search_fixtures(env)
    with off.http_status_server(429) as url:
        off.write_search(env["fx"], {"360° city walk": [A], "360° train station walk": {"fetch": url}})
        cfg, store = env["config"](), Store(env["root"])
        res = tc.run_crawl(cfg, store)
        assert [(o.stage, o.state) for o in res.outcomes] == [("search", "failed")]
        row = store.read_status("search", "all")
        assert (row["error_class"], row["retryable"]) == ("rate_limited", True)
        assert store.registry().num_rows == 0
    # the answered query is not asked again (its fixture now says nothing); the failed one is
    off.write_search(env["fx"], {"360° city walk": [], "360° train station walk": [H]})
    res = tc.run_crawl(cfg, store)
    assert [(o.stage, o.unit, o.state) for o in res.outcomes] == [
        ("search", "all", "computed"),
        ("download", A, "computed"),
        ("download", H, "computed"),
    ]
    assert not (Path(store.root) / "cache" / "crawl-search").exists() or not any(
        (Path(store.root) / "cache" / "crawl-search").iterdir()
    )


def test_from_release_fetches_exactly_its_ids_and_reports_the_lost(env):
    search_fixtures(env)
    off.write_error(
        env["fx"], "removed0001", reason="Video unavailable", subreason="This video has been removed by the uploader"
    )
    release = env["tmp"] / "release.jsonl"
    rows = [
        {"doc_id": f"{v}|{i}", "video_name": f"{s}_{v}.mp4", "task_type": "VOC"}
        for i, (s, v) in enumerate([(A, "front"), (A, "back"), ("removed0001", "left"), ("unavail0001", "right")])
    ]
    release.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = env["config"](**{"crawl.release_file": str(release)})
    store = Store(env["root"])
    res = tc.run_crawl(cfg, store)
    assert [o.stage for o in res.outcomes] == ["download"] * 3  # no search
    assert {r["source_id"]: (r["state"], r["error_class"]) for r in res.report} == {
        A: ("done", None),
        "removed0001": ("failed", "removed"),
        "unavail0001": ("failed", "unavailable"),
    }
    reg = store.registry().to_pylist()
    assert [r["source_id"] for r in reg] == [A]
    assert json.loads(reg[0]["provenance"])["requested_by"] == "release:release.jsonl"


def test_cli_crawl_dry_run_and_from_release(env):
    import typer

    from vsi_wild.cli_sources import crawl as crawl_cmd

    app = typer.Typer()
    app.command("crawl")(crawl_cmd)
    app.command("noop")(lambda: None)  # two commands: typer keeps "crawl" as a subcommand
    runner = CliRunner()
    search_fixtures(env)
    cfgfile = env["tmp"] / "crawl.yaml"
    cfgfile.write_text(
        yaml.safe_dump(
            {
                "crawl": {
                    "search": {"queries_file": str(env["tmp"] / "queries.yaml"), "min_height": 128},
                    "download": {"max_height": 200},
                    "net": {
                        "extractors": off.EXTRACTORS,
                        "extractor_args": {"youtube": {"fixtures_dir": [str(env["fx"])]}},
                        "enable_file_urls": True,
                        "proxy": "",
                        "min_interval_s": 0,
                        "sleep_requests_s": 0,
                        "sleep_before_download_s": 0,
                        "max_sleep_before_download_s": 0,
                        "rate_limit": None,
                        "unit_retries": 0,
                        "backoff_s": 0,
                    },
                }
            },
            allow_unicode=True,
        )
    )
    root = str(env["root"])

    r = runner.invoke(app, ["crawl", "-c", str(cfgfile), "-d", root, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "2 queries" in r.output and "360° train station walk" in r.output
    assert not env["root"].exists()  # nothing ran, nothing was created

    release = env["tmp"] / "release.jsonl"
    release.write_text(
        json.dumps({"video_name": f"{A}_front.mp4"}) + "\n" + json.dumps({"video_name": "private0001_back.mp4"}) + "\n"
    )
    off.write_error(env["fx"], "private0001", reason="Video unavailable", subreason="This video is private")
    r = runner.invoke(app, ["crawl", "-c", str(cfgfile), "-d", root, "--from-release", str(release)])
    assert r.exit_code == 1, r.output
    assert "can no longer be had (1)" in r.output and "private0001  private" in r.output
    assert "private: private:" not in r.output  # the class leads the error once
    assert "1 done" in r.output


def test_cookies_file_is_passed_to_ytdlp(env):
    search_fixtures(env)
    cookies = env["tmp"] / "cookies.txt"
    cookies.write_text("# Netscape HTTP Cookie File\n.youtube.com\tTRUE\t/\tTRUE\t2147483647\tPREF\tf6=40000000\n")
    store = Store(env["root"])
    missing = env["config"](**{"crawl.ids": [A], "crawl.net.cookies_file": str(env["tmp"] / "nope.txt")})
    tc.run_crawl(missing, store)
    row = store.read_status("download", A)
    assert (row["error_class"], row["retryable"]) == ("bad_input", False) and "cookies_file not found" in row["error"]
    cfg = env["config"](**{"crawl.ids": [A], "crawl.net.cookies_file": str(cookies)})
    client = tc.make_client(cfg, store)
    with client.ydl() as ydl:  # yt-dlp loaded the jar from the file
        assert any(c.name == "PREF" for c in ydl.cookiejar)
    assert tc.run_crawl(cfg, store, force=True).outcomes[0].state == "computed"


def test_politeness_spaces_operations_and_limits_bandwidth(env):
    waits: list[float] = []
    session = crawl.Session()
    session.sleep = waits.append  # record the waits instead of sleeping
    net = crawl.NetParams(min_interval_s=5.0, extractors=off.EXTRACTORS)  # offline: no name lookup
    with session.turn(net):
        pass
    with session.turn(net):
        pass
    assert len(waits) == 1 and 4.0 < waits[0] <= 5.0
    cfg = env["config"](
        **{
            "crawl.net.rate_limit": "2M",
            "crawl.net.sleep_before_download_s": 0.1,
            "crawl.net.max_sleep_before_download_s": 0.2,
            "crawl.net.sleep_requests_s": 1.5,
        }
    )
    client = tc.make_client(cfg, Store(env["root"]))
    p = client.params()
    assert p["sleep_interval_requests"] == 1.5
    search_fixtures(env)
    seen = {}

    class Spy:
        def __init__(self, real):
            self.real = real

        def __call__(self, what, fn, retries=None, **extra):
            seen.update(extra)
            return self.real(what, fn, retries, **extra)

    client._call = Spy(client._call)
    client.download(crawl.watch_url(A), env["tmp"], cfg.crawl.download)
    assert seen["ratelimit"] == 2 * 1024 * 1024
    assert (seen["sleep_interval"], seen["max_sleep_interval"]) == (0.1, 0.2)


def test_an_unreachable_youtube_opens_the_circuit_then_a_later_run_goes_on(env):
    """Operations that never reach the host (here: connection refused) stop the crawl contacting
    YouTube after crawl.net.max_consecutive_unreachable of them in a row; an answer in between
    (a 503 is one) resets the count; the ids left untried fail as retryable network errors naming
    the cause, and the next run, online again, fetches them all."""
    search_fixtures(env)
    ids = ["offline0001", "offline0002", "offline0003", "offline0004"]
    for u in ids[:3]:
        off.write_error(env["fx"], u, fetch=off.closed_port_url())
    off.write_info(env["fx"], ids[3], [off.fmt(env["work"] / "eq256.mp4", 256, 128, note="equirectangular")])
    # unit_retries 1: two operations per id, so the third id's first try is the fourth in a row
    cfg = env["config"](**{"crawl.ids": ids, "crawl.net.max_consecutive_unreachable": 4})
    store = Store(env["root"])
    tc.run_crawl(cfg, store)
    rows = {u: store.read_status("download", u) for u in ids}
    assert all((r["state"], r["error_class"], r["retryable"]) == ("failed", "network", True) for r in rows.values())
    assert all("Connection refused" in rows[u]["error"] for u in ids[:2])
    for u in ids[2:]:
        assert "not contacting YouTube again in this run: 4 operations in a row never reached it" in rows[u]["error"]
        assert "Connection refused" in rows[u]["error"] and "Is this machine online" in rows[u]["error"]
    assert store.registry().num_rows == 0
    for u in ids[:3]:
        (env["fx"] / f"{u}.error.json").unlink()
        off.write_info(env["fx"], u, [off.fmt(env["work"] / "eq256.mp4", 256, 128, note="equirectangular")])
    res = tc.run_crawl(cfg, store)
    assert {o.state for o in res.outcomes} == {"computed"} and store.registry().num_rows == 4


def test_an_answer_between_unreachable_operations_resets_the_count(env):
    """Two ids that never reach the host (two operations each) with one answered in between (a
    503): never three in a row, so the circuit stays closed; without the reset it would open on
    the last id's second try."""
    search_fixtures(env)
    ids = ["a_down00001", "b_answer001", "c_down00002"]  # crawled in this order
    with off.http_status_server(503) as server_503:
        off.write_error(env["fx"], ids[0], fetch=off.closed_port_url())
        off.write_error(env["fx"], ids[1], fetch=server_503 + ids[1])
        off.write_error(env["fx"], ids[2], fetch=off.closed_port_url())
        cfg = env["config"](**{"crawl.ids": ids, "crawl.net.max_consecutive_unreachable": 3})
        store = Store(env["root"])
        tc.run_crawl(cfg, store)
    errors = [store.read_status("download", u)["error"] for u in ids]
    assert not any("not contacting YouTube" in e for e in errors), errors
    assert "Connection refused" in errors[2] and "HTTP Error 503" in errors[1]


def test_a_machine_that_cannot_resolve_youtube_says_so_before_any_id(env, monkeypatch):
    """With YouTube's own extractors and no proxy, the crawl looks YouTube's name up once; when it
    does not resolve, every id fails at once as a retryable network error saying so, and yt-dlp
    is never asked (its retries take minutes an id). Through a proxy the lookup is the proxy's
    business and is not made here."""
    import socket

    asked: list[str] = []
    real = socket.getaddrinfo

    def lookup(host, *args, **kw):
        asked.append(host)
        if host == crawl.YOUTUBE_HOST:
            raise socket.gaierror(-2, "Name or service not known")
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr(crawl.Ytdlp, "ydl", lambda *a, **k: pytest.fail("yt-dlp was asked"))
    ids = ["dQw4w9WgXcQ", "aaaaaaaaaaa"]
    cfg = env["config"](**{"crawl.ids": ids, "crawl.net.extractors": [], "crawl.net.extractor_args": {}})
    store = Store(env["root"])
    tc.run_crawl(cfg, store)
    for u in ids:
        row = store.read_status("download", u)
        assert (row["state"], row["error_class"], row["retryable"]) == ("failed", "network", True)
        assert "www.youtube.com, does not resolve here" in row["error"] and "Is this machine online" in row["error"]
    assert asked == [crawl.YOUTUBE_HOST]  # once a run


@pytest.mark.parametrize(
    ("net", "environ", "looked_up"),
    [
        ({"proxy": ""}, {}, True),  # a direct connection, forced
        ({}, {}, True),  # no proxy anywhere
        ({}, {"HTTPS_PROXY": "http://proxy.example:3128"}, False),  # yt-dlp goes through the environment's
        ({"proxy": "socks5://127.0.0.1:1080"}, {}, False),
        ({"extractors": ["tests.ytdlp_offline:OfflineYoutubeIE"]}, {}, False),  # YouTube is not asked
    ],
)
def test_the_name_lookup_is_made_only_where_ytdlp_would_connect_directly(monkeypatch, net, environ, looked_up):
    import socket

    from vsi_wild.stages.crawl.params import NetParams

    for k in crawl.PROXY_ENV:
        monkeypatch.delenv(k, raising=False)
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    asked: list[str] = []

    def lookup(host, *args, **kw):
        asked.append(host)
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    session = crawl.Session()
    session.preflight(NetParams(**net))
    session.preflight(NetParams(**net))
    assert asked == ([crawl.YOUTUBE_HOST] if looked_up else [])
    assert bool(session.offline) == looked_up
