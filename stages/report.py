"""The build report: what the benchmark contains, how its answers are spread, whether blind
baselines can answer it, and what was lost on the way (failed or skipped units, by class)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from vsi_wild.stages import evaluate as ev
from vsi_wild.stages.qa.registry import NUMBER, task, tasks


def build_report(rows: Sequence[Mapping[str, Any]], status: Sequence[Mapping[str, Any]],
                 sources: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``rows``: the rich export (schema.QA_EXPORT) of every split; ``status``: schema.STATUS rows;
    ``sources``: probed schema.SOURCE rows."""
    release = [r for r in rows if r["split"] == "release"]
    rep: dict[str, Any] = {"questions": {}, "splits": dict(Counter(r["split"] for r in rows))}
    by_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in release:
        by_task[r["task_type"]].append(r)
    for name, rs in sorted(by_task.items()):
        t = task(name)
        entry: dict[str, Any] = {"n": len(rs), "subtypes": dict(Counter(r["subtype"] for r in rs)),
                                 "videos": len({r["video_name"] for r in rs})}
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
    rep["sources"] = {"n": len(sources), "hours": sum(durations) / 3600 if durations else 0.0,
                      "origins": dict(Counter(s["origin"] for s in sources))}
    lost: dict[str, Counter] = defaultdict(Counter)
    for s in status:
        if s["state"] in ("failed", "skipped"):
            lost[s["stage"]][s["error_class"] or s["state"]] += 1
    rep["lost"] = {k: dict(v) for k, v in sorted(lost.items())}
    rep["failures"] = [{"stage": s["stage"], "unit": s["unit"], "error": s["error"]}
                       for s in status if s["state"] == "failed"][:50]
    return rep


def render_markdown(rep: Mapping[str, Any]) -> str:
    out = ["# VSI-Super-Wild build report", ""]
    src = rep["sources"]
    out += [f"Sources: {src['n']} ({src['hours']:.2f} h; " + ", ".join(f"{k} {v}" for k, v in src["origins"].items()) + ")", ""]
    out += ["## Questions (release split)", "", "| task | questions | videos | subtypes | answers |", "|---|---|---|---|---|"]
    for name, e in rep["questions"].items():
        subtypes = ", ".join(f"{k} {v}" for k, v in e["subtypes"].items())
        answers = (f"min {e['answers']['min']} · median {e['answers']['median']} · max {e['answers']['max']}"
                   if "answers" in e else "letters " + " ".join(f"{k}:{v}" for k, v in e["letters"].items()))
        out.append(f"| {name} | {e['n']} | {e['videos']} | {subtypes} | {answers} |")
    out += ["", "Splits: " + ", ".join(f"{k} {v}" for k, v in rep["splits"].items())]
    for t in tasks():  # each task's own section
        if t.report_section and t.name in rep["questions"]:
            out += t.report_section(rep["questions"][t.name])
    out += [""]
    if rep.get("blind"):
        b = rep["blind"]
        out += ["## Blind baselines (no video)", "",
                f"A task is flagged when a baseline beats chance ({b['chance']:.0%}) by more than {b['margin']:.0%}.", "",
                "| baseline | " + " | ".join(sorted(next(iter(b["baselines"].values())).keys())) + " |",
                "|---|" + "---|" * len(next(iter(b["baselines"].values()))) ]
        for name, scores in b["baselines"].items():
            out.append(f"| {name} | " + " | ".join(f"{scores[t]:.3f}" for t in sorted(scores)) + " |")
        out += ["", ("Leaks: " + ", ".join(f"{x['task']} ({x['best_blind_accuracy']:.0%})" for x in b["leaks"]))
                if b["leaks"] else "No task is answerable blind beyond the margin.", ""]
        if b.get("too_few"):
            out += [f"Too few questions to judge ({b['min_n']} needed): {', '.join(b['too_few'])}.", ""]
        out += [f"({t.name} is scored with {t.metric.name}: the median-count prior's score, not an accuracy.)"
                for t in tasks() if t.kind == NUMBER] + [""]
    out += ["## Lost on the way", ""]
    if rep["lost"]:
        for stage, classes in rep["lost"].items():
            out.append(f"- {stage}: " + ", ".join(f"{k} {v}" for k, v in classes.items()))
        for f in rep["failures"]:
            out.append(f"  - failed {f['stage']}:{f['unit']}: {f['error']}")
    else:
        out.append("Nothing: every unit completed.")
    return "\n".join(out) + "\n"
