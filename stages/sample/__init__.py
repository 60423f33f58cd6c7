"""The embedded sample: a synthetic 360° walk through a world the generator knows entirely.

``generate_sample(params, video_path, progress)`` renders an equirectangular H.264 video of a
camera walking a closed route through four places (plaza, street, hall, corridor) among object
instances and a face photograph, and returns its complete ground truth (``SampleTruth``).
"""

from vsi_wild.stages.sample.generate import SampleTruth, generate_sample, truth_samples
from vsi_wild.stages.sample.params import SampleParams

__all__ = ["SampleParams", "SampleTruth", "generate_sample", "truth_samples"]
