"""How one (stage, unit) is run: inputs, cache key, cache lookup, execution, status.

This module knows nothing of Prefect: ``flows/`` decides the order and the concurrency and wraps
``execute`` in a Prefect task. Everything here is deterministic and restartable:

- a stage declares its **contract** (``Stage``): its output files with their schemas (checked at
  commit and on read), the config sections it reads (the only ones ``job.config`` shows), the
  model backends it builds (their requirements checked once before its units, their models
  released after them), the sources it registers;
- a unit's **cache key** is the hash of its stage's name and version, the config sections the
  stage reads, the content fingerprints of the upstream outputs it reads, the declared
  fingerprints of its backends, and the fingerprints of the raw inputs outside the store that the
  stage declares (source files, review decisions, human fix files);
- a unit is **cached** when the store holds a complete output under that key (its manifest exists);
- a unit that raises becomes a ``failed`` status row with a readable error; its traceback goes to
  ``logs/<stage>/<unit>.log`` under the data root; nothing else stops.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import pyarrow as pa

from vsi_wild import __version__, ids, schema
from vsi_wild.config import Config
from vsi_wild.errors import Skip, UnitError
from vsi_wild.stages.backends.base import BackendContext
from vsi_wild.stages.backends.base import create as create_backend
from vsi_wild.stages.backends.base import spec as spec_of
from vsi_wild.stages.backends.params import backend_fingerprint, backend_problems
from vsi_wild.stages.backends.params import clear_cache as clear_model_cache
from vsi_wild.store import Store, UnitRef, UnitWriter

UnitKind = Literal["source", "video", "clip", "all"]
_RANK = {"source": 0, "video": 1, "clip": 2}
ALL = "all"


@dataclass(frozen=True)
class Stage:
    """One step of the DAG, run per unit.

    ``run`` does the I/O of one unit: it reads upstream outputs through the ``Job``, calls the pure
    functions of ``stages/`` and writes its files with ``job.out``. ``units`` enumerates the units
    of this stage when the default (derived from the upstream stages' units) does not fit.
    ``raw_inputs`` returns fingerprints of inputs that live outside the store; ``publish`` runs
    after the output is complete (computed or cached).
    """

    name: str
    version: str
    unit_kind: UnitKind
    run: Callable[[Job], None]
    # The files of one unit's output (schema.ARTIFACTS[name]): checked at commit, and on read.
    outputs: tuple[schema.Artifact, ...] = ()
    needs: tuple[str, ...] = ()
    # The config sections ``run`` reads: part of the cache key, and the only ones ``job.config``
    # exposes (a dotted name exposes that sub-section of its section and nothing else of it).
    sections: tuple[str, ...] = ()
    # Sections ``run`` also reads that change how it works, never what it writes (network
    # politeness, retries): exposed to ``job.config`` but not part of the cache key.
    unkeyed_sections: tuple[str, ...] = ()
    # The model backends the stage builds, each named by a config key (``detect.backend``): their
    # declared fields and weights are part of the cache key, their packages and weight files are
    # checked once before any unit runs, and the models they load are released after the stage.
    backends: tuple[BackendUse, ...] = ()
    # Importable modules the stage needs besides its backends' (checked before any unit runs).
    packages: tuple[str, ...] = ()
    gpu: bool = False
    gpu_memory_gib: float | None = None  # roughly what one unit needs on the GPU (for scheduling)
    # The CPU work that prepares a unit's input for its model (decoding, resizing, writing frames):
    # ``feed(job)`` returns what ``run`` then reads as ``job.feed()``. Units of a ``group`` run on one
    # worker, and there the next unit's feed runs in a thread while this unit's model works
    # (``execute_group``), so a GPU does not wait on the decoder between units.
    feed: Callable[[Job], Any] | None = None
    # Units that share an ancestor of this kind (a clip's video) go to one worker as one task and run
    # there in order, each with its own status, output and failure. None: one task per unit.
    group: UnitKind | None = None
    # A group's units in one pass (their model calls shared: a source's views' frames in one batch),
    # each job writing its own output. Should it raise, the units run again one at a time (``run``),
    # so that a bad input fails its own unit only.
    run_group: Callable[[list[Job]], None] | None = None
    description: str = ""
    units: Callable[[Plan, Stage], list[str]] | None = None
    no_units_hint: str = ""  # what to do when ``units`` finds none (stages without upstream)
    raw_inputs: Callable[[Config, Store, str], dict[str, str]] | None = None
    # State the stage carries from its own earlier outputs (the export's question ledger): given its
    # other inputs (upstream outputs, by stage and unit), which state this unit starts from; part of
    # the cache key. It must name the state a unit with the same other inputs started from before,
    # so that a no-op run stays cached (tasks/export.py: ``carried_ledger``).
    carried: Callable[[Config, Store, str, dict[str, dict[str, UnitRef]]], dict[str, str]] | None = None
    # A declared output of schema.SOURCE rows: the sources this stage brings in (a generated sample,
    # a download). The engine registers them once the output is complete, computed or cached, and
    # the plan's stages after it see them (the registration step is the engine's, not the stage's).
    registers: str | None = None
    # Called after the unit's output is complete, computed or cached (idempotent): show it outside
    # the store (exports/, report.md). Never a place to change what other stages read.
    publish: Callable[[Store, Config, UnitRef], None] | None = None

    def __post_init__(self) -> None:
        if not self.outputs:
            raise ValueError(f"stage {self.name}: declare its outputs (schema.ARTIFACTS)")
        if self.registers is not None:
            declared = self.output(self.registers)
            if declared is None or declared.schema is not schema.SOURCE:
                raise ValueError(
                    f"stage {self.name}: registers {self.registers}, which it must declare with schema.SOURCE"
                )

    def output(self, name: str) -> schema.Artifact | None:
        """The declaration file ``name`` of a unit's output matches, if any."""
        return next((a for a in self.outputs if a.matches(name)), None)


@dataclass(frozen=True)
class BackendUse:
    """A stage builds the backend of ``kind`` that the config key ``selector`` names, unless the key
    names one of ``off`` (a setting that needs no model: ``segment.appearance: histogram``)."""

    kind: str  # stages.backends.base kinds: text_embedder, open_vocab_detector, ...
    selector: str  # dotted config key whose value is the backend's name, e.g. "detect.backend"
    off: tuple[str, ...] = ()  # values of the key that build no backend (no weight check, no fingerprint)

    def section(self, config: Config) -> Any:
        """The params of the section whose key chooses the backend (``faces`` for ``faces.backend``)."""
        value: Any = config
        for part in self.selector.split(".")[:-1]:
            value = getattr(value, part)
        return value

    def name(self, config: Config) -> str:
        return str(getattr(self.section(config), self.selector.rsplit(".", 1)[-1]))

    def active(self, config: Config) -> bool:
        return self.name(config) not in self.off


@dataclass
class Outcome:
    stage: str
    unit: str
    state: Literal["computed", "cached", "failed", "skipped"]
    key: str | None = None
    fingerprint: str | None = None
    error: str | None = None
    seconds: float = 0.0
    registered: list[str] = field(default_factory=list)  # sources the unit's output registered

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


# ------------------------------------------------------------------------------------ events
# Listeners receive ("start"|"end"|"progress", payload) from any thread of this process; the CLI
# uses them for its progress bars. Remote workers (Dask) have none.
_listeners: list[Callable[[str, dict[str, Any]], None]] = []
_listeners_lock = threading.Lock()


def add_listener(fn: Callable[[str, dict[str, Any]], None]) -> None:
    with _listeners_lock:
        _listeners.append(fn)


def remove_listener(fn: Callable[[str, dict[str, Any]], None]) -> None:
    with _listeners_lock:
        if fn in _listeners:
            _listeners.remove(fn)


def emit(event: str, **payload: Any) -> None:
    for fn in list(_listeners):
        with contextlib.suppress(Exception):  # a broken progress bar must never fail a unit
            fn(event, payload)


# ------------------------------------------------------------------------------------ units
def unit_ancestor(unit: str, kind: UnitKind, target: UnitKind) -> str:
    """The unit of kind ``target`` that contains ``unit`` (a clip's video, a video's source)."""
    if target == kind:
        return unit
    if kind == "clip":
        unit = ids.split_clip_id(unit)[0]
        kind = "video"
        if target == "video":
            return unit
    if kind == "video" and target == "source":
        return ids.split_video_id(unit)[0]
    raise ValueError(f"no {target} contains the {kind} unit {unit!r}")


@dataclass
class Selection:
    """``--videos``: source ids and/or video ids; empty means everything."""

    items: frozenset[str] = frozenset()

    def admits(self, unit: str, kind: UnitKind) -> bool:
        if not self.items or kind == "all":
            return True
        source = ids.unit_source(unit)
        if source in self.items:
            return True
        if kind in ("video", "clip"):
            return unit_ancestor(unit, kind, "video") in self.items
        # a source is admitted when one of its videos is selected
        return any(_source_of(i) == source for i in self.items if "_" in i)

    def unknown(self, sources: Iterable[str]) -> list[tuple[str, str]]:
        """The selected ids that name none of ``sources`` (the registered ones) nor a video or clip
        of one, each with why: a typo selects nothing, and a run of nothing must not pass for a run
        of the selection."""
        known = sorted(set(sources))
        forms = f"a video is '<source id>_<{'|'.join(ids.VIEWS)}>'"
        return [
            (item, f"no registered source, video or clip is called {item!r} ({forms}; sources: {_listed(known)})")
            for item in sorted(self.items)
            if _source_of(item) not in known
        ]


def _source_of(item: str) -> str | None:
    """The source a selected id names (``ids.unit_source``), or None for an id of no form."""
    try:
        return ids.unit_source(item)
    except ids.BadId:
        return None


def _listed(names: list[str], most: int = 5) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "") or "none"


@dataclass
class Plan:
    """The state of one run: which outputs are current for each stage, and what ran."""

    config: Config
    store: Store
    stages: dict[str, Stage]
    selection: Selection = field(default_factory=Selection)
    force: frozenset[str] = frozenset()
    current: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)  # stage -> unit -> (key, fp)
    enumerated: dict[str, list[str]] = field(default_factory=dict)
    outcomes: dict[str, dict[str, Outcome]] = field(default_factory=dict)
    # stage -> why it could not start (requirements unmet): one error for the stage, not per unit
    stage_failures: dict[str, StageFailure] = field(default_factory=dict)
    # stage -> why it had no unit at all this run (an upstream missing or pending, no sources)
    no_units: dict[str, str] = field(default_factory=dict)
    _sources: list[str] | None = field(default=None, repr=False)
    _backend_fps: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    _status: dict[tuple[str, str], dict[str, Any]] | None = field(default=None, repr=False)
    _children: dict[tuple[str, UnitKind], dict[str, list[str]]] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, config: Config, store: Store, stages: Iterable[Stage], **kw: Any) -> Plan:
        plan = cls(config=config, store=store, stages={s.name: s for s in stages}, **kw)
        register_stages(plan.stages.values())
        plan._status = {}
        for row in store.status_table().to_pylist():
            if row["stage"] in plan.stages:
                plan._status[(row["stage"], row["unit"])] = row
                if row["state"] == "done":
                    plan.current.setdefault(row["stage"], {})[row["unit"]] = (row["key"], row["fingerprint"])
        return plan

    def status_of(self, stage: str, unit: str) -> dict[str, Any] | None:
        """The unit's status row as the run found it (only this plan writes it until ``prepare``
        has seen it); read from the store when the plan was not loaded from it."""
        if self._status is None:
            return self.store.read_status(stage, unit)
        return self._status.get((stage, unit))

    # -------------------------------------------------------------- enumeration
    def units_of(self, stage: Stage) -> list[str]:
        units = stage.units(self, stage) if stage.units is not None else self._default_units(stage)
        units = sorted(u for u in set(units) if self.selection.admits(u, stage.unit_kind))
        self.enumerated[stage.name] = units
        self._children = {k: v for k, v in self._children.items() if k[0] != stage.name}
        return units

    def _default_units(self, stage: Stage) -> list[str]:
        if stage.unit_kind == "all":
            return [ALL]
        if not stage.needs:
            raise ValueError(f"stage {stage.name} has no upstream stage: it must enumerate its own units")
        found: set[str] | None = None
        for name in stage.needs:
            up = self.stages[name]
            if up.unit_kind == "all":
                continue
            have: set[str] = set()
            for u in self.current.get(name, {}):
                if _RANK[up.unit_kind] <= _RANK[stage.unit_kind]:
                    if up.unit_kind == "source" and stage.unit_kind == "video":
                        have.update(ids.video_id(u, v) for v in self.view_names())
                    elif up.unit_kind == stage.unit_kind:
                        have.add(u)
                    else:
                        raise ValueError(f"stage {stage.name}: cannot derive {stage.unit_kind} units from {name}")
                else:
                    have.add(unit_ancestor(u, up.unit_kind, stage.unit_kind))
            found = have if found is None else found & have
        return sorted(found or ())

    def view_names(self) -> list[str]:
        project = getattr(self.config, "project", None)
        return list(getattr(project, "views", None) or ids.VIEWS)

    def sources(self) -> list[str]:
        """Registered source ids: the registry as the plan found it, and what this run's
        registering stages (sample, download) registered since (``record``)."""
        if self._sources is None:
            self._sources = self.store.registry()["source_id"].to_pylist()
        return self._sources

    # -------------------------------------------------------------- inputs and keys
    def inputs_of(self, stage: Stage, unit: str) -> tuple[dict[str, dict[str, UnitRef]], str | None]:
        """Upstream outputs of ``unit``; or a reason why they are not all there."""
        refs: dict[str, dict[str, UnitRef]] = {}
        for name in stage.needs:
            up = self.stages[name]
            cur = self.current.get(name, {})
            if up.unit_kind == "all":
                wanted = [ALL]  # a global output is always required
            elif stage.unit_kind == "all":
                wanted = [u for u in sorted(cur) if self._still_wanted(up, u)]  # every current output
            elif _RANK[up.unit_kind] <= _RANK[stage.unit_kind]:
                wanted = [unit_ancestor(unit, stage.unit_kind, up.unit_kind)]
            else:
                children = self._children_of(up, stage.unit_kind).get(unit, [])
                wanted = children
                if not children:
                    return refs, f"no {name} output for {unit}"
            missing = [u for u in wanted if u not in cur]
            if missing:
                why = self._why_missing(name, missing[0])
                return refs, f"needs {name}:{missing[0]} ({why})"
            refs[name] = {u: UnitRef(name, u, cur[u][0]) for u in wanted}
        return refs, None

    def _children_of(self, up: Stage, kind: UnitKind) -> dict[str, list[str]]:
        """``up``'s units grouped by the unit of ``kind`` that contains them (a video's clips), built
        once per reading stage: without it each of 442 videos scans 3,400 clips."""
        key = (up.name, kind)
        if key not in self._children:
            index: dict[str, list[str]] = {}
            for u in self.enumerated.get(up.name, self.current.get(up.name, {})):
                index.setdefault(unit_ancestor(u, up.unit_kind, kind), []).append(u)
            self._children[key] = index
        return self._children[key]

    def why_no_units(self, stage: Stage) -> str:
        """Why ``stage`` has no unit: which upstream stage has no current output for which
        sources, why (failed, skipped, not run), and the command that makes them ready."""
        if not stage.needs:  # the stage enumerates its own units (from the config, the registry)
            return stage.no_units_hint or f"stage {stage.name} found nothing to do"
        sources = [s for s in self.sources() if self.selection.admits(s, "source")]
        if not sources:
            return (
                "no source is registered"
                + (" for the selected ids" if self.selection.items else "")
                + ": `vsi-wild add PATH`, a crawl, or the sample (configs/sample.yaml)"
            )
        reasons = []
        for name in stage.needs:
            up = self.stages[name]
            if up.unit_kind == ALL:
                continue
            have = {ids.unit_source(u) for u in self.current.get(name, {})}
            lacking = [s for s in sources if s not in have]
            if not lacking:
                continue
            why = self._why_source_missing(name, lacking[0])
            reasons.append(
                f"{name} has no current output for {_listed(lacking, 3)} ({why}); "
                f"make it ready: vsi-wild run --from {name}"
            )
        return "; ".join(reasons) or f"stage {stage.name} found nothing to do"

    def _why_source_missing(self, stage: str, source: str) -> str:
        if stage in self.stage_failures:
            return f"stage {stage} could not start: {self.stage_failures[stage].error}"
        for o in self.outcomes.get(stage, {}).values():
            if ids.unit_source(o.unit) == source and o.state in ("failed", "skipped"):
                return f"{o.state}: {o.error}"
        if stage in self.outcomes:
            return "no unit of it for this source this run"
        rows = [
            r
            for r in self.store.status_table().to_pylist()
            if r["stage"] == stage and ids.unit_source(r["unit"]) == source
        ]
        if rows:
            r = rows[0]
            return f"{r['state']}: {r['error']}" if r["error"] else r["state"]
        return f"{stage} has not run for it"

    def _still_wanted(self, stage: Stage, unit: str) -> bool:
        """Global stages read every current output of their upstream stages, except outputs of
        sources that are no longer registered."""
        if unit == ALL:
            return True
        return ids.unit_source(unit) in self.sources()

    def _why_missing(self, stage: str, unit: str) -> str:
        if stage in self.stage_failures:
            return f"stage {stage} could not start: {self.stage_failures[stage].error}"
        o = self.outcomes.get(stage, {}).get(unit)
        if o is not None:
            return o.error or o.state
        row = self.store.read_status(stage, unit)
        if row is not None:
            return f"{row['state']}: {row['error']}" if row["error"] else row["state"]
        return "not run yet"

    def cache_key(self, stage: Stage, unit: str, inputs: dict[str, dict[str, UnitRef]]) -> str:
        payload = {
            "stage": stage.name,
            "version": stage.version,
            "sections": {s: self.config.section_json(s) for s in stage.sections},
            "inputs": sorted([name, u, self.current[name][u][1]] for name, units in inputs.items() for u in units),
            "raw": stage.raw_inputs(self.config, self.store, unit) if stage.raw_inputs else {},
            "backends": self.backend_fingerprints(stage),
        }
        if stage.carried is not None:
            payload["carried"] = stage.carried(self.config, self.store, unit, inputs)
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:32]

    def backend_fingerprints(self, stage: Stage) -> dict[str, str]:
        """The declared fingerprint of each backend the stage builds (once per plan and stage)."""
        if stage.name not in self._backend_fps:
            self._backend_fps[stage.name] = {
                use.selector: backend_fingerprint(
                    backend_spec(use, self.config), self.config.models, use.section(self.config)
                )
                for use in stage.backends
                if use.active(self.config)
            }
        return self._backend_fps[stage.name]

    def requirement_problems(self, stage: Stage) -> list[str]:
        """What keeps ``stage`` from running on this machine (packages, weight files), found once
        before any of its units runs."""
        problems = []
        for module in stage.packages:
            if importlib.util.find_spec(module) is None:
                problems.append(f"stage {stage.name} needs the Python module {module!r}")
        for use in stage.backends:
            if not use.active(self.config):
                continue
            try:
                spec = backend_spec(use, self.config)
            except ValueError as e:
                problems.append(f"`{use.selector}`: {e}")
                continue
            problems += backend_problems(spec, self.config.models, use.section(self.config))
        return problems

    def record(self, outcome: Outcome) -> None:
        self.outcomes.setdefault(outcome.stage, {})[outcome.unit] = outcome
        self._children = {k: v for k, v in self._children.items() if k[0] != outcome.stage}
        if outcome.registered:
            self._sources = sorted(set(self.sources()) | set(outcome.registered))
        cur = self.current.setdefault(outcome.stage, {})
        if outcome.state in ("computed", "cached"):
            assert outcome.key is not None and outcome.fingerprint is not None  # both set for these states
            cur[outcome.unit] = (outcome.key, outcome.fingerprint)
        else:
            cur.pop(outcome.unit, None)


@dataclass
class Prepared:
    """A unit ready to execute: everything a (possibly remote) worker needs."""

    stage: str
    unit: str
    key: str
    inputs: dict[str, dict[str, UnitRef]]


def prepare(plan: Plan, stage: Stage, unit: str) -> Outcome | Prepared:
    """Resolve inputs and the cache key; answer at once when the unit is cached, must be skipped,
    or failed before in a way that a re-run cannot mend."""
    inputs, missing = plan.inputs_of(stage, unit)
    store = plan.store
    prev = plan.status_of(stage.name, unit)
    attempts = int(prev["attempts"]) if prev else 0
    if missing is not None:
        _write_status(store, stage.name, unit, "skipped", key="", error=missing, attempts=attempts)
        return Outcome(stage.name, unit, "skipped", error=missing)
    try:
        key = plan.cache_key(stage, unit, inputs)
    except Exception as e:  # noqa: BLE001 - e.g. an unreadable fix file: this unit fails, others go on
        error, kind, retry = _classify(e)
        _write_status(
            store,
            stage.name,
            unit,
            "failed",
            key="",
            error=error,
            attempts=attempts + 1,
            error_class=kind,
            retryable=retry,
        )
        return Outcome(stage.name, unit, "failed", error=error)
    ref = UnitRef(stage.name, unit, key)
    forced = stage.name in plan.force
    if not forced and store.is_complete(ref):
        # A done row with this key holds the output's fingerprint: no manifest read per cached unit.
        same = prev is not None and prev["state"] == "done" and prev["key"] == key and prev["fingerprint"]
        fp = prev["fingerprint"] if same and prev is not None else store.fingerprint(ref)
        failure, registered = _complete(stage, store, plan.config, ref)
        if failure is not None:
            error, kind, retry = failure
            _write_status(
                store,
                stage.name,
                unit,
                "failed",
                key=key,
                error=error,
                attempts=attempts,
                error_class=kind,
                retryable=retry,
            )
            return Outcome(stage.name, unit, "failed", key=key, error=error)
        if prev is None or prev["state"] != "done" or prev["key"] != key:
            _write_status(store, stage.name, unit, "done", key=key, fingerprint=fp, attempts=attempts)
        return Outcome(stage.name, unit, "cached", key=key, fingerprint=fp, registered=registered)
    if (
        not forced
        and prev is not None
        and prev["state"] == "failed"
        and prev["key"] == key
        and prev["retryable"] is False
    ):
        return Outcome(stage.name, unit, "failed", key=key, error=f"not retried (use --force): {prev['error']}")
    # A stage that said "nothing to do" (Skip) for these exact inputs says it again: e.g. a source
    # awaiting review is not re-run until its decision (part of the key) changes.
    if not forced and prev is not None and prev["state"] == "skipped" and prev["key"] == key:
        return Outcome(stage.name, unit, "skipped", key=key, error=prev["error"])
    return Prepared(stage.name, unit, key, inputs)


# Runs a group of a stage's units (one unless the stage declares ``group``), maybe elsewhere, and
# returns a way to wait for their outcomes (in the group's order).
Submit = Callable[[Stage, list[Prepared]], Callable[[], list[Outcome]]]


def run_inline(plan: Plan) -> Submit:
    """Execute units one after another in this thread (tests, debugging)."""

    def submit(stage: Stage, group: list[Prepared]) -> Callable[[], list[Outcome]]:
        outcomes = execute_group(stage, group, plan.config, plan.store)
        return lambda: outcomes

    return submit


def unit_groups(stage: Stage, prepared: list[Prepared]) -> list[list[Prepared]]:
    """The tasks a stage's units to compute go in: one per unit, or (``Stage.group``) one per
    ancestor of that kind, its units in their plan order."""
    if stage.group is None or stage.unit_kind == ALL:
        return [[p] for p in prepared]
    groups: dict[str, list[Prepared]] = {}
    for p in prepared:
        groups.setdefault(unit_ancestor(p.unit, stage.unit_kind, stage.group), []).append(p)
    return list(groups.values())


def run_stages(plan: Plan, stages: Iterable[Stage], submit: Submit) -> None:
    """Run ``stages`` in order; within a stage, hand every unit that must be computed to ``submit``
    (which may run it elsewhere and returns a way to wait for its outcome)."""
    for stage in stages:
        units = plan.units_of(stage)
        emit("stage", stage=stage.name, total=len(units))
        if not units:
            plan.no_units[stage.name] = plan.why_no_units(stage)
        to_compute = []
        for unit in units:
            prepared = prepare(plan, stage, unit)
            if isinstance(prepared, Outcome):
                plan.record(prepared)
                emit("end", stage=stage.name, unit=unit, outcome=prepared)
                continue
            to_compute.append(prepared)
        if not to_compute:
            continue
        # Checked only when something must be computed: a fully cached stage needs no weights.
        problems = plan.requirement_problems(stage)
        if problems:
            plan.stage_failures[stage.name] = StageFailure(
                stage.name, "; ".join(problems), [p.unit for p in to_compute]
            )
            emit("stage_failed", stage=stage.name, error=plan.stage_failures[stage.name].error)
            continue
        pending = [(group, submit(stage, group)) for group in unit_groups(stage, to_compute)]
        for group, wait in pending:
            try:
                outcomes = wait()
            except Exception as e:  # noqa: BLE001 - the runner lost the units (worker died, ...)
                outcomes = [Outcome(stage.name, p.unit, "failed", key=p.key, error=f"task failed: {e}") for p in group]
            for outcome in outcomes:
                plan.record(outcome)
        release_models(stage.name)  # the stage's teardown in this process (workers: see enter_stage)


def summarize(plan: Plan, data_root: str) -> dict[str, Any]:
    """Counts per stage, the failures with their errors, and the skips with their reasons."""
    stages: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for name, outcomes in plan.outcomes.items():
        counts: dict[str, Any] = {k: 0 for k in ("computed", "cached", "skipped", "failed")}
        for o in outcomes.values():
            counts[o.state] += 1
            if o.state == "failed":
                failed.append({"stage": name, "unit": o.unit, "error": o.error})
            elif o.state == "skipped":
                skipped.append({"stage": name, "unit": o.unit, "reason": o.error})
        stages.append({"stage": name, **counts, "seconds": round(sum(o.seconds for o in outcomes.values()), 1)})
    for name, sf in plan.stage_failures.items():
        row = next((s for s in stages if s["stage"] == name), None)
        if row is None:
            row = {"stage": name, "computed": 0, "cached": 0, "skipped": 0, "failed": 0, "seconds": 0.0}
            stages.append(row)
        row["not_started"] = len(sf.units)
        failed.append({"stage": name, "unit": f"* ({len(sf.units)} units not started)", "error": sf.error})
    for item, why in plan.selection.unknown(plan.sources()):
        failed.append({"stage": "--videos", "unit": item, "error": why})
    empty = [{"stage": name, "reason": why} for name, why in plan.no_units.items()]
    return {"data_root": data_root, "stages": stages, "failed": failed, "skipped": skipped, "no_units": empty}


class Job:
    """What a stage's ``run`` sees: its unit, its config, its inputs and its output writer."""

    def __init__(
        self,
        stage: Stage,
        unit: str,
        key: str,
        config: Config,
        store: Store,
        inputs: dict[str, dict[str, UnitRef]],
        out: UnitWriter,
        fed: Fed | None = None,
    ):
        self.stage = stage
        self.unit = unit
        self.key = key
        # only the sections the stage declares; typed as the Config it stands for (it answers the
        # same attributes, and raises on the undeclared ones)
        self.config: Config = cast(Config, StageConfig(config, stage))
        self._full_config = config  # backends are keyed by their own fields, which the view hides
        self.store = store
        self.inputs = inputs
        self.out = out
        self._fed = fed
        self._last_progress = 0.0

    def feed(self) -> Any:
        """The stage's ``feed`` of this unit: the one the worker prepared ahead (``execute_group``),
        or made now. A feed that failed raises here, in the unit it belongs to."""
        if self.stage.feed is None:
            raise ContractError(f"stage {self.stage.name} reads its feed without declaring one (Stage.feed)")
        fed, self._fed = self._fed, None
        if fed is None:
            return self.stage.feed(self)
        if fed.error is not None:
            raise fed.error
        return fed.value

    def ref(self, stage: str, unit: str | None = None) -> UnitRef:
        """The output of upstream ``stage`` for ``unit`` (default: the single related unit)."""
        refs = self.inputs.get(stage)
        if not refs:
            raise KeyError(f"stage {self.stage.name} does not read {stage}")
        if unit is None:
            if len(refs) != 1:
                raise KeyError(f"{stage} has {len(refs)} units for {self.unit}: name one")
            return next(iter(refs.values()))
        return refs[unit]

    def refs(self, stage: str) -> dict[str, UnitRef]:
        return dict(self.inputs.get(stage, {}))

    def read(self, stage: str, name: str, unit: str | None = None) -> pa.Table:
        """Table ``name`` of an upstream output, checked against that stage's declaration."""
        ref = self.ref(stage, unit)
        declared = _declared_output(stage, name, self.stage.name)
        table = self.store.read_table(ref, name)
        problem = None if declared.schema is None else schema.schema_difference(table.schema, declared.schema)
        if problem is not None:
            raise ContractError(
                f"{stage}:{ref.unit} {name} does not conform to its declared schema: {problem} "
                f"(written by another version? re-run it: vsi-wild run --only {stage} --force)"
            )
        return table

    def file(self, stage: str, name: str, unit: str | None = None) -> Path:
        return self.store.local_file(self.ref(stage, unit), name)

    def backend(self, kind: str, **options: Any) -> Any:
        """Build the ``kind`` backend this stage declares (``Stage.backends``), for this unit;
        ``options`` are the stage's own settings for it (e.g. a view's field of view)."""
        use = next((u for u in self.stage.backends if u.kind == kind), None)
        if use is None:
            raise ContractError(
                f"stage {self.stage.name} builds a {kind} backend without declaring it (Stage.backends)"
            )
        config = self._full_config
        if not use.active(config):
            raise ContractError(f"stage {self.stage.name} builds a {kind} backend where `{use.selector}` selects none")
        source_id = ids.unit_source(self.unit)

        def truth() -> dict[str, Any]:
            from vsi_wild.tasks.sample import load_truth  # the sample stage's tables (groundtruth backends)

            return load_truth(self.store, source_id)

        ctx = BackendContext(
            models=config.models, section=use.section(config), unit=self.unit, truth=truth, options=options
        )
        return create_backend(kind, use.name(config), ctx)

    def progress(self, done: int, total: int | None = None, what: str = "") -> None:
        """Report progress of long work (rate-limited; cheap to call per frame)."""
        now = time.monotonic()
        if total is not None and done >= total or now - self._last_progress > 0.25:
            self._last_progress = now
            emit("progress", stage=self.stage.name, unit=self.unit, done=done, total=total, what=what)


@dataclass
class Fed:
    """A unit's feed made ahead: its value, or the error making it raised."""

    value: Any = None
    error: BaseException | None = None


@dataclass
class StageFailure:
    """A stage none of whose units could start (a missing package or weight file)."""

    stage: str
    error: str
    units: list[str]


def _load_backends() -> None:
    """Import every module that registers backends (production ones load their packages lazily)."""
    import vsi_wild.stages.backends  # noqa: F401  imported to register
    import vsi_wild.stages.faces  # noqa: F401  imported to register


def backend_spec(use: BackendUse, config: Config) -> Any:
    _load_backends()
    return spec_of(use.kind, use.name(config))


# The model lifecycle of one process: the models a stage loads stay loaded while that stage's
# units run (load_once shares them between units and threads) and are released when the process
# moves on to another stage, or when the stage ends in the process that runs the plan.
_current_stage: str | None = None
_current_lock = threading.Lock()


def enter_stage(name: str) -> None:
    """Called before each unit: a worker that starts another stage's units first releases the
    models the previous stage loaded."""
    global _current_stage
    with _current_lock:
        if _current_stage is not None and _current_stage != name:
            _release()
        _current_stage = name


def release_models(name: str) -> None:
    """A stage's teardown: its models are dropped and the GPU memory they held is freed."""
    global _current_stage
    with _current_lock:
        if _current_stage == name:
            _release()
            _current_stage = None


def _release() -> None:
    import gc
    import sys

    clear_model_cache()
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


class ContractError(UnitError):
    """An output or an input that breaks its stage's declaration (a bug, or a stale artifact)."""

    def __init__(self, message: str):
        super().__init__(message, kind="internal", retryable=True)


_STAGES_BY_NAME: dict[str, Stage] = {}  # filled by register_stages: what Job.read checks against


def register_stages(stages: Iterable[Stage]) -> None:
    """Make the stages' declarations known to ``Job.read`` in this process (the registry's on
    import, for workers; a plan's own when it is loaded)."""
    for s in stages:
        _STAGES_BY_NAME[s.name] = s


def _declared_output(stage: str, name: str, reader: str) -> schema.Artifact:
    up = _STAGES_BY_NAME.get(stage)
    declared = up.output(name) if up is not None else None
    if declared is None:
        raise ContractError(
            f"stage {reader} reads {stage}:{name}, which stage {stage} does not declare as an output (schema.ARTIFACTS)"
        )
    return declared


def check_outputs(stage: Stage, folder: Path) -> None:
    """A unit's output is exactly what its stage declares: every file matches a declaration, every
    required file is there, every parquet file has its declared schema (its footer is read)."""
    import pyarrow.parquet as pq

    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    problems = []
    undeclared = [f for f in files if stage.output(f) is None]
    if undeclared:
        problems.append(f"undeclared files {undeclared[:5]}")
    for a in stage.outputs:
        if not a.optional and not a.is_pattern and a.name not in files:
            problems.append(f"missing {a.name}")
    for f in files:
        declared = stage.output(f)
        if declared is not None and declared.schema is not None:
            try:
                problem = schema.schema_difference(pq.read_schema(folder / f), declared.schema)
            except Exception as e:  # noqa: BLE001 - not parquet at all
                problem = f"unreadable as parquet ({e})"
            if problem is not None:
                problems.append(f"{f}: {problem}")
    if problems:
        raise ContractError(
            f"stage {stage.name} wrote an output that breaks its declaration (schema.ARTIFACTS"
            f"[{stage.name!r}]): " + "; ".join(problems)
        )


class StageConfig:
    """The config as one stage sees it: the sections it declares (``Stage.sections`` and
    ``unkeyed_sections``), ``models`` when it builds backends (their fields are keyed through
    ``Stage.backends``), ``run``, and nothing else, so a stage cannot depend on a section its
    cache key does not hold."""

    def __init__(self, config: Config, stage: Stage):
        allowed: dict[str, set[str] | None] = {}
        for section in (*stage.sections, *stage.unkeyed_sections):
            top, _, sub = section.partition(".")
            if not sub:
                allowed[top] = None
            elif (subs := allowed.setdefault(top, set())) is not None:
                subs.add(sub)
        if stage.backends:
            allowed["models"] = None
        allowed["run"] = None  # how the run executes (workers, runner): never part of a key
        self._config = config
        self._stage = stage.name
        self._allowed = allowed

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in type(self._config).model_fields:
            return getattr(self._config, name)
        if name not in self._allowed:
            raise AttributeError(
                f"stage {self._stage} reads config section {name!r} without declaring it "
                f"(Stage.sections): its cache key would not change with it"
            )
        value = getattr(self._config, name)
        subs = self._allowed[name]
        return value if subs is None else _SubSections(value, f"{self._stage}", name, subs)


class _SubSections:
    """A section of which a stage declares only some sub-sections (``crawl.search``)."""

    def __init__(self, section: Any, stage: str, name: str, allowed: set[str]):
        self._section, self._stage, self._name, self._allowed = section, stage, name, allowed

    def __getattr__(self, attr: str) -> Any:
        if attr in type(self._section).model_fields and attr not in self._allowed:
            raise AttributeError(
                f"stage {self._stage} reads config section '{self._name}.{attr}' without declaring it (Stage.sections)"
            )
        return getattr(self._section, attr)


def execute_group(stage: Stage, group: list[Prepared], config: Config, store: Store) -> list[Outcome]:
    """Run a group of a stage's units (``unit_groups``) here, in order, each as ``execute`` runs
    it. Where the stage has a ``feed``, a thread makes the next units' feeds while this one runs
    (at most two ahead): their decoding overlaps the model's work."""
    from vsi_wild.stages.video_io import prefetched  # PyAV: imported where a feed runs, not by every plan

    if stage.run_group is not None and len(group) > 1:
        together = _execute_together(stage, stage.run_group, group, config, store)
        if together is not None:
            return together
    if stage.feed is None or len(group) < 2:
        return [execute(stage, p, config, store) for p in group]
    feed = stage.feed

    def feeds() -> Iterator[tuple[Prepared, Fed]]:
        for p in group:
            job = Job(stage, p.unit, p.key, config, store, p.inputs, cast(UnitWriter, None))  # a feed writes no output
            try:
                yield p, Fed(feed(job))
            except Exception as e:  # noqa: BLE001 - raised in its own unit (Job.feed)
                yield p, Fed(error=e)

    return [execute(stage, p, config, store, fed) for p, fed in prefetched(feeds(), depth=1, name=f"feed-{stage.name}")]


def _execute_together(
    stage: Stage, run_group: Callable[[list[Job]], None], group: list[Prepared], config: Config, store: Store
) -> list[Outcome] | None:
    """``Stage.run_group`` over a group's units, each output committed and recorded as ``execute``
    does; None (nothing committed) when it raised or an output broke its declaration: the caller
    then runs the units one at a time (another attempt each), where each failure is its own unit's."""
    enter_stage(stage.name)
    started = _now()
    t0 = time.monotonic()
    attempts = {p.unit: _attempts(store, stage.name, p.unit) + 1 for p in group}
    for p in group:
        _write_status(store, stage.name, p.unit, "running", key=p.key, attempts=attempts[p.unit], started_at=started)
        emit("start", stage=stage.name, unit=p.unit)
    refs = [UnitRef(stage.name, p.unit, p.key) for p in group]
    try:
        with contextlib.ExitStack() as writers:
            outs = [writers.enter_context(store.writer(r)) for r in refs]
            run_group([Job(stage, p.unit, p.key, config, store, p.inputs, w) for p, w in zip(group, outs, strict=True)])
            for w in outs:
                check_outputs(stage, w.scratch)  # raising here discards every scratch folder
    except Exception as e:  # noqa: BLE001 - the units run again one at a time
        _log_traceback(store, stage.name, group[0].unit, e)
        return None
    outcomes = []
    for p, ref in zip(group, refs, strict=True):
        failure, registered = _complete(stage, store, config, ref)
        outcomes.append(_finish(store, ref, failure, registered, attempts[p.unit], started, time.monotonic() - t0))
    return outcomes


def execute(stage: Stage, prepared: Prepared, config: Config, store: Store, fed: Fed | None = None) -> Outcome:
    """Run one unit and record its status; never raises for a failure of the unit itself.
    ``fed``: its feed, made ahead (``execute_group``)."""
    unit, key = prepared.unit, prepared.key
    ref = UnitRef(stage.name, unit, key)
    enter_stage(stage.name)
    attempts = _attempts(store, stage.name, unit) + 1
    started = _now()
    _write_status(store, stage.name, unit, "running", key=key, attempts=attempts, started_at=started)
    emit("start", stage=stage.name, unit=unit)
    t0 = time.monotonic()
    failure: tuple[str, str, bool] | None = None
    registered: list[str] = []
    try:
        with store.writer(ref) as w:
            stage.run(Job(stage, unit, key, config, store, prepared.inputs, w, fed))
            check_outputs(stage, w.scratch)  # raising here discards the scratch folder
    except Skip as e:
        outcome = Outcome(stage.name, unit, "skipped", key=key, error=str(e), seconds=time.monotonic() - t0)
        _write_status(store, stage.name, unit, "skipped", key=key, error=str(e), attempts=attempts, started_at=started)
        emit("end", stage=stage.name, unit=unit, outcome=outcome)
        return outcome
    except Exception as e:  # noqa: BLE001 - one unit's failure must not stop the others
        _log_traceback(store, stage.name, unit, e)
        failure = _classify(e)
    else:
        failure, registered = _complete(stage, store, config, ref)
    return _finish(store, ref, failure, registered, attempts, started, time.monotonic() - t0)


def _finish(
    store: Store,
    ref: UnitRef,
    failure: tuple[str, str, bool] | None,
    registered: list[str],
    attempts: int,
    started: datetime,
    seconds: float,
) -> Outcome:
    """A finished unit's outcome, its status row ("done", or "failed" with the failure's class) and
    its "end" event."""
    if failure is None:
        fp = store.fingerprint(ref)
        outcome = Outcome(
            ref.stage, ref.unit, "computed", key=ref.key, fingerprint=fp, seconds=seconds, registered=registered
        )
        _write_status(
            store, ref.stage, ref.unit, "done", key=ref.key, fingerprint=fp, attempts=attempts, started_at=started
        )
    else:
        error, kind, retry = failure
        outcome = Outcome(ref.stage, ref.unit, "failed", key=ref.key, error=error, seconds=seconds)
        _write_status(
            store,
            ref.stage,
            ref.unit,
            "failed",
            key=ref.key,
            error=error,
            attempts=attempts,
            started_at=started,
            error_class=kind,
            retryable=retry,
        )
    emit("end", stage=ref.stage, unit=ref.unit, outcome=outcome)
    return outcome


def _complete(
    stage: Stage, store: Store, config: Config, ref: UnitRef
) -> tuple[tuple[str, str, bool] | None, list[str]]:
    """What follows a complete output (computed or cached): the registration step, then the
    stage's publish hook. Returns (failure, the source ids registered)."""
    registered: list[str] = []
    try:
        if stage.registers is not None:
            registered = register_sources(store, store.read_table(ref, stage.registers))
        if stage.publish is not None:
            stage.publish(store, config, ref)
    except Exception as e:  # noqa: BLE001 - a failed publish is logged: the unit's output stands
        _log_traceback(store, stage.name, ref.unit, e)
        return _classify(e), registered
    return None, registered


def register_sources(store: Store, rows: pa.Table) -> list[str]:
    """Register each source row (idempotent: an unchanged row is not rewritten; a source a person
    removed stays removed and is not returned)."""
    registered = []
    for row in schema.conform(rows, schema.SOURCE).to_pylist():
        if store.registry_row(row["source_id"]) == row or store.register_source(row):
            registered.append(row["source_id"])
    return registered


def _classify(e: BaseException) -> tuple[str, str, bool]:
    """(message, error class, retryable) of a unit's exception."""
    if isinstance(e, UnitError):
        return str(e), e.kind, e.retryable
    if isinstance(e, FileNotFoundError):
        return str(e), "bad_input", True
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}", "internal", True


def _log_traceback(store: Store, stage: str, unit: str, e: BaseException) -> None:
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    with contextlib.suppress(Exception):
        store.write_bytes_atomic(store.path("logs", stage, f"{unit}.log"), text.encode())


def _attempts(store: Store, stage: str, unit: str) -> int:
    prev = store.read_status(stage, unit)
    return int(prev["attempts"]) if prev else 0


def _now() -> datetime:
    return datetime.now(UTC)


def _write_status(
    store: Store,
    stage: str,
    unit: str,
    state: str,
    *,
    key: str,
    attempts: int,
    fingerprint: str | None = None,
    error: str | None = None,
    started_at: datetime | None = None,
    error_class: str | None = None,
    retryable: bool | None = None,
) -> None:
    ended = _now() if state in ("done", "failed", "skipped") else None
    store.write_status(
        {
            "stage": stage,
            "unit": unit,
            "state": state,
            "key": key,
            "fingerprint": fingerprint,
            "error": error,
            "error_class": error_class,
            "retryable": retryable,
            "attempts": attempts,
            "started_at": started_at,
            "ended_at": ended,
            "duration_s": (ended - started_at).total_seconds() if ended and started_at else None,
            "host": socket.gethostname(),
            "pipeline_version": __version__,
        }
    )
