"""QA task types as plug-ins: what one task declares, and the registry the stages read it from.

A task module of this package (``vmr``, ``vpo``, ``voo``, ``voc``) declares ``TASK = QATask(...)``:
its questions builder, its answer kind, the export columns it adds, the splits its rows also go
to, its metric and its report section. Every module here that declares a ``TASK`` is registered
when the registry is first read, so a new task type is one module (plus, if it has new columns,
their entries in ``vsi_wild.schema.QUESTION_COLUMNS``, the one declaration). A task
defined elsewhere (a test, an extension) calls ``register_task`` before the stages run.

The build (``build``), the export (``vsi_wild.stages.export``), the evaluation
(``vsi_wild.stages.evaluate``), the report (``vsi_wild.stages.report``) and the export stage's
summary iterate ``tasks()``, in ``order``.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal

import pyarrow as pa

from vsi_wild import schema
from vsi_wild.stages.qa.common import Provenance, Question, RenderJob, VideoInfo
from vsi_wild.stages.qa.params import QAParams

MC: Literal["mc"] = "mc"  # multiple choice: a correct option and 3 distractors; letters assigned at export
NUMBER: Literal["number"] = "number"  # an integer answer, no options
RELEASE = "release"


@dataclass(frozen=True)
class VideoInputs:
    """What a questions builder may read about one view video (the qa stage's inputs)."""

    video: VideoInfo
    instances: pa.Table  # schema.INSTANCES (metadata)
    motion: pa.Table  # schema.MOTION (metadata)
    poses: pa.Table | None  # schema.POSES of this video (pose), None when unknown
    visibility: pa.Table | None = None  # schema.VISIBILITY (metadata), None when unknown
    motion_samples: pa.Table | None = None  # schema.MOTION_SAMPLES (metadata), None when unknown
    camera_height: float | None = None  # the camera's height above the ground in the poses' unit, None when unknown
    level_views: bool = True  # the views are level (reconcile.level_views): the ground is below each camera
    specks: pa.Table | None = None  # schema.SPECKS (metadata): masks too small to track, None when not read


@dataclass
class TaskQuestions:
    """A builder's result for one video: its questions, what it did not ask (QA_SKIPPED rows) and
    the images to render for its questions."""

    questions: list[Question]
    skipped: list[dict]
    renders: list[RenderJob] = field(default_factory=list)


@dataclass(frozen=True)
class Metric:
    """How one exported row is scored against a model's raw prediction (0..1)."""

    name: str
    score: Callable[[Mapping[str, Any], Any], float]


@dataclass(frozen=True)
class Split:
    """A split beside the release that a task's rows also go to.

    ``variant`` set: the builder emits these rows itself, as twins of release questions (same
    index, same doc id number; the doc id ends in ``variant``). ``variant`` None: the task's
    ``derive`` makes them at export from its release rows."""

    name: str  # the rows' ``split``
    label: str  # how the export summary names it
    form: Literal["release", "rich"]  # its file: the release jsonl format, or the rich parquet (QA_EXPORT)
    variant: str | None = None


@dataclass(frozen=True)
class QATask:
    name: str  # task_type
    order: int  # rank of its questions within a video's question table (and of the task everywhere)
    release_rank: int  # rank within a video in the release's doc id numbering
    kind: Literal["mc", "number"]
    metric: Metric
    questions: Callable[[VideoInputs, QAParams, Provenance], TaskQuestions]
    # Release subtypes that are distinct kinds of question (VOO first|last): counted apart in the
    # export summary and numbered apart in doc ids, in this order. A twin (VPO's unrotated control,
    # VOC's stream form) is a Split, not a subtype.
    subtypes: tuple[str, ...] = ()
    # MC options that order the same items (A → B → ...): the consensus blind baseline probes them.
    ordering: bool = False
    # QA_EXPORT columns this task fills: column -> its value from the question row (QA_QUESTIONS).
    # Every other task's rows hold None there.
    export_columns: Mapping[str, Callable[[Mapping[str, Any]], Any]] = field(default_factory=dict)
    splits: tuple[Split, ...] = ()
    # Rows of the derived splits (``Split.variant`` None) from the task's release rows (QA_EXPORT
    # rows, in file order), and the videos they need: (source video name, derived video name, k).
    derive: (
        Callable[[Sequence[dict[str, Any]], QAParams], tuple[list[dict[str, Any]], list[tuple[str, str, int]]]] | None
    ) = None
    # After its images are rendered: the questions' sample times -> the shown frames' decoded times.
    after_render: Callable[[Sequence[Question], dict[int, float], QAParams], None] | None = None
    # The report: extra statistics of its release rows (report.json) and its markdown lines.
    summarise: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]] | None = None
    report_section: Callable[[Mapping[str, Any]], list[str]] | None = None

    def subtype_rank(self, subtype: str) -> int:
        return self.subtypes.index(subtype) if subtype in self.subtypes else 0


def copied(*columns: str) -> dict[str, Callable[[Mapping[str, Any]], Any]]:
    """Export columns taken over unchanged from the question row."""
    return {c: itemgetter(c) for c in columns}


# The export's own columns, filled for every row (the rest of QA_EXPORT is the tasks' columns and
# what the whole build sets): from the one declaration, schema.QUESTION_COLUMNS.
EXPORT_BASE_COLUMNS = tuple(c.name for c in schema.QUESTION_COLUMNS if c.in_export and c.role == "base")
TASK_COLUMNS = tuple(c.name for c in schema.QUESTION_COLUMNS if c.in_export and c.role == "task")

_TASKS: dict[str, QATask] = {}
_discovered = False
_discovering = False
# Units of the qa stage run in threads: the first reads of the registry race, and a thread that saw
# it half-filled would build a video's questions for some tasks only (it happened: a video with none).
_LOCK = threading.RLock()


def _discover() -> None:
    """Register the ``TASK`` of every module of this package (once)."""
    global _discovered, _discovering
    if _discovered:
        return
    with _LOCK:  # other threads wait here until every module's task is in
        if _discovered or _discovering:  # done meanwhile, or re-entered from register_task below
            return
        _discovering = True
        try:
            package = importlib.import_module("vsi_wild.stages.qa")
            for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
                declared = getattr(importlib.import_module(f"{package.__name__}.{info.name}"), "TASK", None)
                if isinstance(declared, QATask):
                    register_task(declared)
            _discovered = True
        finally:
            _discovering = False


def register_task(task: QATask) -> QATask:
    """Add a task type; its name, order, release rank and split names must be new."""
    _discover()
    for other in _TASKS.values():
        clash = [
            what
            for what, a, b in (
                ("name", task.name, other.name),
                ("order", task.order, other.order),
                ("release_rank", task.release_rank, other.release_rank),
            )
            if a == b
        ]
        clash += [f"split {s.name}" for s in task.splits if s.name in {o.name for o in other.splits}]
        if clash:
            raise ValueError(f"QA task {task.name}: {', '.join(clash)} already taken by {other.name}")
    if task.kind not in (MC, NUMBER):
        raise ValueError(f"QA task {task.name}: kind {task.kind!r} is neither {MC!r} nor {NUMBER!r}")
    unknown = [c for c in task.export_columns if c not in TASK_COLUMNS]
    if unknown:
        raise ValueError(
            f"QA task {task.name}: export columns {unknown} are not task columns of schema.QUESTION_COLUMNS"
        )
    if any(s.variant is None for s in task.splits) and task.derive is None:
        raise ValueError(f"QA task {task.name}: a split without a variant is made by `derive`, and there is none")
    _TASKS[task.name] = task
    return task


def unregister_task(name: str) -> None:
    _discover()
    del _TASKS[name]


def tasks() -> list[QATask]:
    """Every registered task, in ``order``."""
    _discover()
    return sorted(_TASKS.values(), key=lambda t: t.order)


def task(name: str) -> QATask:
    _discover()
    if name not in _TASKS:
        raise KeyError(f"unknown QA task type {name!r} (registered: {', '.join(t.name for t in tasks())})")
    return _TASKS[name]


def mc_tasks() -> list[str]:
    """The multiple-choice task types, in order."""
    return [t.name for t in tasks() if t.kind == MC]
