"""Candidate normalisation: synonyms grouped, the MLLM term kept as the canonical label."""

from __future__ import annotations

import numpy as np
import pytest

from vsi_wild.errors import UnitError
from vsi_wild.stages import candidates as cand

# A test double of the text-embedder interface (not a backend): terms of one synonym group get
# nearly parallel vectors (cosine ~0.96), different groups orthogonal ones.
SYNONYMS = [
    {"sofa", "couch"},
    {"trash can", "garbage bin", "trashcan"},
    {"chair"},
    {"table"},
    {"television", "tv"},
    {"bench"},
]


def table_embed(texts: list[str]) -> np.ndarray:
    dims = len(SYNONYMS) + 64
    out = np.zeros((len(texts), dims))
    for i, t in enumerate(texts):
        g = next(j for j, group in enumerate(SYNONYMS) if t in group)
        out[i, g] = 1.0
        out[i, len(SYNONYMS) + (sum(map(ord, t)) % 64)] = 0.2  # a term's own small component
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def by_term(cands):
    return {c.term: c for c in cands}


def test_mllm_term_is_canonical_for_a_human_synonym():
    seeds = ["Sofa", "chair", "trash can", "table"]
    proposals = ["couch", "garbage bin", "bench"]
    got = by_term(cand.normalise(seeds, proposals, table_embed, 0.92))
    # human "sofa" is a synonym of the MLLM's "couch": "couch" is the label (the paper's rule)
    assert got["sofa"].concept == "couch" and got["sofa"].origin == "seed"
    assert got["couch"].concept == "couch" and got["couch"].origin == "mllm"
    assert got["trash can"].concept == "garbage bin"
    # terms without a synonym are their own concepts
    assert got["chair"].concept == "chair" and got["table"].concept == "table" and got["bench"].concept == "bench"
    assert cand.concepts_of(cand.normalise(seeds, proposals, table_embed, 0.92)) == [
        "couch",
        "garbage bin",
        "bench",
        "chair",
        "table",
    ]
    assert 0.92 <= got["sofa"].similarity < 1.0


def test_threshold_separates_synonyms_from_unrelated_terms():
    # above every similarity: nothing merges
    got = by_term(cand.normalise(["sofa"], ["couch"], table_embed, 0.999))
    assert got["sofa"].concept == "sofa" and got["couch"].concept == "couch"


def test_duplicates_and_case_are_normalised():
    got = cand.normalise(["TV ", "tv", " chair."], ["Television"], table_embed, 0.92)
    assert [(c.term, c.concept) for c in got] == [
        ("television", "television"),
        ("tv", "television"),
        ("chair", "chair"),
    ]


def test_proposals_files(tmp_path):
    assert cand.parse_proposals("# from the MLLM\ncouch, bench\n\n  Trash Can \n", "v.txt") == [
        "couch",
        "bench",
        "trash can",
    ]
    assert cand.parse_proposals('["couch", "Bench"]', "v.json") == ["couch", "bench"]
    assert cand.parse_proposals('{"terms": ["couch"]}', "v.json") == ["couch"]
    with pytest.raises(UnitError, match=r"v\.json:1: not valid JSON"):
        cand.parse_proposals('["couch",', "v.json")
    with pytest.raises(UnitError, match=r"v\.json: item 1: expected a string"):
        cand.parse_proposals('["couch", 3]', "v.json")


def test_params_threshold_per_embedder():
    p = cand.CandidatesParams()
    assert p.threshold() == 0.92  # the paper's value for CLIP
    assert cand.CandidatesParams(embedder="minilm").threshold() == 0.80
    with pytest.raises(ValueError):
        cand.CandidatesParams(embedder="other").threshold()


def test_keyframe_times_spread_over_the_video():
    ts = cand.keyframe_times(160.0, 16)
    assert len(ts) == 16 and ts[0] == 5.0 and ts[-1] == 155.0
    assert np.allclose(np.diff(ts), 10.0)


def test_normalisation_with_the_packaged_embedder():
    """all-MiniLM-L6-v2 from its PyPI wheel (the CPU backend), at the configured threshold."""
    import vsi_wild.stages.backends  # noqa: F401  (registers the backends)
    from vsi_wild.stages.backends import base

    p = cand.CandidatesParams(embedder="minilm", seeds=["sofa", "car", "chair", "television", "bicycle", "table"])
    emb = base.create("text_embedder", "minilm")
    got = by_term(cand.normalise(p.seeds, ["couch", "automobile", "tv", "motorcycle"], emb.embed, p.threshold()))
    # synonyms: the MLLM's term is the label
    assert got["sofa"].concept == "couch"
    assert got["car"].concept == "automobile"
    assert got["television"].concept == "tv"
    # neighbours that are not synonyms stay apart
    assert got["bicycle"].concept == "bicycle" and got["motorcycle"].concept == "motorcycle"
    assert got["chair"].concept == "chair" and got["table"].concept == "table"


def propose_from_keyframes(video_id, paths):
    """An MLLM plugin stand-in for the plugin mechanism (the real one would call a model)."""
    return [f"{len(paths)} keyframes", "Couch"]


def test_mllm_plugin_is_loaded_by_name():
    fn = cand.load_plugin("test_meta_candidates:propose_from_keyframes")
    assert fn("v", ["a", "b"]) == ["2 keyframes", "Couch"]
    with pytest.raises(UnitError, match="cannot be loaded"):
        cand.load_plugin("no_such_module:f")
    with pytest.raises(UnitError, match="expected 'module:function'"):
        cand.load_plugin("just_a_name")
