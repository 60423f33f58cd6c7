"""Model backends, one small interface per kind, chosen by name in the config.

Kinds: text embedder, image embedder, open-vocabulary detector, segmenter, pose estimator, face detector (those
register in ``stages.faces``). Production backends wrap the real packages (open_clip, ultralytics YOLO-World,
sam3, depth-anything-3); CPU backends serve the embedded sample and CI. See ``base.py``.
"""

# Production backends register themselves on import; their heavy packages load in constructors.
from vsi_wild.stages.backends import detect, groundtruth, image, pose, segment, text, twoview  # noqa: F401  imported to register
from vsi_wild.stages.backends.params import ModelsParams  # noqa: F401  re-exported
