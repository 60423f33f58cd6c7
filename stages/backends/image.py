"""Image embedders (kind ``image_embedder``): what an instance looks like, for reconciliation.

* ``open_clip`` - the image tower of the CLIP the production config already loads for candidate
  names and YOLO-World's prompts (``models.open_clip_model``, ``models.open_clip_weights``: the same
  file), run on an instance's crops with the model's own preprocessing (open_clip's
  ``image_transform_v2`` from the model's preprocess config: shortest side resized, centre crop,
  CLIP's mean and std). Each crop's embedding is L2-normalised, so a dot product is the cosine.

The CPU path needs no image embedder: ``segment.appearance: histogram`` compares the colour
histograms of the masked pixels (``stages.segment.appearance_histogram``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vsi_wild.stages.backends import weights as W
from vsi_wild.stages.backends.base import BackendContext, register
from vsi_wild.stages.backends.params import OPEN_CLIP_FIELDS, LoadedModel, ModelsParams, as_params, require
from vsi_wild.stages.backends.text import load_open_clip


class OpenClipImageEmbedder:
    """``embed(crops) -> (n, d)`` float32, rows L2-normalised; ``dim`` is the image tower's output width."""

    name = "open_clip"

    def __init__(self, params: ModelsParams):
        self.params = params
        open_clip = require("open_clip", "open-clip-torch", self.name)
        self._loaded: LoadedModel = load_open_clip(params, "image")
        visual = self._loaded.model.visual
        self.dim = int(visual.output_dim)
        transform = require("open_clip.transform", "open-clip-torch", self.name)
        cfg = transform.PreprocessCfg(**open_clip.get_model_preprocess_cfg(self._loaded.model))
        self._preprocess = transform.image_transform_v2(cfg, is_train=False)

    @property
    def device(self) -> str:
        return self._loaded.device

    def embed(self, crops: Sequence[np.ndarray]) -> np.ndarray:
        """The crops (RGB uint8, any size) embedded: (n, dim) float32, each row L2-normalised."""
        import torch
        from PIL import Image

        out: list[Any] = []
        size = self.params.image_batch_size
        with self._loaded.lock, torch.inference_mode():
            for i in range(0, len(crops), size):
                images = [Image.fromarray(np.ascontiguousarray(c, dtype=np.uint8)) for c in crops[i : i + size]]
                pixels = torch.stack([self._preprocess(im) for im in images]).to(self.device)
                feats = self._loaded.model.encode_image(pixels).float()
                out.append((feats / feats.norm(p=2, dim=-1, keepdim=True)).cpu())
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return torch.cat(out).numpy().astype(np.float32)


@register(
    "image_embedder",
    "open_clip",
    fields=OPEN_CLIP_FIELDS,
    weights=("open_clip_weights",),
    sources={"open_clip_weights": W.OPENAI_CLIP_VIT_B_32},
    packages=(("open_clip", "open-clip-torch"), ("torch", "torch")),
)
def make_open_clip_image(ctx: BackendContext) -> OpenClipImageEmbedder:
    return OpenClipImageEmbedder(as_params(ctx.models, ctx.options))
