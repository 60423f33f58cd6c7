"""What the QA tasks share: seeding, the video they are asked about, question wording,
option helpers, the images to render and the per-video question table.

Question wording is the public release's, word for word, so that the public evaluation task's
prompts (and its answer parsing) match.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from vsi_wild import schema

T = TypeVar("T")

ARROW = " → "  # the release joins orderings with a spaced right arrow
LETTERS = "ABCD"

# ------------------------------------------------------------------------- release wording
VMR_QUESTION = (
    "[Single-Choice] At the indicated moment in this clip, which direction is the camera/person moving? "
    "(forward = the direction the camera is facing)"
)
_VPO_HEAD = "[Single-Choice] Here are 4 frames captured at different moments in the video."
_VPO_TAIL = "Choose the option listing the frames by capture time, from first to last."
VOO_QUESTION = "[Ordering] In this video, choose the option listing the four objects by {which}-appearance time."
VOC_TOTAL_QUESTION = (
    "[Fill-in-the-Blank] Throughout this video, count the total number of {concept}(s) you observe. "
    "Report the total count as a single integer."
)
# The release's evaluation rewrites this checkpoint sentence into "Report the total count up to this
# point as a single integer." (utils.clean_question_for_prompt): the streaming form it expects.
VOC_STREAM_QUESTION = (
    "[Fill-in-the-Blank] Throughout this video, count the total number of {concept}(s) you observe. "
    "At each checkpoint, report the cumulative count up to that point as a single integer."
)


def vpo_question(offset_min_deg: float | None, offset_max_deg: float | None = None) -> str:
    """The VPO question; ``None`` gives the unrotated control's wording (no rotation sentence)."""
    if offset_min_deg is None:
        return f"{_VPO_HEAD} {_VPO_TAIL}"
    rot = f"Each frame is shown from a slightly rotated viewpoint ({offset_min_deg:g}-{offset_max_deg:g} degrees)."
    return f"{_VPO_HEAD} {rot} {_VPO_TAIL}"


def voo_question(which: str) -> str:
    return VOO_QUESTION.format(which=which)


# ------------------------------------------------------------------------- seeding
class StableRng:
    """A random stream that depends only on its key (seed, video, task, index, ...).

    The key's sha256 seeds a Mersenne Twister whose ``random()`` sequence Python guarantees across
    versions for an integer seed; everything else (integers, shuffles, samples) is derived here from
    ``random()`` alone, not from ``random.shuffle``/``sample``/numpy, whose algorithms may change.
    So the same inputs give the same choices on every machine and version: same inputs, same bytes.
    """

    def __init__(self, *key: Any):
        digest = hashlib.sha256("\x1f".join(str(k) for k in key).encode()).digest()
        self._r = random.Random(int.from_bytes(digest[:16], "big"))

    def random(self) -> float:
        """Uniform in [0, 1)."""
        return self._r.random()

    def uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * self.random()

    def below(self, n: int) -> int:
        """Uniform integer in [0, n) (bias below n / 2**53)."""
        if n <= 0:
            raise ValueError("below(n) needs n > 0")
        return min(int(self.random() * n), n - 1)

    def shuffled(self, items: Iterable[T]) -> list[T]:
        out = list(items)
        for i in range(len(out) - 1, 0, -1):  # Fisher-Yates
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        """``k`` distinct items (a partial Fisher-Yates: cost k, not len(items))."""
        pool = list(items)
        k = min(k, len(pool))
        for i in range(k):
            j = i + self.below(len(pool) - i)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]


def stable_hash(*key: Any) -> str:
    return hashlib.sha256("\x1f".join(str(k) for k in key).encode()).hexdigest()


def question_id(row: Any) -> str:
    """A question's stable id (a QA_QUESTIONS row or a Question): its video, task, subtype and item
    (what it is about), which do not move when other questions of the video change. Fix files
    name questions by it (``review_question``)."""
    get = row.get if isinstance(row, dict) else lambda k: getattr(row, k)
    return stable_hash(get("video_id"), get("task_type"), get("subtype"), get("item"))[:12]


# ------------------------------------------------------------------------- the video
@dataclass(frozen=True)
class VideoInfo:
    """One perspective view video, as the projection stage describes it (a VIEWS_TABLE row)."""

    video_id: str
    source_id: str
    view: str
    yaw_deg: float
    pitch_deg: float
    hfov_deg: float
    vfov_deg: float
    width: int
    height: int
    fps: float
    n_frames: int
    duration_s: float

    @property
    def video_name(self) -> str:
        return f"{self.video_id}.mp4"

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> VideoInfo:
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})

    def frame_at(self, t: float) -> int:
        """Index of the frame shown at time t (nearest frame, clipped to the video)."""
        return int(min(max(round(t * self.fps), 0), self.n_frames - 1))

    def time_of(self, frame: int) -> float:
        return frame / self.fps


# ------------------------------------------------------------------------- questions
def _python_type(t: pa.DataType) -> Any:
    """The annotation of a QA_QUESTIONS column's values."""
    if pa.types.is_list(t):
        return types.GenericAlias(list, (_python_type(t.value_type),))  # list[...] of a computed type
    if pa.types.is_struct(t):
        return dict[str, float]
    if pa.types.is_string(t):
        return str
    if pa.types.is_integer(t):
        return int
    if pa.types.is_floating(t):
        return float
    if pa.types.is_boolean(t):
        return bool
    return Any


def _question_fields(columns: Iterable[schema.QuestionColumn] = schema.QUESTION_COLUMNS) -> list[tuple]:
    """``Question``'s fields, one per QA_QUESTIONS column (``schema.QUESTION_COLUMNS``): the required
    ones first, then the nullable ones (default None), each group in the table's order."""
    cols = [c for c in columns if c.in_questions]
    required = [(c.name, _python_type(c.type)) for c in cols if not c.nullable]
    optional = [(c.name, _python_type(c.type) | None, field(default=None)) for c in cols if c.nullable]
    return [*required, *optional]


# One row of ``schema.QA_QUESTIONS``: made from the declaration, so that it cannot drift from it.
# The type checker cannot follow make_dataclass: it reads the same fields, written out below (a test,
# tests/test_qa_columns.py, checks that they are _question_fields()' own, in order, with their types).
if TYPE_CHECKING:

    @dataclass
    class Question:
        video_id: str
        source_id: str
        view: str
        video_name: str
        task_type: str
        subtype: str
        split: str
        index: int
        item: str
        question: str
        query_times: list[float]
        answers: list[str]
        evidence: list[list[dict[str, float]]]
        fps: float
        duration_s: float
        seed: int
        metadata_fingerprint: str
        pipeline_version: str
        correct: str | None = None
        distractors: list[str] | None = None
        frame_indices: list[int] | None = None
        frame_times: list[float] | None = None
        image_files: list[str] | None = None
        render_yaw_deg: list[float] | None = None
        render_offset_deg: list[float] | None = None
        render_pitch_deg: float | None = None
        render_hfov_deg: float | None = None
        concepts: list[str] | None = None
        angle_deg: float | None = None
        gaps_s: list[float] | None = None
        since_s: list[float] | None = None
        difficulty_s: float | None = None
        difficulty_bin: str | None = None
        horizon_bin: str | None = None
        provisional: bool | None = None
        provisional_reason: str | None = None
        wrong_answer_bound: float | None = None

else:
    Question = make_dataclass("Question", _question_fields())
    Question.__module__ = __name__
    Question.__doc__ = "One row of ``schema.QA_QUESTIONS`` (fields from ``schema.QUESTION_COLUMNS``)."


@dataclass(frozen=True)
class RenderJob:
    """One image a question shows, to be rendered from the source panorama."""

    frame: int  # frame index of the source panorama (= of the view video)
    yaw_deg: float
    pitch_deg: float
    file: str  # output path relative to the image folder's parent (e.g. "images/vpo0_f1_rot.jpg")


@dataclass(frozen=True)
class Provenance:
    seed: int
    metadata_fingerprint: str
    pipeline_version: str


def base_fields(video: VideoInfo, prov: Provenance) -> dict[str, Any]:
    return {
        "video_id": video.video_id,
        "source_id": video.source_id,
        "view": video.view,
        "video_name": video.video_name,
        "fps": video.fps,
        "duration_s": video.duration_s,
        "seed": prov.seed,
        "metadata_fingerprint": prov.metadata_fingerprint,
        "pipeline_version": prov.pipeline_version,
    }


def interval(start: float, end: float) -> dict[str, float]:
    return {"start": float(start), "end": float(end)}


def questions_table(questions: Sequence[Question]) -> pa.Table:
    rows = []
    for q in questions:
        rows.append(asdict(q))
    return schema.table(schema.QA_QUESTIONS, rows)


def skipped_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """QA_SKIPPED rows; a row without ``reading`` was not asked for another reason (null), one
    without ``specks`` names none."""
    return schema.table(schema.QA_SKIPPED, [{"reading": None, "specks": None, **r} for r in rows])


# ------------------------------------------------------------------------- options
def ordering_text(items: Sequence[str]) -> str:
    return ARROW.join(items)


def permutation_distractors(correct: Sequence[T], rng: StableRng, k: int = 3) -> list[tuple[T, ...]]:
    """``k`` distinct orderings of ``correct``'s items other than ``correct``, uniformly at random.

    Uniform choice makes the 4 options exchangeable, so no option-only rule (for instance "pick the
    ordering closest to the others") beats chance.
    """
    correct = tuple(correct)
    others = [p for p in itertools.permutations(correct) if p != correct]
    if len(others) < k:
        raise ValueError(f"only {len(others)} other orderings of {correct!r}")
    return [tuple(p) for p in rng.sample(others, k)]


def check_distinct_options(correct: str, distractors: Sequence[str]) -> None:
    opts = [correct, *distractors]
    if len(set(opts)) != len(opts):
        raise ValueError(f"options are not distinct: {opts}")


def finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False
