"""Candidate objects: a human seed list plus per-video proposals, normalised into concepts.

The paper (A.2.1): a human seed list of task-friendly objects and an MLLM's proposals from 16
keyframes per video are normalised with text-embedding cosine similarity (CLIP, threshold 0.92);
when a human term is a synonym of an MLLM term, the MLLM term is kept as the canonical label.

Here the proposals are read from a file per video (``<proposals_dir>/<video_id>.txt``, one term a
line, ``#`` comments; or ``.json``, a list of strings), so that any MLLM, or a person, can write
them; the keyframes are extracted for whoever writes them. Calling an MLLM from the pipeline is an
optional plugin (``mllm_plugin``), off by default.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from vsi_wild.errors import UnitError

# A human seed list of task-friendly objects: unambiguous, countable, non-abstract, easy to see.
DEFAULT_SEEDS = (
    "chair",
    "table",
    "bench",
    "trash can",
    "potted plant",
    "lamp",
    "door",
    "window",
    "sign",
    "bicycle",
    "car",
    "bus",
    "traffic cone",
    "fire extinguisher",
    "television",
    "monitor",
    "laptop",
    "bottle",
    "cup",
    "backpack",
    "umbrella",
    "clock",
    "painting",
    "shelf",
    "sofa",
    "bed",
    "sink",
    "refrigerator",
    "vending machine",
    "escalator",
)


class CandidatesParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seeds: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SEEDS), description="the human seed list of task-friendly objects"
    )
    proposals_dir: str = Field(
        "proposals",
        description="folder of per-video proposal files <video_id>.txt|.json (relative: under the data root)",
    )
    embedder: str = Field("open_clip", description="text_embedder backend: open_clip (production) | minilm (CPU)")
    thresholds: dict[str, float] = Field(
        default_factory=lambda: {"open_clip": 0.92, "minilm": 0.80},
        description=(
            "cosine similarity at or above which two terms are synonyms, per embedder. CLIP's text "
            "tower packs all short nouns close together (unrelated objects score ~0.75-0.9), hence "
            "the paper's 0.92; all-MiniLM-L6-v2 spreads them out (unrelated pairs <= 0.74, "
            "sofa/couch 0.86, car/automobile 0.87, tv/television 0.96), so 0.92 would miss most "
            "synonyms and 0.80 separates the two groups"
        ),
    )
    n_keyframes: int = Field(16, ge=1, description="keyframes per video offered to the proposer")
    keyframe_max_width: int = Field(1280, ge=64, description="keyframes are downscaled to at most this width")
    mllm_plugin: str | None = Field(
        None,
        description="optional 'module:function' called as fn(video_id, [keyframe paths]) -> [terms]; off by default",
    )

    @field_validator("seeds")
    @classmethod
    def _seeds_not_blank(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if not normalise_term(s)]
        if bad:
            raise ValueError(f"blank seed terms: {bad!r}")
        return v

    def threshold(self) -> float:
        if self.embedder not in self.thresholds:
            raise ValueError(f"candidates.thresholds has no entry for embedder {self.embedder!r}")
        return float(self.thresholds[self.embedder])


def normalise_term(term: str) -> str:
    """Lower-case, strip, collapse inner whitespace and drop surrounding punctuation."""
    t = re.sub(r"\s+", " ", str(term).strip().lower())
    return t.strip(" .,;:!?\"'`-*")


# ------------------------------------------------------------------------------ proposals files
def proposals_path(proposals_dir: Path, video_id: str) -> Path | None:
    for ext in (".txt", ".json"):
        p = proposals_dir / f"{video_id}{ext}"
        if p.is_file():
            return p
    return None


def parse_proposals(text: str, name: str) -> list[str]:
    """Terms from a proposals file's text; ``name`` (the file) is named in errors."""
    if name.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise UnitError(f"{name}:{e.lineno}: not valid JSON: {e.msg}") from None
        if isinstance(data, dict):
            data = data.get("terms")
        if not isinstance(data, list):
            raise UnitError(f'{name}: expected a JSON list of strings (or {{"terms": [...]}})')
        terms = []
        for i, item in enumerate(data):
            if not isinstance(item, str):
                raise UnitError(f"{name}: item {i}: expected a string, got {type(item).__name__}")
            terms.append(item)
    else:
        terms = []
        for line in text.splitlines():
            line = line.split("#", 1)[0]
            terms.extend(p for p in line.split(","))
    return [t for t in (normalise_term(x) for x in terms) if t]


def load_plugin(spec: str) -> Callable[[str, list[Path]], list[str]]:
    mod, _, fn = spec.partition(":")
    if not mod or not fn:
        raise UnitError(f"candidates.mllm_plugin {spec!r}: expected 'module:function'")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise UnitError(f"candidates.mllm_plugin {spec!r} cannot be loaded: {e}") from None


# ------------------------------------------------------------------------------ normalisation
@dataclass(frozen=True)
class Candidate:
    term: str
    origin: str  # seed | mllm
    concept: str
    similarity: float


def normalise(
    seeds: Sequence[str], proposals: Sequence[str], embed: Callable[[list[str]], np.ndarray], threshold: float
) -> list[Candidate]:
    """Group synonymous terms and pick each group's canonical label.

    Star clustering in a fixed order: MLLM proposals first (in their order), then the seed list;
    each term joins the existing concept whose label it is most similar to, if that similarity is
    at least ``threshold``, else it founds a new concept. Proposals come first so that a human
    term that is a synonym of an MLLM term is filed under the MLLM term (the paper's rule).
    ``embed`` maps n strings to (n, d) L2-normalised rows.
    """
    ordered: list[tuple[str, str]] = []
    seen: set[str] = set()
    for origin, terms in (("mllm", proposals), ("seed", seeds)):
        for t in terms:
            n = normalise_term(t)
            if n and n not in seen:
                seen.add(n)
                ordered.append((n, origin))
    if not ordered:
        return []
    vecs = np.asarray(embed([t for t, _ in ordered]), dtype=np.float64)
    if vecs.shape[0] != len(ordered):
        raise ValueError(f"embedder returned {vecs.shape[0]} rows for {len(ordered)} terms")
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    heads: list[int] = []  # indices of canonical terms
    out: list[Candidate] = []
    for i, (term, origin) in enumerate(ordered):
        if heads:
            sims = vecs[heads] @ vecs[i]
            j = int(np.argmax(sims))
            if sims[j] >= threshold:
                out.append(Candidate(term, origin, ordered[heads[j]][0], float(sims[j])))
                continue
        heads.append(i)
        out.append(Candidate(term, origin, term, 1.0))
    return out


def concepts_of(candidates: Sequence[Candidate]) -> list[str]:
    """The canonical concepts, in first-seen order."""
    return list(dict.fromkeys(c.concept for c in candidates))


def keyframe_times(duration_s: float, n: int) -> list[float]:
    """``n`` times spread uniformly over the video (centres of n equal slices)."""
    if duration_s <= 0:
        return []
    return [(i + 0.5) * duration_s / n for i in range(n)]


def extract_keyframes(path: str | Path, times: Sequence[float], max_width: int) -> list[tuple[float, int, np.ndarray]]:
    """(time, frame index, rgb) of the first frame at or after each time, by seeking (16 seeks are
    far cheaper than decoding a long video). Times are relative to the stream's first frame; the
    frame index is time x average rate, rounded."""
    import av
    import cv2

    out = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        tb = stream.time_base
        start = stream.start_time or 0
        rate = float(stream.average_rate or stream.guessed_rate or 0) or 1.0
        for t in times:
            assert tb is not None  # a video stream's time base
            container.seek(start + int(t / tb), stream=stream, backward=True)
            pick = None
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                ft = float((frame.pts - start) * tb)
                pick = (ft, frame)
                if ft >= t - 0.5 / rate:
                    break
            if pick is None:
                continue
            ft, frame = pick
            rgb: np.ndarray = frame.to_ndarray(format="rgb24")
            if rgb.shape[1] > max_width:
                s = max_width / rgb.shape[1]
                rgb = cv2.resize(rgb, (max_width, max(2, round(rgb.shape[0] * s))), interpolation=cv2.INTER_AREA)
            out.append((ft, int(round(ft * rate)), rgb))
    return out
