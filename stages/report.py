"""The build report: what the benchmark contains, how its answers are spread, whether blind
baselines can answer it, and what was lost on the way (failed or skipped units, by class).

``build_report`` computes the numbers (report.json); ``render_markdown`` writes report.md. The
paper's statistics (``paper_statistics``: view videos, hours and shares per scene category, duration
bins, concept and answer spreads, the letter balance test) feed the HTML page's plots
(``report_plots``, ``report_html``); what changed since another build is ``report_diff``'s.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vsi_wild.stages import evaluate as ev
from vsi_wild.stages.qa.registry import MC, NUMBER, QATask, task, tasks

UNCATEGORISED = "uncategorised"  # a source whose scene category is not known (local files, the sample)
TOP_CONCEPTS = 10


def build_report(
    rows: Sequence[Mapping[str, Any]], status: Sequence[Mapping[str, Any]], sources: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """``rows``: the rich export (schema.QA_EXPORT) of every split; ``status``: schema.STATUS rows;
    ``sources``: probed schema.SOURCE rows."""
    release = [r for r in rows if r["split"] == "release"]
    rep: dict[str, Any] = {"questions": {}, "splits": dict(Counter(r["split"] for r in rows))}
    by_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in release:
        by_task[r["task_type"]].append(r)
    for name, rs in sorted(by_task.items()):
        t = task(name)
        entry: dict[str, Any] = {
            "n": len(rs),
            "subtypes": dict(Counter(r["subtype"] for r in rs)),
            "videos": len({r["video_name"] for r in rs}),
        }
        if t.kind == NUMBER:
            answers = sorted(int(r["answer"]) for r in rs)
            entry["answers"] = {"min": answers[0], "median": statistics.median(answers), "max": answers[-1]}
        else:
            entry["letters"] = dict(sorted(Counter(r["answer"] for r in rs).items()))
            entry["answer_texts"] = dict(Counter(r["answer_text"] for r in rs).most_common(8))
        if t.summarise:
            entry.update(t.summarise(rs))
        entry["duration_bins"] = dict(Counter(ev.duration_bin(r["duration_s"] / 60) for r in rs))
        rep["questions"][name] = entry
    rep["blind"] = ev.blind_report(release) if release else {}
    durations = [s["duration_s"] for s in sources if s.get("duration_s")]
    rep["sources"] = {
        "n": len(sources),
        "hours": sum(durations) / 3600 if durations else 0.0,
        "origins": dict(Counter(s["origin"] for s in sources)),
    }
    lost: dict[str, Counter] = defaultdict(Counter)
    for s in status:
        if s["state"] in ("failed", "skipped"):
            lost[s["stage"]][s["error_class"] or s["state"]] += 1
    rep["lost"] = {k: dict(v) for k, v in sorted(lost.items())}
    rep["failures"] = [
        {"stage": s["stage"], "unit": s["unit"], "error": s["error"]} for s in status if s["state"] == "failed"
    ][:50]
    rep["statistics"] = paper_statistics(release, sources)
    return rep


def video_id_of(row: Mapping[str, Any]) -> str:
    return row.get("video_id") or row["video_name"].removesuffix(".mp4")


def paper_statistics(release: Sequence[Mapping[str, Any]], sources: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The paper's statistics of the release rows: view videos and hours, per scene category
    (count and duration shares), videos per duration bin per category, and per task the spreads
    the plots show. A task's plots follow from its columns: concepts (VOO, VOC), a number answer
    (VOC), motion angles (VMR), render offsets (VPO), subtypes (VOO first | last)."""
    category = {s["source_id"]: s.get("category") or UNCATEGORISED for s in sources if s.get("source_id")}
    videos: dict[str, tuple[str, float]] = {}
    for r in release:
        videos[video_id_of(r)] = (category.get(r["source_id"], UNCATEGORISED), float(r["duration_s"] or 0.0))
    total_s = sum(d for _, d in videos.values())
    per_cat: dict[str, dict[str, Any]] = {}
    bins: dict[str, Counter] = defaultdict(Counter)
    for cat, duration in videos.values():
        e = per_cat.setdefault(cat, {"videos": 0, "seconds": 0.0})
        e["videos"] += 1
        e["seconds"] += duration
        bins[cat][ev.duration_bin(duration / 60)] += 1
    categories = {
        cat: {
            "videos": e["videos"],
            "hours": e["seconds"] / 3600,
            "count_share": e["videos"] / len(videos),
            "duration_share": e["seconds"] / total_s if total_s else 0.0,
        }
        for cat, e in sorted(per_cat.items())
    }
    by_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in release:
        by_task[r["task_type"]].append(r)
    per_task = {}
    for t in tasks():
        rs = by_task.get(t.name, [])
        if rs:
            per_task[t.name] = _task_statistics(t, rs)
    return {
        "videos": len(videos),
        "hours": total_s / 3600,
        "categories": categories,
        "duration_bins": {cat: dict(c) for cat, c in sorted(bins.items())},
        "tasks": per_task,
    }


def _task_statistics(t: QATask, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    counted = Counter(r["subtype"] for r in rows)
    # the declared subtypes first, asked or not (VMR cardinal 0 says something), then any other
    out: dict[str, Any] = {
        "subtypes": {
            **{st: counted.get(st, 0) for st in t.subtypes},
            **dict(sorted((k, v) for k, v in counted.items() if k not in t.subtypes)),
        }
    }
    concepts = Counter(c for r in rows for c in (r.get("concepts") or []))
    if concepts:
        out["top_concepts"] = dict(sorted(concepts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_CONCEPTS])
    if t.kind == NUMBER:
        out["answer_histogram"] = {str(k): v for k, v in sorted(Counter(int(r["answer"]) for r in rows).items())}
    angles = [(float(r["angle_deg"]), r["subtype"]) for r in rows if r.get("angle_deg") is not None]
    if angles:
        out["angles"] = [{"angle_deg": a, "subtype": st} for a, st in angles]
    offsets = [float(o) for r in rows for o in (r.get("render_offset_deg") or [])]
    if offsets:
        out["render_offsets_deg"] = offsets
    if t.kind == MC:
        out["letter_balance"] = letter_balance(Counter(r["answer"] for r in rows))
    return out


def letter_balance(letters: Mapping[str, int]) -> dict[str, Any]:
    """Chi-square test of the answer letters against a uniform spread over A-D."""
    from scipy.stats import chisquare

    counts = [int(letters.get(x, 0)) for x in ev.LETTERS]
    if sum(counts) == 0:
        return {"counts": dict(zip(ev.LETTERS, counts, strict=True)), "chi2": None, "p": None}
    res = chisquare(counts)
    return {"counts": dict(zip(ev.LETTERS, counts, strict=True)), "chi2": float(res.statistic), "p": float(res.pvalue)}


def render_markdown(rep: Mapping[str, Any]) -> str:
    out = ["# VSI-Super-Wild build report", ""]
    src = rep["sources"]
    out += [
        f"Sources: {src['n']} ({src['hours']:.2f} h; " + ", ".join(f"{k} {v}" for k, v in src["origins"].items()) + ")",
        "",
    ]
    out += [
        "## Questions (release split)",
        "",
        "| task | questions | videos | subtypes | answers |",
        "|---|---|---|---|---|",
    ]
    for name, e in rep["questions"].items():
        subtypes = ", ".join(f"{k} {v}" for k, v in e["subtypes"].items())
        answers = (
            f"min {e['answers']['min']} · median {e['answers']['median']} · max {e['answers']['max']}"
            if "answers" in e
            else "letters " + " ".join(f"{k}:{v}" for k, v in e["letters"].items())
        )
        out.append(f"| {name} | {e['n']} | {e['videos']} | {subtypes} | {answers} |")
    out += ["", "Splits: " + ", ".join(f"{k} {v}" for k, v in rep["splits"].items())]
    for t in tasks():  # each task's own section
        if t.report_section and t.name in rep["questions"]:
            out += t.report_section(rep["questions"][t.name])
    out += [""]
    if rep.get("blind"):
        b = rep["blind"]
        out += [
            "## Blind baselines (no video)",
            "",
            f"A task is flagged when a baseline beats chance ({b['chance']:.0%}) by more than {b['margin']:.0%}.",
            "",
            "| baseline | " + " | ".join(sorted(next(iter(b["baselines"].values())).keys())) + " |",
            "|---|" + "---|" * len(next(iter(b["baselines"].values()))),
        ]
        for name, scores in b["baselines"].items():
            out.append(f"| {name} | " + " | ".join(f"{scores[t]:.3f}" for t in sorted(scores)) + " |")
        out += [
            "",
            ("Leaks: " + ", ".join(f"{x['task']} ({x['best_blind_accuracy']:.0%})" for x in b["leaks"]))
            if b["leaks"]
            else "No task is answerable blind beyond the margin.",
            "",
        ]
        if b.get("too_few"):
            out += [f"Too few questions to judge ({b['min_n']} needed): {', '.join(b['too_few'])}.", ""]
        out += [
            f"({t.name} is scored with {t.metric.name}: the median-count prior's score, not an accuracy.)"
            for t in tasks()
            if t.kind == NUMBER
        ] + [""]
    out += ["## Lost on the way", ""]
    if rep["lost"]:
        for stage, classes in rep["lost"].items():
            out.append(f"- {stage}: " + ", ".join(f"{k} {v}" for k, v in classes.items()))
        for f in rep["failures"]:
            out.append(f"  - failed {f['stage']}:{f['unit']}: {f['error']}")
    else:
        out.append("Nothing: every unit completed.")
    if "readings" in rep:
        out += _readings_markdown(rep["readings"])
    out += _statistics_markdown(rep["statistics"])
    out += answer_controls_markdown(rep.get("answer_controls"))
    out += text_probe_markdown(rep.get("text_probe"))
    if "fixes" in rep:
        out += ["", "## Human fixes applied", ""]
        out += [f"- {v}: " + "; ".join(lines) for v, lines in rep["fixes"].items()] or ["None."]
    if rep.get("visibility"):
        out += _visibility_markdown(rep["visibility"])
    if "changes" in rep:
        out += ["", "## What changed since the previous build", ""] + _changes_markdown(rep["changes"])
    if rep.get("letter_moves"):
        out += [
            "",
            "## Answer letters the balance bound moved",
            "",
            "Questions that kept their identity but whose answer letter had to move so that every "
            "task, subtype and answer text stays within the letter balance bound (stages/ledger.py):",
            "",
        ]
        out += [
            f"- {m['doc_id']}: {m['moved_from']} → {m['answer']} ({m['moved_stratum']})" for m in rep["letter_moves"]
        ]
    if rep.get("forced_out"):
        out += [
            "",
            "## Questions the balance bounds forced out",
            "",
            "Asked by the previous build, left out now because the answer balance or the text debiasing "
            "could not hold its bound otherwise:",
            "",
        ]
        out += [f"- {m['doc_id']} ({m['state']}): {m['reason']}" for m in rep["forced_out"]]
    return "\n".join(out) + "\n"


def _statistics_markdown(st: Mapping[str, Any]) -> list[str]:
    out = ["", "## Scene categories", "", f"View videos: {st['videos']} ({st['hours']:.2f} h)", ""]
    if not st["categories"]:
        return out + ["No view video has questions."]
    out += ["| category | videos | by count | hours | by duration |", "|---|---|---|---|---|"]
    out += [
        f"| {c} | {e['videos']} | {e['count_share']:.2%} | {e['hours']:.2f} | {e['duration_share']:.2%} |"
        for c, e in st["categories"].items()
    ]
    balance = [
        f"{t} chi2 {e['letter_balance']['chi2']:.2f} (p {e['letter_balance']['p']:.3g})"
        for t, e in st["tasks"].items()
        if (e.get("letter_balance") or {}).get("p") is not None
    ]
    if balance:
        out += ["", "Answer letter balance: " + ", ".join(balance)]
    return out


def _changes_markdown(changes: Mapping[str, Any] | None) -> list[str]:
    if changes is None:
        return ["No previous build of this data root to compare with."]
    out = [
        f"Compared with {changes['previous']}: {changes['added']} added, {changes['removed']} removed, "
        f"{changes['changed']} changed; of the questions in both, {changes.get('letters', 0)} answer letters, "
        f"{changes.get('order', 0)} option orders and {changes.get('doc_ids', 0)} doc ids moved."
    ]
    if changes["stage_versions"]:
        out.append("Stage versions: " + ", ".join(f"{s} {a} → {b}" for s, (a, b) in changes["stage_versions"].items()))
    for v, c in changes["per_video"].items():
        out.append(
            f"- {v}: {c['added']} added, {c['removed']} removed, {c['changed']} changed, "
            f"{c.get('letters', 0)} letters and {c.get('order', 0)} orders moved"
            + (f" ({'; '.join(c['causes'])})" if c["causes"] else "")
        )
    if changes["changed_questions"]:
        out += ["", "| task | video | question | before | after |", "|---|---|---|---|---|"]
        out += [
            f"| {c['task_type']} | {c['video_id']} | {c['question']} "
            f"| {c['before']['answer']} | {c['after']['answer']} |"
            for c in changes["changed_questions"]
        ]
    return out


# ------------------------------------------------------------------------------------ the text probe
DEFAULT_REFERENCE_QA = "../shared/reference/vsi_super_wild_qa.jsonl"


class ReportParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    reference_qa: str | None = Field(
        DEFAULT_REFERENCE_QA,
        description="the public release's QA file (release-format jsonl) the text-only leak "
        "probe also runs on, so that the report compares the build with it; relative: to the working directory; "
        "None, or a file that is not there: the report says so",
    )


def text_probe_summary(
    build: Mapping[str, Any], reference: Mapping[str, Any], dropped: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """report.json's ``text_probe``: the probe on this build's release rows and on the public release
    (``leak_probe.ProbeResult.as_json`` each; the reference: or a ``note`` why it is absent), and what
    ``qa.debias_text`` dropped (schema.TEXT_DEBIAS rows; None: the setting is off)."""
    out: dict[str, Any] = {"build": dict(build), "reference": dict(reference)}
    if dropped is not None:
        out["debias_dropped"] = dict(sorted(Counter(d["task_type"] for d in dropped).items()))
    return out


def text_probe_markdown(tp: Mapping[str, Any] | None) -> list[str]:
    """The report's section on the text-only probe: per task, this build beside the public release."""
    if not tp:
        return []
    out = [
        "",
        "## Text-only leak probe",
        "",
        "A classifier of the question and option texts alone (TF-IDF + logistic regression; VOC: a ridge "
        f"regression scored by MRA against the best constant answer), {tp['build']['folds']}-fold out of fold with "
        "the folds grouped by source video (a task from one source only: by view video, and never flagged, as "
        "its views share one world). A task is flagged when the probe beats chance by more than "
        f"{tp['build']['margin']:.0%} on at least {tp['build']['min_n']} "
        f"questions (binomial p < {tp['build']['alpha']}).",
        "",
    ]
    ref = tp["reference"]
    ref_tasks = {e["task"]: e for e in ref.get("tasks", [])}
    out += [
        "| task | metric | this build: probe · chance (n) | public release: probe · chance (n) |",
        "|---|---|---|---|",
    ]

    def cell(e: Mapping[str, Any] | None) -> str:
        if not e:
            return "-"
        if e["probe"] is None:
            return f"not probed ({e.get('note', '')})"
        by_view = " (folds by view video)" if e.get("grouped_by") == "view video" else ""
        return f"{e['probe']:.3f} · {e['chance']:.3f} ({e['n']})" + (" **flagged**" if e["flagged"] else "") + by_view

    build_tasks = {e["task"]: e for e in tp["build"]["tasks"]}
    for name in [*build_tasks, *(t for t in ref_tasks if t not in build_tasks)]:
        e = build_tasks.get(name) or ref_tasks[name]
        out.append(f"| {name} | {e['metric']} | {cell(build_tasks.get(name))} | {cell(ref_tasks.get(name))} |")
    if "note" in ref:
        out += ["", f"Public release: {ref['note']}"]
    flagged = tp["build"]["flagged"]
    out += ["", ("Flagged in this build: " + ", ".join(flagged)) if flagged else "No task of this build is flagged."]
    if "debias_dropped" in tp:
        d = tp["debias_dropped"]
        out += [
            "",
            "Dropped by qa.debias_text (text_debias.parquet): "
            + (", ".join(f"{t} {n}" for t, n in d.items()) if d else "none (no task's probe to prune)."),
        ]
    return out


# ------------------------------------------------------------------------------------ answer controls
def answer_controls(release: Sequence[Mapping[str, Any]], public: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """report.json's ``answer_controls``: the answer texts the export's balance left per task and
    subtype (``qa.balance.answer_histograms``), the VOC count priors (``evaluate.voc_priors``: the
    best constant answer, the leave-one-source-out per-concept median) on this build and, by the
    same code, on the public release's rows (``public``; None: not available), and the release
    questions per difficulty and horizon bin (``qa.difficulty``)."""
    from vsi_wild.stages.qa.balance import answer_histograms

    strata: dict[str, dict[str, Counter]] = defaultdict(lambda: {"difficulty": Counter(), "horizon": Counter()})
    for r in release:
        if r.get("difficulty_bin"):
            strata[r["task_type"]]["difficulty"][r["difficulty_bin"]] += 1
        if r.get("horizon_bin"):
            strata[r["task_type"]]["horizon"][r["horizon_bin"]] += 1
    return {
        "answer_texts": answer_histograms(release),
        "voc_priors": {
            "build": ev.voc_priors(release),
            "public": ev.voc_priors(public) if public is not None else None,
        },
        "strata": {t: {k: dict(sorted(c.items())) for k, c in e.items()} for t, e in sorted(strata.items())},
    }


def answer_controls_markdown(ac: Mapping[str, Any] | None) -> list[str]:
    """The report's section on the answer distributions, the VOC priors and the difficulty strata."""
    if not ac:
        return []
    out = [
        "",
        "## Answer distributions and difficulty",
        "",
        "Largest share of one answer text per task and subtype, after the export's balance (qa.max_answer_ratio, "
        "qa.voc_max_answer_share):",
        "",
        "| task | subtype | questions | distinct answers | largest share | most common |",
        "|---|---|---|---|---|---|",
    ]
    for t, by_subtype in ac["answer_texts"].items():
        for st, h in by_subtype.items():
            common = ", ".join(f"{k} {v}" for k, v in list(h["top"].items())[:3])
            out.append(f"| {t} | {st} | {h['n']} | {h['distinct']} | {h['max_share']:.1%} | {common} |")
    vp = ac["voc_priors"]

    def priors(p: Mapping[str, Any] | None) -> str:
        if not p:
            return "n/a"
        return (
            f"best constant {p['best_constant']['answer']}: MRA {p['best_constant']['mra']:.3f} · "
            f"per-concept median prior: MRA {p['median_prior_mra']:.3f} ({p['n']} questions)"
        )

    out += [
        "",
        "VOC count priors (the same code on both):",
        "",
        f"- this build: {priors(vp['build'])}",
        "- public release: "
        f"{priors(vp['public']) if vp['public'] is not None else 'not available (report.reference_qa)'}",
    ]
    if vp["build"] and vp["public"]:
        ok = vp["build"]["median_prior_mra"] <= vp["public"]["median_prior_mra"]
        out.append(
            "- the median prior scores "
            + (
                "no higher here than on the public release."
                if ok
                else "HIGHER here than on the public release: the counts are guessable."
            )
        )
    if ac["strata"]:
        out += ["", "| task | near · medium · far | early · middle · late |", "|---|---|---|"]
        for t, e in ac["strata"].items():
            d, h = e["difficulty"], e["horizon"]
            out.append(
                f"| {t} | {d.get('near', 0)} · {d.get('medium', 0)} · {d.get('far', 0)} | "
                f"{h.get('early', 0)} · {h.get('middle', 0)} · {h.get('late', 0)} |"
            )
    return out


def readings_summary(skipped: Sequence[Mapping[str, Any]], examples: int = 3) -> dict[str, dict[str, Any]]:
    """report.json's ``readings``: per task, what was not asked because a reasonable reading of the
    question gives another answer (the export's skipped.parquet rows with a ``reading``,
    stages/qa/readings.py): how many, how many per reading, and the first ``examples`` reasons."""
    out: dict[str, dict[str, Any]] = {}
    for t in tasks():
        rows = [r for r in skipped if r["task_type"] == t.name and r.get("reading")]
        out[t.name] = {
            "n": len(rows),
            "by_reading": dict(sorted(Counter(r["reading"] for r in rows).items())),
            "examples": [f"{r['video_id']} {r['item']}: {r['reason']}" for r in rows[:examples]],
        }
    return out


def _readings_markdown(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out = [
        "",
        "## Not asked: more than one right answer",
        "",
        "Questions (VOC: counts) whose answer a reasonable reading of the question changes, from the metadata "
        "(qa.stable_answers; the rows are in exports/skipped.parquet with the reading).",
        "",
        "| task | not asked | under which reading |",
        "|---|---|---|",
    ]
    for name, e in summary.items():
        out.append(
            f"| {name} | {e['n']} | " + (", ".join(f"{k} {v}" for k, v in e["by_reading"].items()) or "-") + " |"
        )
    examples = [x for e in summary.values() for x in e["examples"]]
    if examples:
        out += ["", "For example:"] + [f"- {x}" for x in examples]
    return out


def visibility_summary(tracks: Sequence[Mapping[str, Any]], step_s: float) -> dict[str, dict[str, Any]]:
    """Per concept, from every video's visibility tracks (schema.VISIBILITY rows; video_id,
    instance_id, concept, state suffice): its instances, the seconds each is visible (``step_s``
    per visible timestamp: median and longest), and how its unobserved timestamps split between
    out_of_view, occluded and not_seen."""
    visible: dict[str, Counter] = defaultdict(Counter)  # concept -> (video, instance) -> visible timestamps
    states: dict[str, Counter] = defaultdict(Counter)
    for r in tracks:
        key = (r["video_id"], r["instance_id"])
        visible[r["concept"]][key] += r["state"] == "visible"
        if r["state"] != "visible":
            states[r["concept"]][r["state"]] += 1
    out = {}
    for concept in sorted(visible):
        seconds = sorted(n * step_s for n in visible[concept].values())
        unseen = sum(states[concept].values())
        out[concept] = {
            "instances": len(seconds),
            "median_visible_s": statistics.median(seconds),
            "max_visible_s": seconds[-1],
            "unobserved": {k: states[concept][k] / unseen for k in ("out_of_view", "occluded", "not_seen")}
            if unseen
            else {},
        }
    return out


def _visibility_markdown(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out = [
        "",
        "## Visibility per concept",
        "",
        "Seconds each instance is visible (metadata/visibility.parquet, over every view video), and where it "
        "is when not observed: out of the view's frustum, in it but occluded (or too small to segment), or "
        "not known (no consistent position).",
        "",
        "| concept | instances | visible s per instance: median "
        "| max | unobserved: out of view · occluded · not seen |",
        "|---|---|---|---|---|",
    ]
    for concept, e in summary.items():
        u = e["unobserved"]
        split = " · ".join(f"{u[k]:.0%}" for k in ("out_of_view", "occluded", "not_seen")) if u else "-"
        out.append(
            f"| {concept} | {e['instances']} | {e['median_visible_s']:.1f} | {e['max_visible_s']:.1f} | {split} |"
        )
    return out
