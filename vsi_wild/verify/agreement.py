"""How consistently reviewers decide: `vsi-wild fixes agreement`.

When a second reviewer reviews a video (the queue's second, blind pass: `/queue?second=1`), their
decisions are kept in the fix file beside the first reviewer's (each fix records ``by``; the later
decision counts for the metadata). For every item two reviewers both decided, this compares them:

- **merges**: ``review_pair`` decisions (merge | apart);
- **VMR directions**: a clip's direction as each reviewer left it, as VMR's answer sector (8 labels)
  or ``none``: their ``motion`` fix, else, when they marked the clip verified, the automatic one;
- **question verdicts**: ``review_question`` (accept | reject), compared only between verdicts on
  the same answers (a verdict records the answers its reviewer saw: after a fix changed them, the
  two judged different questions).

Per category and pair of reviewers: items both decided, agreements, percent agreement and Cohen's
kappa (agreement beyond what each reviewer's own rates give by chance), and every disagreement.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from typing import Any

from vsi_wild.stages.qa.vmr import sector  # VMR's own answer label of a direction

CATEGORIES = {
    "merges": "merges (review pairs)",
    "vmr": "VMR directions (answer sector)",
    "questions": "question verdicts",
    "specks": "specks (the instance each shows)",
}


def decisions(
    video_id: str, fixes: list[dict[str, Any]], verified_by: dict[int, list[str]], automatic: dict[int, str]
) -> dict[str, dict[tuple, dict[str, str]]]:
    """category -> item -> reviewer -> their (latest) decision, from one video's fix file, the
    clips each reviewer marked verified and the automatic sector of each clip."""
    out: dict[str, dict[tuple, dict[str, str]]] = {c: defaultdict(dict) for c in CATEGORIES}
    for f in fixes:
        who = f.get("by")
        if not who:
            continue
        op = f.get("op")
        item: tuple[Any, ...]
        if op == "review_pair":
            item = (video_id, "pair", f["clip_a"], f["local_a"], f["clip_b"], f["local_b"])
            out["merges"][item][who] = f["decision"]
        elif op == "review_question":
            seen = ", ".join(f.get("answers") or [])  # "" when the fix recorded none
            out["questions"][(video_id, "question", f["question"], seen)][who] = f["verdict"]
        elif op == "speck":
            out["specks"][(video_id, "speck", f["clip"], f["local_id"])][who] = str(f["instance"])
        elif op == "motion":
            value = (
                "none"
                if f.get("state") == "none"
                else sector(f["angle_deg"])
                if f.get("angle_deg") is not None
                else automatic.get(f["clip"], "?")
            )
            out["vmr"][(video_id, "clip", f["clip"])][who] = value
    for clip, reviewers in verified_by.items():  # a clip verified as it was: the automatic direction
        item = (video_id, "clip", clip)
        for who in reviewers:
            out["vmr"][item].setdefault(who, automatic.get(clip, "?"))
    return out


def kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters' labels (None when chance agreement is total)."""
    n = len(pairs)
    if not n:
        return None
    observed = sum(a == b for a, b in pairs) / n
    ca, cb = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    expected = sum(ca[k] * cb[k] for k in set(ca) | set(cb)) / (n * n)
    return None if expected >= 1.0 else (observed - expected) / (1.0 - expected)


def compare(per_video: list[dict[str, dict[tuple, dict[str, str]]]]) -> dict[str, Any]:
    """The agreement report over videos (each ``decisions``' output)."""
    merged: dict[str, dict[tuple, dict[str, str]]] = {c: {} for c in CATEGORIES}
    for d in per_video:
        for c in CATEGORIES:
            merged[c].update(d[c])
    reviewers = sorted({r for c in merged.values() for by in c.values() for r in by})
    report: dict[str, Any] = {"reviewers": reviewers, "categories": {}, "disagreements": []}
    for c, label in CATEGORIES.items():
        rows = []
        for a, b in itertools.combinations(reviewers, 2):
            both = [(item, by[a], by[b]) for item, by in sorted(merged[c].items()) if a in by and b in by]
            agree = sum(x == y for _, x, y in both)
            k = kappa([(x, y) for _, x, y in both])
            rows.append(
                {
                    "reviewers": [a, b],
                    "both": len(both),
                    "agree": agree,
                    "percent": None if not both else 100.0 * agree / len(both),
                    "kappa": k,
                }
            )
            report["disagreements"] += [
                {"category": c, "item": list(item), a: x, b: y} for item, x, y in both if x != y
            ]
        report["categories"][c] = {
            "label": label,
            "decided": len(merged[c]),
            "by_two_or_more": sum(len(by) >= 2 for by in merged[c].values()),
            "pairs": rows,
        }
    return report


def lines(report: dict[str, Any]) -> list[str]:
    """The report as a person reads it."""
    if len(report["reviewers"]) < 2:
        who = ", ".join(report["reviewers"]) or "nobody"
        return [
            f"decisions by {who}: agreement needs two reviewers deciding the same items "
            "(a second reviewer reviews blind with /queue?second=1)"
        ]
    out = [f"agreement of {len(report['reviewers'])} reviewers ({', '.join(report['reviewers'])})"]
    for c in report["categories"].values():
        for r in c["pairs"]:
            a, b = r["reviewers"]
            if not r["both"]:
                out.append(f"  {c['label']}: {a} and {b} decided no item in common")
                continue
            k = "n/a" if r["kappa"] is None else f"{r['kappa']:.2f}"
            out.append(
                f"  {c['label']}: {a} and {b} both decided {r['both']}, agree on {r['agree']} "
                f"({r['percent']:.1f}%), Cohen's kappa {k}"
            )
    if report["disagreements"]:
        out.append("disagreements:")
        for d in report["disagreements"]:
            item = d["item"]
            what = {
                "pair": lambda i: f"pair clip {i[2]} #{i[3]} · clip {i[4]} #{i[5]}",
                "clip": lambda i: f"VMR clip {i[2]}",
                "question": lambda i: f"question {i[2]}" + (f" (answer {i[3]})" if i[3] else ""),
                "speck": lambda i: f"speck clip {i[2]} #{i[3]}",
            }[item[1]](item)
            votes = ", ".join(f"{k} {v}" for k, v in d.items() if k not in ("category", "item"))
            out.append(f"  {item[0]} {what}: {votes}")
    return out
