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

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

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


class AddInstance(_Op):
    """A missed object: its concept and the intervals (seconds) in which it is visible."""

    op: Literal["add_instance"]
    concept: str = Field(min_length=1)
    spans: list[tuple[float, float]] = Field(min_length=1)

    @field_validator("spans")
    @classmethod
    def _spans(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        for s, e in v:
            if s < 0 or e < s:
                raise ValueError(f"span [{s}, {e}]: needs 0 <= start <= end")
        return v


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
    rejected (the qa stage drops it). ``question`` is its stable id (``qa.common.question_id``)."""

    op: Literal["review_question"]
    question: str = Field(pattern=r"^[0-9a-f]{12}$")
    verdict: Literal["accept", "reject"]
    reason: str | None = Field(None, min_length=1)

    def problems(self) -> list[tuple[str, str]]:
        if self.verdict == "reject" and self.reason is None:
            return [("reason", "a rejection needs a reason (e.g. ambiguous, not answerable from the video)")]
        return []


FixOp = Annotated[Union[RenameConcept, Merge, Split, AddInstance, RemoveInstance, SetAppearance, Motion,
                        ReviewQuestion], Field(discriminator="op")]
_ADAPTER = TypeAdapter(FixOp)
OPS = ("rename_concept", "merge", "split", "add_instance", "remove_instance", "set_appearance", "motion",
       "review_question")


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
            "").construct_object(node, deep=True)
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


def parse_fix_text(text: str, file: str, video_id: str | None = None) -> FixSet:
    """Parse and validate a fix file's text (syntax and fields; ids are checked when applied)."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise FixError(file, mark.line + 1 if mark else None, None,
                       f"not valid YAML: {getattr(e, 'problem', None) or e}") from None
    if root is None:
        raise FixError(file, None, None, "empty file: expected 'video_id' and 'fixes'")
    if not isinstance(root, yaml.MappingNode):
        raise FixError(file, root.start_mark.line + 1, None, "expected a mapping with 'video_id' and 'fixes'")
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
    if "fixes" not in top:
        raise FixError(file, 1, "fixes", "missing: a list of fixes (may be empty: [])")
    fk, fnode = top["fixes"]
    if isinstance(fnode, yaml.ScalarNode) and _plain(fnode) is None:
        items: list[yaml.Node] = []
    elif not isinstance(fnode, yaml.SequenceNode):
        raise FixError(file, fk.start_mark.line + 1, "fixes", "must be a list of fixes")
    else:
        items = fnode.value
    fixes = []
    for i, item in enumerate(items):
        line = item.start_mark.line + 1
        if not isinstance(item, yaml.MappingNode):
            raise FixError(file, line, "fixes", f"fix #{i + 1}: expected a mapping with an 'op'")
        lines = _field_lines(item)
        data = _plain(item)
        op = data.get("op")
        if op not in OPS:
            raise FixError(file, lines.get("op", line), "op",
                           f"fix #{i + 1}: {'missing' if op is None else f'unknown op {op!r}'}; expected one of {', '.join(OPS)}")
        try:
            model = _ADAPTER.validate_python(data)
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
    return FixSet(file=file, video_id=vid, fixes=fixes, sha256=digest)


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
