"""Text embedders: MiniLM with its real packaged weights; open_clip's loader with random weights
saved in both formats the production file may have (state dict, OpenAI TorchScript)."""

from __future__ import annotations

import os
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")

import numpy as np
import pytest
import random_weights

from vsi_wild.errors import MissingWeights
from vsi_wild.stages.backends import params as P
from vsi_wild.stages.backends.base import create

pytestmark = pytest.mark.models


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_minilm_real_embeddings_rank_synonyms_first() -> None:
    emb = create("text_embedder", "minilm", device="cpu")
    names = ["trash can", "garbage bin", "traffic light", "sofa", "couch", "bicycle", "refrigerator", "fridge"]
    e = emb.embed(names)
    assert e.shape == (len(names), 384) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    v = dict(zip(names, e, strict=True))
    assert _cos(v["trash can"], v["garbage bin"]) > _cos(v["trash can"], v["traffic light"]) + 0.2
    assert _cos(v["sofa"], v["couch"]) > _cos(v["sofa"], v["bicycle"]) + 0.2
    # the recommended CPU threshold merges clear synonyms and keeps neighbours apart
    t = emb.synonym_threshold
    assert _cos(v["refrigerator"], v["fridge"]) >= t and _cos(v["sofa"], v["couch"]) >= t
    assert _cos(v["trash can"], v["traffic light"]) < t
    assert emb.embed([]).shape == (0, 384)


def test_minilm_is_loaded_once_per_process_across_threads() -> None:
    made = [None] * 6

    def build(i: int) -> None:
        made[i] = create("text_embedder", "minilm", device="cpu")

    threads = [threading.Thread(target=build, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(m._loaded.model) for m in made}) == 1
    a, b = made[0].embed(["chair"]), made[1].embed(["chair"])
    np.testing.assert_array_equal(a, b)


def test_load_once_calls_the_loader_once_under_contention() -> None:
    calls = []
    gate = threading.Event()

    def loader() -> tuple[object, str]:
        calls.append(1)
        gate.wait(2)
        return object(), "cpu"

    key = ("test-load-once", os.getpid())
    out: list[P.LoadedModel] = []
    threads = [threading.Thread(target=lambda: out.append(P.load_once(key, loader))) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({id(o) for o in out}) == 1

    def failing() -> tuple[object, str]:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        P.load_once(("test-fail", 1), failing)
    assert ("test-fail", 1) not in P.cached_keys()  # a failed load is retried next time


# ---------------------------------------------------------------------------- open_clip
@pytest.fixture(scope="module")
def random_clip(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("clip")
    return random_weights.clip_state_dict(d / "state.pt"), d


def _reference_text(model, texts: list[str]) -> np.ndarray:
    """open_clip's own text encoding, normalised (what YOLO-World's CLIP.encode_text returns)."""
    import open_clip
    import torch

    with torch.no_grad():
        f = model.encode_text(open_clip.get_tokenizer("ViT-B-32")(texts)).float()
    return (f / f.norm(dim=-1, keepdim=True)).numpy()


def test_open_clip_loads_a_state_dict_from_the_configured_path(random_clip) -> None:
    model, d = random_clip
    emb = create("text_embedder", "open_clip", device="cpu", weights_dir=str(d), open_clip_weights="state.pt")
    texts = ["a chair", "trash can", "person"]
    got = emb.embed(texts)
    assert got.shape == (3, 512) and got.dtype == np.float32
    np.testing.assert_allclose(got, _reference_text(model, texts), atol=1e-5)
    assert emb.synonym_threshold == 0.92


def test_open_clip_loads_openai_torchscript(random_clip, tmp_path) -> None:
    import torch

    model, _ = random_clip
    # OpenAI's release is a TorchScript archive of the whole CLIP with the same parameter names
    traced = torch.jit.trace(
        model, (torch.zeros(1, 3, 224, 224), torch.zeros(1, 77, dtype=torch.long)), check_trace=False, strict=False
    )
    torch.jit.save(traced, str(tmp_path / "ViT-B-32.pt"))
    emb = create("text_embedder", "open_clip", device="cpu", open_clip_weights=str(tmp_path / "ViT-B-32.pt"))
    np.testing.assert_allclose(emb.embed(["bench", "bus"]), _reference_text(model, ["bench", "bus"]), atol=1e-5)


def test_open_clip_missing_weights_names_the_config_key(tmp_path) -> None:
    with pytest.raises(MissingWeights) as e:
        create("text_embedder", "open_clip", device="cpu", weights_dir=str(tmp_path))
    assert "models.open_clip_weights" in str(e.value) and str(tmp_path / "clip/ViT-B-32.pt") in str(e.value)
    assert e.value.kind == "missing_weights"


def test_weights_dir_defaults_to_env(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(P.WEIGHTS_ENV, str(tmp_path))
    assert P.ModelsParams().resolved_weights_dir() == tmp_path
    monkeypatch.delenv(P.WEIGHTS_ENV)
    assert str(P.ModelsParams().resolved_weights_dir()).endswith(".cache/vsi-wild/weights")
    with pytest.raises(ValueError):
        P.ModelsParams(da3_window=8, da3_overlap=8)
    with pytest.raises(ValueError):
        P.ModelsParams(yolo_weights="x.pt")  # a typo is an error, never ignored
