"""The lmms-eval task functions of a VSI-Super-Wild release (copied into each release as
``lmms_eval/<task>/utils.py`` beside the task's yaml by ``vsi-wild release``; self-contained: a
release is used without vsi-wild installed).

Scores as the public task does: a multiple-choice question (VMR, VPO, VOO) scores 1 when the answer
letter read from the model's output is the correct one; a VOC question scores its MRA,
1 - |prediction - answer| / max(answer, 1), floored at 0. ``overall`` is the mean of the task scores,
each task weighted equally. Visuals: the view video (``VSI_SUPER_WILD_VIDEO_ROOT``/videos/<name>, or
<root>/<name>); VPO's four frames are the video's frames at ``frame_indices``.
"""

from __future__ import annotations

import os
import re
from typing import Any

TASKS = ("VMR", "VPO", "VOO", "VOC")
_CHECKPOINT = re.compile(
    r"\.\s*At each checkpoint,\s*report the cumulative count up to that point as a single integer\."
)


def video_path(doc: dict[str, Any]) -> str:
    root = os.environ.get("VSI_SUPER_WILD_VIDEO_ROOT") or os.getcwd()
    for candidate in (os.path.join(root, "videos", doc["video_name"]), os.path.join(root, doc["video_name"])):
        if os.path.exists(candidate):
            return candidate
    return os.path.join(root, "videos", doc["video_name"])


def doc_to_visual(doc: dict[str, Any]) -> list[Any]:
    path = video_path(doc)
    if doc["task_type"] == "VPO" and doc.get("frame_indices") and os.path.exists(path):
        import av  # the frames VPO shows, decoded on demand
        from PIL import Image

        wanted = {int(i) for i in doc["frame_indices"]}
        frames: dict[int, Any] = {}
        with av.open(path) as container:
            for i, frame in enumerate(container.decode(video=0)):
                if i in wanted:
                    frames[i] = Image.fromarray(frame.to_ndarray(format="rgb24"))
                if i >= max(wanted):
                    break
        return [frames[int(i)] for i in doc["frame_indices"] if int(i) in frames]
    return [path]


def doc_to_text(doc: dict[str, Any], lmms_eval_specific_kwargs: dict[str, Any] | None = None) -> str:
    question = _CHECKPOINT.sub(". Report the total count up to this point as a single integer.", doc["question"])
    if doc.get("options"):
        return (
            question + "\n\nOptions:\n" + "\n".join(doc["options"]) + "\n\nAnswer with only the letter (A, B, C, or D)."
        )
    return question + "\n\nAnswer with only a single integer number."


def extract_letter(text: str) -> str:
    text = (text or "").strip().upper()
    for pattern in (r"^\s*([A-D])\s*$", r"ANSWER\s*(?:IS|:)?\s*[\"']?([A-D])\b", r"\(([A-D])\)", r"\b([A-D])\b"):
        m = re.search(pattern, text)
        if m:
            return m.group(1)
    return ""


def extract_count(text: str) -> float | None:
    m = re.search(r"-?\d+(?:\.\d+)?", text or "")
    return float(m.group()) if m else None


def mra(prediction: float | None, answer: float) -> float:
    if prediction is None:
        return 0.0
    return max(0.0, 1.0 - abs(prediction - answer) / max(answer, 1.0))


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, Any]:
    text = results[0] if results else ""
    task = doc["task_type"]
    if doc.get("options"):
        score = 1.0 if extract_letter(text) == doc["answer"] else 0.0
        metric = f"{task.lower()}_accuracy"
    else:
        score = mra(extract_count(text), float(doc["answer"]))
        metric = "voc_mra"
    return {metric: score, "overall": {"task_type": task, "score": score}}


def mean_score(items: list[Any]) -> float:
    values = [float(x) for x in items if x is not None]
    return sum(values) / len(values) if values else 0.0


def overall_score(items: list[dict[str, Any]]) -> float:
    by_task: dict[str, list[float]] = {}
    for item in items:
        by_task.setdefault(item["task_type"], []).append(float(item["score"]))
    means = [sum(v) / len(v) for v in by_task.values() if v]
    return sum(means) / len(means) if means else 0.0
