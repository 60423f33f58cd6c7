"""The report's plots (matplotlib, Agg), drawn from ``report.statistics`` and the per-task
question entries of ``report.build_report``, as PNG bytes.

Deterministic: the same numbers give the same bytes (no randomness, the PNG's Software and date
tags left out). A plot with nothing to show says "no data" instead.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vsi_wild.stages.evaluate import DURATION_BINS_MIN, LETTERS, duration_bin

BIN_LABELS = [duration_bin(lo) for lo, _ in DURATION_BINS_MIN]
DPI = 80
SIZE = (6.4, 3.6)


@dataclass(frozen=True)
class Plot:
    key: str  # anchor and file stem: letters, digits and dashes
    title: str
    png: bytes


def _figure(title: str, polar: bool = False, ncols: int = 1) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = SIZE[0] if ncols == 1 else min(3.4 * ncols, 12.0)
    fig, axes = plt.subplots(
        1, ncols, figsize=(width, SIZE[1]), squeeze=False, subplot_kw={"projection": "polar"} if polar else None
    )
    fig.suptitle(title, fontsize=11)
    return fig, list(axes[0])


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _no_data(title: str) -> bytes:
    fig, (ax,) = _figure(title)
    ax.text(0.5, 0.5, "no data", ha="center", va="center", fontsize=16, color="#888888", transform=ax.transAxes)
    ax.set_axis_off()
    return _png(fig)


def _counts_axis(axis: Any) -> None:
    """Counts have integer ticks."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _grouped_bars(ax: Any, groups: Sequence[str], series: Mapping[str, Sequence[float]], legend: bool = False) -> None:
    """Bars of each series side by side in each group, with a legend naming the series (when
    there are several, or ``legend``)."""
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width=width, label=name)
    ax.set_xticks(range(len(groups)), groups)
    _counts_axis(ax.yaxis)
    if len(series) > 1 or legend:
        top = max((v for values in series.values() for v in values), default=0)
        ax.set_ylim(0, max(1, top) * 1.35)  # room for the legend above the bars
        ax.legend(fontsize=8, loc="upper right")


def duration_per_category(stats: Mapping[str, Any]) -> bytes:
    title = "Hours of view video per scene category"
    cats = stats["categories"]
    if not cats:
        return _no_data(title)
    fig, (ax,) = _figure(title)
    names = list(cats)
    from matplotlib.ticker import MaxNLocator

    hours = [cats[c]["hours"] for c in names]
    ax.barh(names, hours, color="#4c72b0")
    for y, c in enumerate(names):
        ax.text(cats[c]["hours"], y, f" {cats[c]['duration_share']:.1%}", va="center", fontsize=8)
    ax.set_xlim(0, max(max(hours), 1e-9) * 1.25)  # room for the share labels
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.set_xlabel("hours")
    ax.invert_yaxis()
    return _png(fig)


def videos_per_bin(stats: Mapping[str, Any]) -> bytes:
    title = "View videos per duration bin (minutes) and scene category"
    bins = stats["duration_bins"]
    if not bins:
        return _no_data(title)
    fig, (ax,) = _figure(title)
    _grouped_bars(ax, BIN_LABELS, {cat: [c.get(b, 0) for b in BIN_LABELS] for cat, c in bins.items()})
    ax.set_ylabel("videos")
    return _png(fig)


def questions_per_bin(questions: Mapping[str, Any]) -> bytes:
    title = "Questions per task and video duration bin (minutes)"
    if not questions:
        return _no_data(title)
    fig, (ax,) = _figure(title)
    _grouped_bars(ax, BIN_LABELS, {t: [e["duration_bins"].get(b, 0) for b in BIN_LABELS] for t, e in questions.items()})
    ax.set_ylabel("questions")
    return _png(fig)


def _per_task(
    title: str, tasks: Mapping[str, Any], field: str, draw: Callable[[Any, str, Any], None], polar: bool = False
) -> bytes:
    """One panel per task that has ``field``; "no data" when none has."""
    having = {t: e[field] for t, e in tasks.items() if e.get(field)}
    if not having:
        return _no_data(title)
    fig, axes = _figure(title, polar=polar, ncols=len(having))
    for ax, (name, value) in zip(axes, having.items(), strict=True):
        draw(ax, name, value)
    return _png(fig)


def top_concepts(stats: Mapping[str, Any]) -> bytes:
    def draw(ax: Any, name: str, counts: Mapping[str, int]) -> None:
        ax.barh(list(counts), list(counts.values()), color="#55a868")
        _counts_axis(ax.xaxis)
        ax.invert_yaxis()
        ax.set_title(name, fontsize=10)
        ax.tick_params(axis="y", labelsize=8)

    return _per_task("Most frequent concepts per task", stats["tasks"], "top_concepts", draw)


def answer_histogram(stats: Mapping[str, Any]) -> bytes:
    def draw(ax: Any, name: str, hist: Mapping[str, int]) -> None:
        ax.bar([int(k) for k in hist], list(hist.values()), width=0.8, color="#c44e52")
        _counts_axis(ax.xaxis)
        _counts_axis(ax.yaxis)
        ax.set_title(f"{name}: answers", fontsize=10)
        ax.set_xlabel("count")
        ax.set_ylabel("questions")

    return _per_task("Count answers (VOC)", stats["tasks"], "answer_histogram", draw)


def direction_rose(stats: Mapping[str, Any]) -> bytes:
    """Answer angles in 16 sectors of 22.5° (0 = forward, clockwise), cardinal and diagonal apart."""

    def draw(ax: Any, name: str, angles: Sequence[Mapping[str, Any]]) -> None:
        sectors = 16
        width = 2 * math.pi / sectors
        subtypes = sorted({a["subtype"] for a in angles})
        bottom = [0] * sectors
        for st in subtypes:
            counts = [0] * sectors
            for a in angles:
                if a["subtype"] == st:
                    counts[int(((a["angle_deg"] % 360) + 11.25) // 22.5) % sectors] += 1
            ax.bar([i * width for i in range(sectors)], counts, width=width * 0.9, bottom=bottom, label=st)
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        _counts_axis(ax.yaxis)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_theta_zero_location("N")
        ax.set_theta_direction(-1)
        ax.set_title(f"{name}: motion directions", fontsize=10)
        ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(1.0, 0.0))

    return _per_task("Direction answers (VMR), cardinal vs diagonal", stats["tasks"], "angles", draw, polar=True)


def rotation_offsets(stats: Mapping[str, Any]) -> bytes:
    def draw(ax: Any, name: str, offsets: Sequence[float]) -> None:
        ax.hist(offsets, bins=24, range=(-180, 180), color="#8172b2")
        ax.set_title(f"{name}: render yaw offsets", fontsize=10)
        ax.set_xlabel("degrees from the view's heading")
        ax.set_ylabel("rendered views")
        _counts_axis(ax.yaxis)

    return _per_task("Rotation offsets of the rendered views (VPO)", stats["tasks"], "render_offsets_deg", draw)


def letter_balance(stats: Mapping[str, Any]) -> bytes:
    title = "Answer letters per task (chi-square test of balance)"
    having = {t: e["letter_balance"] for t, e in stats["tasks"].items() if e.get("letter_balance")}
    if not having:
        return _no_data(title)
    fig, (ax,) = _figure(title)
    series = {}
    for t, b in having.items():
        p = f"p = {b['p']:.3g}" if b["p"] is not None else "no answers"
        series[f"{t} ({p})"] = [b["counts"][x] for x in LETTERS]
    _grouped_bars(ax, list(LETTERS), series, legend=True)
    ax.set_ylabel("questions")
    return _png(fig)


def subtypes(stats: Mapping[str, Any]) -> bytes:
    def draw(ax: Any, name: str, counts: Mapping[str, int]) -> None:
        ax.bar(list(counts), list(counts.values()), color="#dd8452")
        _counts_axis(ax.yaxis)
        ax.set_title(name, fontsize=10)

    several = {t: e for t, e in stats["tasks"].items() if len(e.get("subtypes") or {}) > 1}
    return _per_task("Subtypes per task (VOO first vs last)", several, "subtypes", draw)


def all_plots(rep: Mapping[str, Any]) -> list[Plot]:
    """Every plot of the report, in page order."""
    stats = rep["statistics"]
    return [
        Plot("duration-per-category", "Duration per scene category", duration_per_category(stats)),
        Plot("videos-per-bin", "Videos per duration bin and category", videos_per_bin(stats)),
        Plot("questions-per-bin", "Questions per task and duration bin", questions_per_bin(rep["questions"])),
        Plot("top-concepts", "Top concepts", top_concepts(stats)),
        Plot("answer-histogram", "Count answers", answer_histogram(stats)),
        Plot("direction-rose", "Motion directions", direction_rose(stats)),
        Plot("rotation-offsets", "Rotation offsets", rotation_offsets(stats)),
        Plot("letter-balance", "Answer letters", letter_balance(stats)),
        Plot("subtypes", "Subtypes", subtypes(stats)),
    ]
