"""The build report: counts, spreads and losses computed from rows whose answers we set by hand."""

from __future__ import annotations

from vsi_wild.stages.report import build_report, render_markdown


def _row(task, answer, split="release", subtype="x", video="a_front.mp4", text="t", times=None):
    return {
        "doc_id": f"{video}|{task}|{answer}|{text}",
        "video_name": video,
        "task_type": task,
        "question": "q",
        "answer": answer,
        "options": None if task == "VOC" else [f"{letter}) {t}" for letter, t in zip("ABCD", "wxyz", strict=True)],
        "split": split,
        "subtype": subtype,
        "answer_text": text,
        "frame_times": times,
        "duration_s": 90.0,
        "source_id": video.split("_")[0],
        "concepts": ["cone"] if task == "VOC" else None,
    }


def test_report_counts_spreads_and_losses():
    rows = [
        _row("VOC", "3"),
        _row("VOC", "9"),
        _row("VOC", "5", video="b_left.mp4"),
        _row("VMR", "A", text="w"),
        _row("VMR", "C", text="y"),
        _row("VPO", "B", text="x", times=[40.0, 1.0, 100.0, 70.0]),
        _row("VOC", "5", split="voc_repeat"),
    ]
    status = [
        {
            "stage": "download",
            "unit": "abcdefghijk",
            "state": "failed",
            "error_class": "private",
            "error": "Private video",
        },
        {"stage": "review", "unit": "zzzzzzzzzzz", "state": "skipped", "error_class": None, "error": "rejected"},
        {"stage": "qa", "unit": "a_front", "state": "done", "error_class": None, "error": None},
    ]
    sources = [{"origin": "youtube", "duration_s": 1800.0}, {"origin": "sample", "duration_s": 1800.0}]
    rep = build_report(rows, status, sources)
    q = rep["questions"]
    assert q["VOC"]["n"] == 3 and q["VOC"]["answers"] == {"min": 3, "median": 5, "max": 9} and q["VOC"]["videos"] == 2
    assert q["VMR"]["letters"] == {"A": 1, "C": 1}
    assert q["VPO"]["min_anchor_gap_s"] == 30.0  # 40 -> 70
    assert rep["splits"] == {"release": 6, "voc_repeat": 1}
    assert rep["sources"] == {"n": 2, "hours": 1.0, "origins": {"youtube": 1, "sample": 1}}
    assert rep["lost"] == {"download": {"private": 1}, "review": {"skipped": 1}}
    md = render_markdown(rep)
    assert "| VOC | 3 | 2 |" in md and "download: private 1" in md and "Private video" in md
    assert "Too few questions to judge" in md and "30.0 s apart" in md
