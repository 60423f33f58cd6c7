"""vsi-wild: the open, reproducible pipeline that builds the VSI-Super-Wild benchmark.

Layout (see README.md):
  vsi_wild/          the core: artifact schemas, the store, config, ids, the CLI
  stages/            the domain as pure functions (installed as ``vsi_wild.stages``)
  tasks/             orchestration of one (stage, unit): cache keys, I/O (``vsi_wild.tasks``)
  flows/             Prefect flows: the whole DAG and one flow per stage (``vsi_wild.flows``)
"""

__version__ = "0.1.0"
