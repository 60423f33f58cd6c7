"""Human fixes of one video's metadata: the file format, its parsing and validation.

One YAML file per video, ``<fixes_dir>/<video_id>.yaml`` (see docs/fixes.md)::

    video_id: sample-walk_front
    fixes:
      - op: merge
        instances: [3, 11]
        note: same chair seen again after the corridor
      - op: rename_concept
        from: couch
        to: sofa
      - op: motion
        clip: 2
        state: none

Instance ids are the ids of the automatic reconciliation (``instances_auto.parquet`` of the
``reconcile`` stage), which do not move when fixes change; instances added by a fix get the ids
after the largest automatic id, in file order. Every problem is a ``FixError`` naming the file,
the line and the field; a file with any problem changes nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from vsi_wild.errors import UnitError


class FixError(UnitError):
    """A fix file that cannot be applied; the message is ``file:line: field 'x': why``."""

    def __init__(self, file: str, line: int | None, field_name: str | None, message: str):
        where = f"{file}:{line}" if line else file
        what = f" field '{field_name}':" if field_name else ""
        super().__init__(f"{where}:{what} {message}", kind="bad_input", retryable=False)
        self.file, self.line, self.field, self.reason = file, line, field_name, message


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    note: str | None = Field(None, description="why (kept in the audit table)")
    by: str | None = Field(None, min_length=1, description="the reviewer who made the fix (`vsi-wild verify` fills it)")
    at: str | None = Field(None, description="when (ISO 8601, UTC); `vsi-wild verify` fills it")

    @field_validator("at", mode="before")
    @classmethod
    def _when(cls, v: Any) -> Any:
        # YAML reads an unquoted 2026-12-05T10:00:00Z as a datetime: keep it as the text it was
        if isinstance(v, (dt.datetime, dt.date)):
            return v.isoformat().replace("+00:00", "Z")
        if isinstance(v, str):
            try:
                dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{v!r} is not an ISO 8601 time (e.g. 2026-12-05T10:00:00Z)") from None
        return v

    def problems(self) -> list[tuple[str, str]]:
        """Checks across fields: (field, message) pairs."""
        return []


class RenameConcept(_Op):
    """Correct a concept name: every instance of ``from`` (or only the listed ``instances``)."""

    op: Literal["rename_concept"]
    from_: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    instances: list[int] | None = None


class Merge(_Op):
    """The listed instances are one object (duplicates across clips)."""

    op: Literal["merge"]
    instances: list[int] = Field(min_length=2)

    @field_validator("instances")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("instance ids must be distinct")
        return v


class Split(_Op):
    """Overrule an automatic merge: the clip-local instance becomes an instance of its own."""

    op: Literal["split"]
    clip: int = Field(ge=0)
    local_id: int = Field(ge=0)


class Keyframe(BaseModel):
    """One keyframe of a drawn track (as CVAT's video tracks have them): the box at ``time``, or
    ``outside: true`` where the object leaves the view (the track is not visible until the next
    box). Between two boxes the box is interpolated linearly at every 2 FPS timestamp."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    time: float = Field(ge=0)
    box: tuple[float, float, float, float] | None = Field(None, description="x0, y0, x1, y1 in view pixels")
    outside: bool = False

    @field_validator("box")
    @classmethod
    def _box(cls, v: tuple[float, float, float, float] | None) -> tuple[float, float, float, float] | None:
        if v is not None and not (v[2] > v[0] and v[3] > v[1]):
            raise ValueError(f"box {list(v)}: needs x1 > x0 and y1 > y0")
        return v


def _keyframe_problems(frames: list[Keyframe], name: str) -> list[tuple[str, str]]:
    for i, k in enumerate(frames):
        if (k.box is None) != k.outside:
            return [(f"{name}.{i}", "a keyframe has a box or is outside: true, not both or neither")]
        if i and k.time <= frames[i - 1].time:
            return [(f"{name}.{i}", f"times must increase ({k.time} after {frames[i - 1].time})")]
    if frames and frames[0].outside:
        return [(f"{name}.0", "the first keyframe needs a box")]
    return []


class AddInstance(_Op):
    """A missed object: its concept and either the intervals (seconds) in which it is visible, or
    its boxes drawn at one or more keyframes (then it has observations with boxes: a position and
    visibility like an automatic instance)."""

    op: Literal["add_instance"]
    concept: str = Field(min_length=1)
    spans: list[tuple[float, float]] | None = Field(None, min_length=1)
    boxes: list[Keyframe] | None = Field(None, min_length=1)

    @field_validator("spans")
    @classmethod
    def _spans(cls, v: list[tuple[float, float]] | None) -> list[tuple[float, float]] | None:
        for s, e in v or []:
            if s < 0 or e < s:
                raise ValueError(f"span [{s}, {e}]: needs 0 <= start <= end")
        return v

    def problems(self) -> list[tuple[str, str]]:
        if (self.spans is None) == (self.boxes is None):
            return (
                [("spans", "give spans or boxes (drawn keyframes), not both")]
                if self.spans
                else [("spans", "missing: give spans or boxes (drawn keyframes)")]
            )
        return _keyframe_problems(self.boxes or [], "boxes")


class SetBox(_Op):
    """Move or resize an instance's boxes: at every 2 FPS timestamp from the first keyframe to the
    last the box is the keyframes' interpolation (an observation is added where it had none; an
    ``outside`` keyframe removes the observations up to the next box)."""

    op: Literal["set_box"]
    instance: int
    boxes: list[Keyframe] = Field(min_length=1)

    def problems(self) -> list[tuple[str, str]]:
        return _keyframe_problems(self.boxes, "boxes")


class SplitAt(_Op):
    """Split a track at a time: the instance's observations from ``time`` on become a new instance."""

    op: Literal["split_at"]
    instance: int
    time: float = Field(ge=0)


class ReviewPair(_Op):
    """A person's decision on a pair of clip-local instances reconciliation compared
    (``merge_decisions.parquet``): ``merge`` joins their instances (nothing to do if they are
    one already), ``apart`` keeps them apart (splits ``clip_b``/``local_b`` out if they are one)."""

    op: Literal["review_pair"]
    clip_a: int = Field(ge=0)
    local_a: int = Field(ge=0)
    clip_b: int = Field(ge=0)
    local_b: int = Field(ge=0)
    decision: Literal["merge", "apart"]

    def problems(self) -> list[tuple[str, str]]:
        if (self.clip_a, self.local_a) == (self.clip_b, self.local_b):
            return [("local_b", "a pair needs two different clip-local instances")]
        return []


class Speck(_Op):
    """What a speck shows (a mask under ``segment.min_area``, not tracked: the segment stage's
    ``specks.parquet``, named by its clip and clip-local id): ``instance``, or ``none`` when it is
    no object of its concept (a false mask). Every timestamp of the speck track follows."""

    op: Literal["speck"]
    clip: int = Field(ge=0)
    local_id: int = Field(ge=0)
    instance: int | Literal["none"]

    @field_validator("instance", mode="before")
    @classmethod
    def _instance_or_none(cls, v: Any) -> Any:
        if v == "none" or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        raise ValueError(f"{v!r} is neither an instance id nor 'none'")


class RemoveInstance(_Op):
    """A false detection: the instance is not an object of its concept."""

    op: Literal["remove_instance"]
    instance: int


class SetAppearance(_Op):
    """Recalibrate when an instance first / last appears (the appearance order follows)."""

    op: Literal["set_appearance"]
    instance: int
    first_time: float | None = Field(None, ge=0)
    last_time: float | None = Field(None, ge=0)

    def problems(self) -> list[tuple[str, str]]:
        if self.first_time is None and self.last_time is None:
            return [("first_time", "give first_time, last_time or both")]
        if self.first_time is not None and self.last_time is not None and self.last_time < self.first_time:
            return [("last_time", f"{self.last_time} is before first_time {self.first_time}")]
        return []


class Motion(_Op):
    """VMR's metadata of one motion clip: set the pivot and/or the angle, or mark it "none"."""

    op: Literal["motion"]
    clip: int = Field(ge=0)
    state: Literal["ok", "none"] = "ok"
    pivot_time: float | None = Field(None, ge=0)
    angle_deg: float | None = Field(None, ge=-180, lt=180)

    def problems(self) -> list[tuple[str, str]]:
        if self.state == "none":
            extra = [n for n in ("pivot_time", "angle_deg") if getattr(self, n) is not None]
            return [(extra[0], "not allowed with state 'none'")] if extra else []
        if self.pivot_time is None and self.angle_deg is None:
            return [("state", "'ok' needs pivot_time, angle_deg or both")]
        return []


class ReviewQuestion(_Op):
    """A person's verdict on one generated question: accepted (the export marks it reviewed) or
    rejected (the qa stage drops it). ``question`` is its stable id (``qa.common.question_id``).
    ``answers``: the question's answers as the person saw them (its ``answers`` column, one per
    query time; ``vsi-wild verify`` records them). An accept stands only while the question still
    gives these answers: a later fix that changes them makes the question provisional again. An
    accept without them stands whatever the answer; a rejection stands whatever the answer."""

    op: Literal["review_question"]
    question: str = Field(pattern=r"^[0-9a-f]{12}$")
    verdict: Literal["accept", "reject"]
    reason: str | None = Field(None, min_length=1)
    answers: list[str] | None = Field(None, min_length=1)

    @field_validator("answers", mode="before")
    @classmethod
    def _answer_texts(cls, v: Any) -> Any:
        # a count written by hand in YAML (answers: [3]) reads as a number: the column holds text
        if isinstance(v, list):
            return [str(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else a for a in v]
        return v

    def problems(self) -> list[tuple[str, str]]:
        if self.verdict == "reject" and self.reason is None:
            return [("reason", "a rejection needs a reason (e.g. ambiguous, not answerable from the video)")]
        return []


FixOp = Annotated[
    RenameConcept
    | Merge
    | Split
    | AddInstance
    | RemoveInstance
    | SetAppearance
    | Motion
    | ReviewQuestion
    | SetBox
    | SplitAt
    | ReviewPair
    | Speck,
    Field(discriminator="op"),
]
_ADAPTER: TypeAdapter[FixOp] = TypeAdapter(FixOp)
OPS = (
    "rename_concept",
    "merge",
    "split",
    "add_instance",
    "remove_instance",
    "set_appearance",
    "motion",
    "review_question",
    "set_box",
    "split_at",
    "review_pair",
    "speck",
)


def op_key(fix: dict[str, Any]) -> tuple | None:
    """What a fix decides, for the fixes that decide one thing once (a later decision replaces
    the earlier one when a draft is rebased): a question's verdict, a motion clip, a pair, a speck."""
    kind = fix.get("op")
    if kind == "review_question":
        return (kind, fix.get("question"))
    if kind == "motion":
        return (kind, fix.get("clip"))
    if kind == "review_pair":
        return (kind, fix.get("clip_a"), fix.get("local_a"), fix.get("clip_b"), fix.get("local_b"))
    if kind == "speck":
        return (kind, fix.get("clip"), fix.get("local_id"))
    return None


@dataclass
class Fix:
    op: Any  # one of the models above
    line: int
    field_lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, name: str) -> int:
        return self.field_lines.get(name, self.line)


@dataclass
class FixSet:
    file: str
    video_id: str
    fixes: list[Fix]
    sha256: str

    @classmethod
    def empty(cls, video_id: str) -> FixSet:
        return cls(file="", video_id=video_id, fixes=[], sha256="")


# ------------------------------------------------------------------------------ YAML with lines
def _plain(node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return yaml.SafeLoader(  # resolve the scalar the way safe_load would
            ""
        ).construct_object(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return [_plain(n) for n in node.value]
    if isinstance(node, yaml.MappingNode):
        return {_plain(k): _plain(v) for k, v in node.value}
    raise TypeError(type(node))


def _field_lines(node: yaml.MappingNode) -> dict[str, int]:
    lines: dict[str, int] = {}
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode):
            lines[str(k.value)] = k.start_mark.line + 1
            if isinstance(v, yaml.SequenceNode):
                for i, item in enumerate(v.value):
                    lines[f"{k.value}.{i}"] = item.start_mark.line + 1
    return lines


def _parse_items(items: list[yaml.Node], file: str, ops: tuple[str, ...], adapter: TypeAdapter) -> list[Fix]:
    """Each item of a fix list validated as one of ``ops``: a FixError names its line and field."""
    fixes = []
    for i, item in enumerate(items):
        line = item.start_mark.line + 1
        if not isinstance(item, yaml.MappingNode):
            raise FixError(file, line, "fixes", f"fix #{i + 1}: expected a mapping with an 'op'")
        lines = _field_lines(item)
        data = _plain(item)
        op = data.get("op")
        if op not in ops:
            raise FixError(
                file,
                lines.get("op", line),
                "op",
                f"fix #{i + 1}: {'missing' if op is None else f'unknown op {op!r}'}; expected one of {', '.join(ops)}",
            )
        try:
            model = adapter.validate_python(data)
        except ValidationError as e:
            errs = e.errors()
            err = next((x for x in errs if x["type"] == "extra_forbidden"), errs[0])
            loc = [str(x) for x in err["loc"][1:]]  # drop the union tag
            fname = loc[0] if loc else None
            fline = lines.get(".".join(loc[:2]), lines.get(fname or "", line)) if loc else line
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = f"unknown field for op {op!r}"
            elif err["type"] == "missing":
                msg = f"missing (required by op {op!r})"
            raise FixError(file, fline, ".".join(loc) or None, f"fix #{i + 1} ({op}): {msg}") from None
        for fname, msg in model.problems():
            raise FixError(file, lines.get(fname, line), fname, f"fix #{i + 1} ({op}): {msg}")
        fixes.append(Fix(model, line, lines))
    return fixes


def _root(text: str, file: str, expected: str) -> yaml.MappingNode:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise FixError(
            file, mark.line + 1 if mark else None, None, f"not valid YAML: {getattr(e, 'problem', None) or e}"
        ) from None
    if root is None:
        raise FixError(file, None, None, f"empty file: expected {expected}")
    if not isinstance(root, yaml.MappingNode):
        raise FixError(file, root.start_mark.line + 1, None, f"expected a mapping with {expected}")
    return root


def _required_list(top: Mapping[str, tuple[yaml.Node, yaml.Node]], key: str, file: str, what: str) -> list[yaml.Node]:
    """The items of the top-level list ``key`` (``what`` names it in errors); empty when its value is
    empty."""
    if key not in top:
        raise FixError(file, 1, key, f"missing: {what} (may be empty: [])")
    k, node = top[key]
    if isinstance(node, yaml.ScalarNode) and _plain(node) is None:
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise FixError(file, k.start_mark.line + 1, key, f"must be {what}")
    return list(node.value)


def parse_fix_text(text: str, file: str, video_id: str | None = None) -> FixSet:
    """Parse and validate a fix file's text (syntax and fields; ids are checked when applied)."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    root = _root(text, file, "'video_id' and 'fixes'")
    top = {str(k.value): (k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode)}
    for name, (k, _) in top.items():
        if name not in ("video_id", "fixes"):
            raise FixError(file, k.start_mark.line + 1, name, "unknown key (expected 'video_id' and 'fixes')")
    if "video_id" not in top:
        raise FixError(file, 1, "video_id", "missing: the video these fixes are for")
    vk, vnode = top["video_id"]
    vid = _plain(vnode)
    if not isinstance(vid, str):
        raise FixError(file, vk.start_mark.line + 1, "video_id", "must be a string")
    if video_id is not None and vid != video_id:
        raise FixError(file, vk.start_mark.line + 1, "video_id", f"is {vid!r} but the file is for {video_id!r}")
    items = _required_list(top, "fixes", file, "a list of fixes")
    return FixSet(file=file, video_id=vid, fixes=_parse_items(items, file, OPS, _ADAPTER), sha256=digest)


def load_fix_file(path: str | Path, video_id: str | None = None) -> FixSet:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise FixError(str(p), None, None, f"not UTF-8 text: {e}") from None
    return parse_fix_text(text, str(p), video_id)


def fix_file_path(fixes_dir: str | Path, video_id: str) -> Path:
    return Path(fixes_dir) / f"{video_id}.yaml"


def fingerprint(path: str | Path) -> str:
    """What a metadata unit's cache key depends on: the fix file's content, or 'none'."""
    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "none"


# ------------------------------------------------------------------------------ the vocabulary
class Synonyms(_Op):
    """Concept names that mean one thing: every instance named one of ``synonyms`` becomes ``concept``."""

    op: Literal["synonyms"]
    concept: str = Field(min_length=1)
    synonyms: list[str] = Field(min_length=1)

    def problems(self) -> list[tuple[str, str]]:
        if self.concept in self.synonyms:
            return [("synonyms", f"{self.concept!r} is the concept itself")]
        return []


class VocabularyRename(RenameConcept):
    """A rename for the whole benchmark: every instance of ``from`` in every video."""

    def problems(self) -> list[tuple[str, str]]:
        if self.instances is not None:
            return [("instances", "instance ids belong in a video's fix file, not the benchmark's vocabulary")]
        if self.from_ == self.to:
            return [("to", f"the same name as 'from' ({self.to!r})")]
        return []


VOCABULARY_OPS = ("rename_concept", "synonyms")
_VOCABULARY_ADAPTER: TypeAdapter[VocabularyRename | Synonyms] = TypeAdapter(
    Annotated[VocabularyRename | Synonyms, Field(discriminator="op")]
)
VOCABULARY_FILE = "vocabulary.yaml"  # in fixes_dir: no video id has no view suffix, so no clash


@dataclass
class Vocabulary:
    """The benchmark's concept vocabulary (``<fixes_dir>/vocabulary.yaml``): renames and synonyms
    applied to every video before its own fixes."""

    file: str
    fixes: list[Fix]
    sha256: str

    def canonical(self, concept: str) -> str:
        """The name ``concept`` has after the vocabulary (its entries in file order)."""
        for f in self.fixes:
            if f.op.op == "synonyms" and concept in f.op.synonyms:
                concept = f.op.concept
            elif f.op.op == "rename_concept" and concept == f.op.from_:
                concept = f.op.to
        return concept

    def names(self) -> list[str]:
        """The names the vocabulary settles on (for autocomplete)."""
        out = {f.op.concept if f.op.op == "synonyms" else f.op.to for f in self.fixes}
        return sorted(n for n in out if self.canonical(n) == n)


def parse_vocabulary_text(text: str, file: str) -> Vocabulary:
    """The vocabulary file: ``vocabulary:`` a list of rename_concept (without instances) and
    synonyms entries; every problem a FixError naming the line and field, as a fix file's."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    root = _root(text, file, "'vocabulary'")
    top = {str(k.value): (k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode)}
    for name, (k, _) in top.items():
        if name != "vocabulary":
            raise FixError(file, k.start_mark.line + 1, name, "unknown key (expected 'vocabulary')")
    items = _required_list(top, "vocabulary", file, "a list of renames and synonyms")
    return Vocabulary(file, _parse_items(items, file, VOCABULARY_OPS, _VOCABULARY_ADAPTER), digest)


# ------------------------------------------------------------------------------ drawn boxes
def drawn_tracks(fixset: FixSet) -> list[tuple[str, str | None, list[Keyframe]]]:
    """Every track a reviewer drew: (key, concept, keyframes) of each ``add_instance`` with boxes
    (its concept) and ``set_box`` (concept None: an existing instance's). The key is a digest of
    the fix's content (not its line), so editing another fix leaves it as it was."""
    out = []
    for f in fixset.fixes:
        op = f.op
        if op.op == "add_instance" and op.boxes is not None or op.op == "set_box":
            content = op.model_dump(mode="json", by_alias=True, exclude={"note", "by", "at"}, exclude_none=True)
            key = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]
            out.append((key, op.concept if op.op == "add_instance" else None, list(op.boxes)))
    return out


def track_span(frames: list[Keyframe]) -> tuple[float, float]:
    """The times a drawn track can show a box in: its first keyframe to its last."""
    return frames[0].time, frames[-1].time
