"""The build report as one self-contained HTML page (report.html): the paper's statistics, the
plots (``report_plots``), question cards with their frames, blind baselines, what changed since
another build (``report_diff``), failures, human fixes and verification progress.

Everything is inlined (PNG plots and JPEG frames as data URIs, the style sheet in the page): it
opens from ``file://`` with no network. The same inputs give the same bytes.
"""

from __future__ import annotations

import base64
import html
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vsi_wild.stages.qa.registry import NUMBER, tasks
from vsi_wild.stages.report_plots import Plot

CARDS_PER_TASK = 2
CARD_FRAMES = 4
THUMB_WIDTH = 192
CARD_SEED = 0


@dataclass
class Card:
    """One question shown with what the model sees: frames of its view video, VPO's renders."""

    row: Mapping[str, Any]  # schema.QA_EXPORT
    frames: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, JPEG)
    images: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, JPEG): rendered views


def choose_cards(
    release: Sequence[Mapping[str, Any]], per_task: int = CARDS_PER_TASK, seed: int = CARD_SEED
) -> list[Mapping[str, Any]]:
    """A seeded choice of ``per_task`` release rows of each task, in task order."""
    out = []
    for t in tasks():
        rows = sorted((r for r in release if r["task_type"] == t.name), key=lambda r: r["doc_id"])
        out += sorted(
            random.Random(f"{seed}:{t.name}").sample(rows, min(per_task, len(rows))), key=lambda r: r["doc_id"]
        )
    return out


def card_frame_times(row: Mapping[str, Any], n: int = CARD_FRAMES) -> list[tuple[int, float]]:
    """(frame index, time) of up to ``n`` of the frames the question shows (the release's frame
    indices, evenly thinned); a question without frame indices (VOC) shows its video evenly up
    to its last query time."""
    fps = float(row["fps"])
    if row.get("frame_indices"):
        idx = list(row["frame_indices"])
        times = list(row.get("frame_times") or [i / fps for i in idx])
        pick = sorted({round(k * (len(idx) - 1) / max(1, n - 1)) for k in range(min(n, len(idx)))})
        return [(idx[k], times[k]) for k in pick]
    end = max(row.get("query_times") or [row["duration_s"]])
    last = max(0, int(end * fps) - 1)
    return [(i, i / fps) for i in sorted({round(k * last / max(1, n - 1)) for k in range(n)})]


def thumbnail_jpeg(rgb: Any, width: int = THUMB_WIDTH) -> bytes:
    import cv2

    h, w = rgb.shape[:2]
    if w > width:
        rgb = cv2.resize(rgb, (width, max(2, round(h * width / w))), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 80])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()


def video_frames(path: Path, wanted: Sequence[tuple[int, float]]) -> list[tuple[str, bytes]]:
    """Thumbnails of the frames nearest to each wanted time (seeking, not decoding the prefix)."""
    from vsi_wild.stages.video_io import sample_frames

    out = []
    for index, t in wanted:
        # the millisecond grid: the frame nearest to t, decoded from the keyframe before it
        got = next(iter(sample_frames(path, fps=1000.0, start=t, end=t + 0.0005)), None)
        if got is not None:
            out.append((f"frame {index} · {t:.1f} s", thumbnail_jpeg(got[4])))
    return out


def image_thumbnail(path: Path) -> bytes:
    import cv2

    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError(f"{path}: not an image")
    return thumbnail_jpeg(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


def build_cards(
    release: Sequence[Mapping[str, Any]],
    video_file: Callable[[str], Path | None],
    image_file: Callable[[str], Path | None],
) -> list[Card]:
    """The question cards: ``video_file(video_name)`` and ``image_file(image_path)`` find the
    exported files (None: not there, the card says so)."""
    cards = []
    for row in choose_cards(release):
        card = Card(row)
        video = video_file(row["video_name"])
        if video is not None:
            card.frames = video_frames(video, card_frame_times(row))
        for i, rel in enumerate(row.get("image_paths") or []):
            p = image_file(rel)
            if p is not None:
                card.images.append((f"view {'ABCD'[i] if i < 4 else i}", image_thumbnail(p)))
        cards.append(card)
    return cards


# ------------------------------------------------------------------------------------ the page
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #d5d9de;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
nav a{margin-right:12px;font-size:13px}
table{border-collapse:collapse;background:#fff;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #d5d9de;padding:3px 8px;text-align:left;vertical-align:top}th{background:#eef1f4}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.kpis{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.kpi{background:#fff;border:1px solid #d5d9de;border-radius:6px;padding:8px 14px}
.kpi b{display:block;font-size:20px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:12px}
figure{margin:0;background:#fff;border:1px solid #d5d9de;border-radius:6px;padding:8px}
figure img{max-width:100%;height:auto;display:block}figcaption{font-size:12px;color:#555}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:12px}
.card{background:#fff;border:1px solid #d5d9de;border-radius:6px;padding:10px}
.card .q{font-weight:600}.card ol{margin:4px 0;padding-left:22px}.card li.ok{color:#1a7f37;font-weight:600}
.strip{display:flex;flex-wrap:wrap;gap:4px;margin-top:6px}.strip figure{padding:2px;border:0}
.strip img{width:120px}
.warn{background:#fff4e5;border:1px solid #f0b45b;border-radius:6px;padding:8px 12px;margin:10px 0}
.ok{color:#1a7f37}.muted{color:#666}
.before{background:#fdecec}.after{background:#e8f6ec}
"""  # noqa: E501  the report's CSS, byte for byte


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f"<td class=n>{_e(c)}</td>" if i in numeric else f"<td>{_e(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _img(mime: str, data: bytes, alt: str) -> str:
    return f'<img src="{_data_uri(mime, data)}" alt="{_e(alt)}">'


def _contents(rep: Mapping[str, Any]) -> str:
    src, st = rep["sources"], rep["statistics"]
    n_questions = sum(e["n"] for e in rep["questions"].values())
    kpis = [
        ("sources", src["n"]),
        ("source hours", f"{src['hours']:.2f}"),
        ("view videos", st["videos"]),
        ("view video hours", f"{st['hours']:.2f}"),
        ("release questions", n_questions),
        ("tasks", len(rep["questions"])),
    ]
    out = ['<div class="kpis">' + "".join(f'<div class="kpi"><b>{_e(v)}</b>{_e(k)}</div>' for k, v in kpis) + "</div>"]
    origins = ", ".join(f"{k} {v}" for k, v in src["origins"].items()) or "none"
    out.append(f"<p>Sources by origin: {_e(origins)}.</p>")
    cats = st["categories"]
    if cats:
        out.append("<h3>Per scene category (view videos with questions)</h3>")
        out.append(
            _table(
                ["category", "videos", "share by count", "hours", "share by duration"],
                [
                    [c, e["videos"], f"{e['count_share']:.2%}", f"{e['hours']:.2f}", f"{e['duration_share']:.2%}"]
                    for c, e in cats.items()
                ],
                numeric=(1, 2, 3, 4),
            )
        )
    else:
        out.append('<p class="muted">No view video has questions: no category statistics.</p>')
    return "\n".join(out)


def _questions(rep: Mapping[str, Any]) -> str:
    q = rep["questions"]
    if not q:
        return '<p class="warn">This build has no questions.</p>'
    rows = []
    for name, e in q.items():
        subtypes = ", ".join(f"{k} {v}" for k, v in e["subtypes"].items())
        answers = (
            f"min {e['answers']['min']} · median {e['answers']['median']} · max {e['answers']['max']}"
            if "answers" in e
            else " ".join(f"{k}:{v}" for k, v in e["letters"].items())
        )
        rows.append([name, e["n"], e["videos"], subtypes, answers])
    out = [_table(["task", "questions", "videos", "subtypes", "answers"], rows, numeric=(1, 2))]
    missing = [t.name for t in tasks() if t.name not in q]
    if missing:
        out.append(f'<p class="warn">No questions for {_e(", ".join(missing))}.</p>')
    out.append("<p>Splits: " + _e(", ".join(f"{k} {v}" for k, v in rep["splits"].items())) + "</p>")
    return "\n".join(out)


def _plots(plots: Sequence[Plot]) -> str:
    return (
        '<div class="plots">'
        + "".join(
            f'<figure id="plot-{p.key}">{_img("image/png", p.png, p.title)}'
            f"<figcaption>{_e(p.title)}</figcaption></figure>"
            for p in plots
        )
        + "</div>"
    )


def _video_link(video_id: str) -> str:
    """A video's name, linked to its page in the verification app (`vsi-wild verify`): relative when
    the app serves the report (/report), its default address when the page is opened as a file."""
    return f'<a class="verify" href="/videos/{_e(video_id)}">{_e(video_id)}</a>'


# Opened from file://, the links to the verification app go to the address the reader gives (a
# field at the top, remembered; or ?verify=<address> in the page's URL), at first its default one.
_VERIFY_LINKS = r"""<script>if (location.protocol === 'file:') {
 const key = 'vsi-verify-address', given = new URLSearchParams(location.search).get('verify');
 if (given) localStorage.setItem(key, given);
 const links = [...document.querySelectorAll('a.verify')];
 for (const a of links) a.dataset.path = a.getAttribute('href');
 const bar = document.createElement('p'); bar.className = 'muted';
 bar.innerHTML = 'Video names open <code>vsi-wild verify</code> at <input id="verify-address" size="30"> '
   + '(the address it printed; Enter to apply)';
 document.querySelector('h1').after(bar);
 const input = bar.querySelector('input');
 input.value = given || localStorage.getItem(key) || 'http://127.0.0.1:8765';
 const apply = () => { const base = input.value.trim().replace(/\/+$/, ''); localStorage.setItem(key, base);
   for (const a of links) a.href = base + a.dataset.path; };
 input.addEventListener('change', apply); apply();
}</script>"""


def _card(card: Card) -> str:
    r = card.row
    out = [
        f'<div class="card" id="card-{_e(r["doc_id"])}"><div class="muted">{_e(r["task_type"])} · '
        f"{_e(r['subtype'])} · {_video_link(r['video_id'])} · {_e(r['doc_id'])}</div>",
        f'<p class="q">{_e(r["question"])}</p>',
    ]
    if r.get("options"):
        out.append(
            "<ol type=A>"
            + "".join(
                f"<li{' class=ok' if i == r.get('answer_index') else ''}>{_e(o.split(') ', 1)[-1])}</li>"
                for i, o in enumerate(r["options"])
            )
            + "</ol>"
        )
    out.append(
        f"<p>Answer: <b>{_e(r['answer'])}</b> ({_e(r['answer_text'])}); asked at "
        + _e(", ".join(f"{t:.1f} s" for t in r.get("query_times") or []))
        + "</p>"
    )
    for label, shots in (("frames of the view video", card.frames), ("rendered views", card.images)):
        if shots:
            out.append(
                f'<div class="muted">{label}</div><div class="strip">'
                + "".join(
                    f"<figure>{_img('image/jpeg', jpg, cap)}<figcaption>{_e(cap)}</figcaption></figure>"
                    for cap, jpg in shots
                )
                + "</div>"
            )
    if not card.frames:
        out.append('<p class="muted">(its view video is not in the export)</p>')
    return "\n".join(out) + "</div>"


def _cards(cards: Sequence[Card]) -> str:
    if not cards:
        return '<p class="muted">No questions to show.</p>'
    return '<div class="cards">' + "".join(_card(c) for c in cards) + "</div>"


def _blind(rep: Mapping[str, Any]) -> str:
    b = rep.get("blind")
    if not b:
        return '<p class="muted">No release questions: no blind baseline was run.</p>'
    names = sorted(next(iter(b["baselines"].values())).keys())
    out = [
        f"<p>Answered from the question and options alone (no video). A multiple-choice task is flagged "
        f"when a baseline beats chance ({b['chance']:.0%}) by more than {b['margin']:.0%}.</p>",
        _table(
            ["baseline", *names],
            [[n, *(f"{s[t]:.3f}" for t in names)] for n, s in b["baselines"].items()],
            numeric=tuple(range(1, len(names) + 1)),
        ),
    ]
    if b["leaks"]:
        out.append(
            '<p class="warn">Leaks: '
            + _e(", ".join(f"{x['task']} ({x['best_blind_accuracy']:.0%})" for x in b["leaks"]))
            + "</p>"
        )
    else:
        out.append('<p class="ok">No task is answerable blind beyond the margin.</p>')
    if b.get("too_few"):
        out.append(f"<p>Too few questions to judge ({b['min_n']} needed): {_e(', '.join(b['too_few']))}.</p>")
    out += [
        f"<p class=muted>{t.name} is scored with {t.metric.name}: the median-count prior's score, not an accuracy.</p>"
        for t in tasks()
        if t.kind == NUMBER and t.name in names
    ]
    return "\n".join(out)


def _text_probe(rep: Mapping[str, Any]) -> str:
    """The text-only leak probe (report.json ``text_probe``): per task, this build beside the public release."""
    tp = rep.get("text_probe")
    if not tp:
        return ""
    ref = tp["reference"]
    ref_tasks = {e["task"]: e for e in ref.get("tasks", [])}

    def cells(e: Mapping[str, Any] | None) -> list[str]:
        if not e or e["probe"] is None:
            return ["-", "-", str(e["n"]) if e else "-"]
        by_view = " (folds by view video)" if e.get("grouped_by") == "view video" else ""
        return [
            f"{e['probe']:.3f}" + (" (flagged)" if e["flagged"] else "") + by_view,
            f"{e['chance']:.3f}",
            str(e["n"]),
        ]

    build = {e["task"]: e for e in tp["build"]["tasks"]}
    names = [*build, *(t for t in ref_tasks if t not in build)]
    out = [
        f"<h3>Text-only leak probe</h3><p>A classifier of the question and option texts alone, "
        f"{tp['build']['folds']}-fold out of fold, folds grouped by source video (VOC: MRA against the best "
        "constant answer).</p>",
        _table(
            ["task", "metric", "build probe", "build chance", "build n", "public probe", "public chance", "public n"],
            [
                [t, (build.get(t) or ref_tasks[t])["metric"], *cells(build.get(t)), *cells(ref_tasks.get(t))]
                for t in names
            ],
            numeric=(2, 3, 4, 5, 6, 7),
        ),
    ]
    if "note" in ref:
        out.append(f'<p class="muted">Public release: {_e(ref["note"])}</p>')
    flagged = tp["build"]["flagged"]
    out.append(
        f'<p class="warn">Flagged in this build: {_e(", ".join(flagged))}</p>'
        if flagged
        else '<p class="ok">No task of this build is flagged by the text probe.</p>'
    )
    if "debias_dropped" in tp:
        d = tp["debias_dropped"]
        out.append(
            "<p>Dropped by qa.debias_text: "
            + (_e(", ".join(f"{t} {n}" for t, n in d.items())) if d else "none (no task's probe to prune).")
            + "</p>"
        )
    return "\n".join(out)


def _distributions(rep: Mapping[str, Any]) -> str:
    """report.json ``answer_controls``: the answer texts left after the export's balance, the VOC
    count priors beside the public release's, the questions per difficulty and horizon bin."""
    ac = rep.get("answer_controls")
    if not ac:
        return '<p class="muted">No release questions: no answer distribution.</p>'
    rows = []
    for t, by_subtype in ac["answer_texts"].items():
        for st, h in by_subtype.items():
            common = ", ".join(f"{k} ({v})" for k, v in sorted(h["top"].items(), key=lambda kv: (-kv[1], kv[0]))[:4])
            rows.append([t, st, h["n"], h["distinct"], f"{h['max_share']:.1%}", common])
    out = [
        "<p>Per task and subtype, after the export's balance (qa.max_answer_ratio over the uniform share, "
        "qa.voc_max_answer_share for counts): how often the most common answer text is the answer.</p>",
        _table(
            ["task", "subtype", "questions", "distinct answers", "largest share", "most common"],
            rows,
            numeric=(2, 3, 4),
        ),
    ]
    vp = ac["voc_priors"]

    def prior_cells(p: Mapping[str, Any] | None) -> list[str]:
        if not p:
            return ["-", "-", "-"]
        return [
            f"{p['best_constant']['answer']} (MRA {p['best_constant']['mra']:.3f})",
            f"{p['median_prior_mra']:.3f}",
            str(p["n"]),
        ]

    out += [
        "<h3>VOC count priors</h3><p>Answers guessable without the video, by the same code on both builds.</p>",
        _table(
            ["questions of", "best constant answer", "per-concept median prior (MRA)", "questions"],
            [["this build", *prior_cells(vp["build"])], ["public release", *prior_cells(vp["public"])]],
            numeric=(2, 3),
        ),
    ]
    if vp["build"] and vp["public"]:
        out.append(
            '<p class="ok">The median prior scores no higher here than on the public release.</p>'
            if vp["build"]["median_prior_mra"] <= vp["public"]["median_prior_mra"]
            else '<p class="warn">The median prior scores higher here than on the public release: counts are '
            "guessable.</p>"
        )
    elif vp["public"] is None:
        out.append('<p class="muted">Public release not available (report.reference_qa).</p>')
    if ac["strata"]:
        bins = ("near", "medium", "far"), ("early", "middle", "late")
        out += [
            "<h3>Difficulty and horizon</h3><p>Questions per bin of the temporal gap that makes each hard "
            "(difficulty_bin) and of the query time's place in the video (horizon_bin).</p>",
            _table(
                ["task", *bins[0], *bins[1]],
                [
                    [t, *(e["difficulty"].get(b, 0) for b in bins[0]), *(e["horizon"].get(b, 0) for b in bins[1])]
                    for t, e in ac["strata"].items()
                ],
                numeric=(1, 2, 3, 4, 5, 6),
            ),
        ]
    return "\n".join(out)


def _readings(rep: Mapping[str, Any]) -> str:
    """report.json ``readings``: what was not asked because a reasonable reading changes its answer."""
    summary = rep.get("readings")
    if not summary:
        return '<p class="muted">Not recorded in this build.</p>'
    rows = [
        [name, e["n"], ", ".join(f"{k} {v}" for k, v in e["by_reading"].items()) or "-"] for name, e in summary.items()
    ]
    examples = [x for e in summary.values() for x in e["examples"]]
    return (
        "<p>Questions (VOC: counts) not asked because a reading of the question a careful viewer could hold gives "
        "another answer, from the metadata (<code>qa.stable_answers</code>; every row is in "
        "<code>exports/skipped.parquet</code> with its reading).</p>"
        + _table(["task", "not asked", "under which reading"], rows, numeric=(1,))
        + ("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in examples) + "</ul>" if examples else "")
    )


def _visibility(rep: Mapping[str, Any]) -> str:
    """report.json ``visibility``: per concept, how long its instances are visible and where they are
    when not observed (metadata/visibility.parquet)."""
    vis = rep.get("visibility")
    if not vis:
        return '<p class="muted">No visibility tracks in this build.</p>'
    rows = []
    for concept, e in vis.items():
        u = e["unobserved"]
        rows.append(
            [
                concept,
                e["instances"],
                f"{e['median_visible_s']:.1f}",
                f"{e['max_visible_s']:.1f}",
                *((f"{u[k]:.0%}" for k in ("out_of_view", "occluded", "not_seen")) if u else ("-",) * 3),
            ]
        )
    return (
        "<p>Seconds each instance is visible, over every view video, and where it is when not observed: out of "
        "the view, in it but occluded (or too small to segment), or not known (no consistent position).</p>"
        + _table(
            ["concept", "instances", "visible s: median", "max", "out of view", "occluded", "not seen"],
            rows,
            numeric=(1, 2, 3, 4, 5, 6),
        )
    )


def _changes(changes: Mapping[str, Any] | None) -> str:
    if changes is None:
        return '<p class="muted">No previous build of this data root to compare with.</p>'
    out = [
        f"<p>Compared with {_e(changes['previous'])}: {changes['before']} questions before, "
        f"{changes['after']} now; <b>{changes['added']}</b> added, <b>{changes['removed']}</b> removed, "
        f"<b>{changes['changed']}</b> changed (answer or options); of the questions in both, "
        f"<b>{changes.get('letters', 0)}</b> answer letters, <b>{changes.get('order', 0)}</b> option orders and "
        f"<b>{changes.get('doc_ids', 0)}</b> doc ids moved.</p>"
    ]
    if changes["stage_versions"]:
        out.append(
            "<p>Stage versions changed: "
            + _e(", ".join(f"{s} {a} → {b}" for s, (a, b) in changes["stage_versions"].items()))
            + "</p>"
        )
    if not any(changes.get(k) for k in ("added", "removed", "changed", "letters", "order", "doc_ids")):
        out.append('<p class="ok">No question changed.</p>')
        return "\n".join(out)
    kinds = ["added", "removed", "changed", "letters", "order", "doc_ids"]
    out.append(
        "<h3>Per task</h3>"
        + _table(
            ["task", *kinds],
            [[t, *(c.get(k, 0) for k in kinds)] for t, c in changes["per_task"].items()],
            numeric=(1, 2, 3, 4, 5, 6),
        )
    )
    out.append(
        "<h3>Per video</h3>"
        + _table(
            ["video", *kinds, "why"],
            [
                [v, *(c.get(k, 0) for k in kinds), "; ".join(c["causes"]) or "—"]
                for v, c in changes["per_video"].items()
            ],
            numeric=(1, 2, 3, 4, 5, 6),
        )
    )
    if changes["changed_questions"]:
        rows = "".join(
            f"<tr><td>{_e(c['task_type'])}</td><td>{_video_link(c['video_id'])}</td><td>{_e(c['question'])}</td>"
            f"<td class=before>{_e(c['before']['answer'])}</td><td class=after>{_e(c['after']['answer'])}</td>"
            f"<td class=before>{_e(' | '.join(c['before']['options'] or []) or '—')}</td>"
            f"<td class=after>{_e(' | '.join(c['after']['options'] or []) or '—')}</td></tr>"
            for c in changes["changed_questions"]
        )
        out.append(
            '<h3>Changed questions</h3><table id="changed-questions"><thead><tr><th>task</th><th>video</th>'
            "<th>question</th><th>answer before</th><th>answer after</th><th>options before</th>"
            f"<th>options after</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    for what in ("added", "removed"):
        listed = changes[f"{what}_questions"]
        if listed:
            out.append(
                f"<h3>{what.capitalize()} questions</h3>"
                + _table(
                    ["task", "video", "question", "answer"],
                    [[q["task_type"], q["video_id"], q["question"], q["answer"]] for q in listed],
                )
            )
    return "\n".join(out)


def _lost(rep: Mapping[str, Any]) -> str:
    if not rep["lost"]:
        return '<p class="ok">Nothing: every unit completed.</p>'
    out = [
        _table(
            ["stage", "lost units by class"],
            [[s, ", ".join(f"{k} {v}" for k, v in c.items())] for s, c in rep["lost"].items()],
        )
    ]
    if rep["failures"]:
        out.append(
            "<h3>Failed units</h3>"
            + _table(["stage", "unit", "error"], [[f["stage"], f["unit"], f["error"]] for f in rep["failures"]])
        )
    return "\n".join(out)


def _fixes(fixes: Mapping[str, Sequence[str]]) -> str:
    if not fixes:
        return '<p class="muted">No human fix is applied in this build.</p>'
    return _table(
        ["video", "fixes applied (op, line of its fix file, what it did)"],
        [[v, "; ".join(lines)] for v, lines in fixes.items()],
    )


def _verification(verification: Mapping[str, Any] | None) -> str:
    """The verification app's marks (verify/<video_id>.json: temporal_verified, clips_verified,
    questions id -> accept | reject); a record of another form is shown key by key."""
    if not verification:
        return (
            '<p class="muted">No verification records (verify/ in the data root) yet. Video names link to '
            "their pages in <code>vsi-wild verify</code> (http://127.0.0.1:8765 by default).</p>"
        )
    marks, other = [], []
    for name, content in verification.items():
        if isinstance(content, Mapping) and "temporal_verified" in content:
            verdicts = list((content.get("questions") or {}).values())
            marks.append(
                [
                    name.removesuffix(".json"),
                    "yes" if content["temporal_verified"] else "no",
                    len(content.get("clips_verified") or []),
                    verdicts.count("accept"),
                    verdicts.count("reject"),
                    content.get("updated_at") or "",
                ]
            )
        else:
            other.append((name, content))
    out = []
    if marks:
        out.append(
            f"<p>{len(marks)} video(s) with a reviewer's marks.</p>"
            + _table(
                [
                    "video",
                    "instances verified",
                    "motion clips verified",
                    "questions accepted",
                    "questions rejected",
                    "updated",
                ],
                marks,
                numeric=(2, 3, 4),
            )
        )
    for name, content in other:
        out.append(f"<h3>{_e(name)}</h3>")
        if isinstance(content, Mapping):
            out.append(_table(["key", "value"], [[k, _brief(v)] for k, v in content.items()]))
        else:
            out.append(f"<p>{_e(_brief(content))}</p>")
    return "\n".join(out)


def _brief(value: Any) -> str:
    """A value of a verification record in one cell: scalars as they are, containers by size."""
    if isinstance(value, Mapping):
        return f"{len(value)} entries"
    if isinstance(value, list):
        return f"{len(value)} items"
    return str(value)


SECTIONS = (
    ("contents", "Contents"),
    ("questions", "Questions (release split)"),
    ("plots", "Statistics"),
    ("cards", "Question cards"),
    ("distributions", "Answer distributions"),
    ("readings", "One right answer"),
    ("blind", "Blind baselines"),
    ("visibility", "Visibility"),
    ("changes", "What changed"),
    ("lost", "Failures and losses"),
    ("fixes", "Human fixes"),
    ("verification", "Verification"),
)


def render_html(rep: Mapping[str, Any], plots: Sequence[Plot], cards: Sequence[Card]) -> str:
    """The page. ``rep``: ``report.build_report``'s numbers plus ``fixes`` (video -> fix lines),
    ``changes`` (``report_diff.compare``, or None without a previous build) and ``verification``
    (file name -> its JSON, or None)."""
    body = {
        "contents": _contents(rep),
        "questions": _questions(rep),
        "plots": _plots(plots),
        "cards": _cards(cards),
        "distributions": _distributions(rep),
        "readings": _readings(rep),
        "visibility": _visibility(rep),
        "blind": _blind(rep) + _text_probe(rep),
        "changes": _changes(rep.get("changes")),
        "lost": _lost(rep),
        "fixes": _fixes(rep.get("fixes") or {}),
        "verification": _verification(rep.get("verification")),
    }
    banner = ""
    if rep["failures"]:
        failed = len(rep["failures"])
        banner = f'<p class="warn">{failed} unit(s) failed in this build: see <a href="#lost">failures</a>.</p>'
    nav = "<nav>" + "".join(f'<a href="#{k}">{_e(t)}</a>' for k, t in SECTIONS) + "</nav>"
    sections = "\n".join(f'<section id="{k}"><h2>{_e(t)}</h2>\n{body[k]}\n</section>' for k, t in SECTIONS)
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>VSI-Super-Wild build report</title><style>{_CSS}</style></head>\n"
        f"<body><main><h1>VSI-Super-Wild build report</h1>{nav}{banner}\n{sections}\n</main>{_VERIFY_LINKS}"
        "</body></html>\n"
    )
