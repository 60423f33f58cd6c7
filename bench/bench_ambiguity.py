"""Questions with one right answer, measured against the truth (placeholder: the measurement follows).

The held-out samples, fixed before any stability rule was written and not to be changed after:
besides ``configs/sample.yaml``'s sample, two renders nobody tuned anything for.
"""

from __future__ import annotations

# (name, sample parameters over configs/sample.yaml's): chosen before the rules, never changed after.
HELD_OUT = (
    ("s907", {"source_id": "sample-ambiguity-s907", "seed": 907, "n_per_category": 4, "duration_s": 150.0, "fps": 2.0}),
    ("s908", {"source_id": "sample-ambiguity-s908", "seed": 908, "n_per_category": 6, "duration_s": 120.0, "fps": 2.0}),
)
