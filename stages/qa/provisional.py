"""Which questions rest on a reconciliation decision that no person has reviewed yet.

Reconciliation leaves its uncertain decisions for review (``schema.MERGE_DECISIONS``' ``review``)
while the metadata takes the more likely one; the metadata stage lists those no fix has resolved
(``schema.REVIEW_PENDING``). A VOC question of a concept with such an item rests on it (reversing a
merge or a split changes the count); a VOO question rests on its four concepts' items (reversing
one may move a concept's first or last real sighting; marked whenever it could, which says more
than it must rather than less). Every other question is not provisional.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa


def _describe(items: list[dict]) -> str:
    shown = sorted(items, key=lambda d: (-d["answer_impact"], abs(d["posterior"] - 0.5)))[:3]
    parts = [
        f"{d['concept']} clip {d['clip_a']} #{d['local_a']} / clip {d['clip_b']} #{d['local_b']} "
        f"({'merged' if d['decision'] == 'merge' else 'apart'}, P(same) {d['posterior']:.2f})"
        for d in shown
    ]
    more = f" and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
    return f"rests on {len(items)} unreviewed reconciliation decision(s): " + "; ".join(parts) + more


def mark(questions: pa.Table, pending: Iterable[dict]) -> pa.Table:
    """``questions`` (``schema.QA_QUESTIONS``) with ``provisional`` and ``provisional_reason`` set."""
    by_concept: dict[str, list[dict]] = {}
    for d in pending:
        by_concept.setdefault(d["concept"], []).append(d)
    flags, reasons = [], []
    for task, concepts in zip(questions["task_type"].to_pylist(), questions["concepts"].to_pylist(), strict=True):
        items = [d for c in (concepts or []) for d in by_concept.get(c, [])] if task in ("VOC", "VOO") else []
        flags.append(bool(items))
        reasons.append(_describe(items) if items else None)
    out = questions
    for name, values, typ in (("provisional", flags, pa.bool_()), ("provisional_reason", reasons, pa.string())):
        i = out.schema.get_field_index(name)
        out = out.set_column(i, out.schema.field(i), pa.array(values, type=typ))
    return out
