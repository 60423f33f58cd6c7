"""The embedded sample: a synthetic 360° walk through a world the generator knows entirely."""

from vsi_wild.stages.sample.params import SampleParams

__all__ = ["SampleParams"]
