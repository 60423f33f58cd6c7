"""Rule-based QA (the paper's stage A.3), one module per task: ``vmr``, ``vpo``, ``voo``, ``voc``;
``common`` holds seeding, wording and options; ``build`` assembles one video's questions.
Answer letters are assigned globally in ``vsi_wild.stages.export``."""

from vsi_wild.stages.qa.params import QAParams

__all__ = ["QAParams"]
