"""One round loop for every measuring experiment (pyperf's Runner and Manager): the bench cells,
the serving experiments and the load levels all run through ``measure``.

Per cell: every built rung once per round, in a fresh seeded order (``round_orders``); warmup
rounds flagged; each process pinned to the cell's CPU set and its placement read back; what the
machine gave each process recorded, and a measured round in which one was clearly disturbed
measured again in a fresh order (``measure_round``); a rung that fails or crashes becomes its
status and is not run again; the early looks and the pilot, or the anytime-valid design's look
after every round and the cell's budget (bench cells). An experiment
supplies only how to run one process of one rung and read its records (``Experiment.process``).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Iterator, Mapping, Sequence, cast

from ladder.core import progress
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, read_json
from ladder.core.machine import cpu_set, host_brief
from ladder.core.records import RoundsPlan, RungEntry, RungStatus, Sample
from ladder.core.status import unbuilt_status
from ladder.planning import budget as budgets
from ladder.planning import protocol, sequential


def cell_seed(seed: int, cell: str) -> int:
    """The shuffle seed of one cell: the config seed and the cell's identity, so every cell has
    its own sequence of orders (a position effect then lands on a different rung in each cell
    instead of on the same one everywhere), reproducible and recorded."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{cell}".encode()).digest()[:8], "big")


def round_orders(names: Sequence[str], rounds: int, seed: int,
                 cell: str | None = None) -> list[list[str]]:
    """A shuffled order per round, reproducible from the seed (and the cell's identity)."""
    rng = random.Random(seed if cell is None else cell_seed(seed, cell))
    orders = []
    for _ in range(rounds):
        order = list(names)
        rng.shuffle(order)
        orders.append(order)
    return orders


def built_rungs(rungs: Sequence[RungEntry], where: str, none_ok: bool = False
                ) -> tuple[list[str], dict[str, RungStatus], dict[str, str]]:
    """The rungs whose build succeeded (names, in order), every rung's status entry, and the
    bin dir of each built one; a failed build is a status, not an error, unless none built
    (``none_ok``: then too, for a cell whose rungs are all one build's binary)."""
    status: dict[str, RungStatus] = {}
    active: list[str] = []
    bins: dict[str, str] = {}
    for r in rungs:
        prov = read_json(r["provenance"])
        entry: RungStatus = {"build_key": prov.get("build_key"), "runtime": r["runtime"],
                 "source": (prov.get("source") or {}).get("label"),
                 "status": "measured", "reason": None}
        if prov.get("status") != "ok":
            entry.update({"status": unbuilt_status(prov), "reason": prov.get("reason"),
                          "log": prov.get("log")})
        else:
            bins[r["name"]] = prov["bin_dir"]
            active.append(r["name"])
        status[r["name"]] = entry
    if not active and not none_ok:
        raise LadderError(f"{where}: no rung built successfully")
    return active, status, bins


def check_placement(seen: Sequence[int] | None, want: Sequence[int] | None, where: str) -> None:
    """A pinned process whose threads were allowed anywhere else than the cell's CPU set (read
    back from /proc while it ran) is a named error: its samples would not be the cell's."""
    if want is None:
        return
    if not seen:
        raise LadderError(f"{where}: CPU placement not verified: no thread of the process was "
                          f"seen in /proc (asked for CPUs {list(want)})")
    if not set(seen) <= set(want):
        raise LadderError(f"{where}: CPU placement mismatch: threads allowed on CPUs "
                          f"{sorted(seen)}, the cell's set is {list(want)}")


def disturbed(machine: Mapping[str, float], limits: Mapping[str, Any],
              own_cpus: int | None = None) -> str | None:
    """Why a run clearly did not get its CPUs (pure), or None: other processes used more than
    ``foreign_cpu_max`` of the job's CPUs over its wall time, or the hypervisor stole more than
    ``steal_max`` of the machine's.

    ``own_cpus``: the CPUs the job was given when that is fewer than the machine's (a SLURM
    job sharing its node): other jobs may use the rest, and only what they took beyond it came
    out of this job's CPUs."""
    foreign, steal = machine.get("foreign_cpu_share"), machine.get("steal_share")
    ncpu = int(machine.get("ncpu") or 0)
    whose = "the CPUs"
    if foreign is not None and own_cpus and 0 < own_cpus < ncpu:
        foreign = round(max(0.0, foreign * ncpu - (ncpu - own_cpus)) / own_cpus, 4)
        whose = f"the job's {own_cpus} CPUs"
    if foreign is not None and foreign > limits["foreign_cpu_max"]:
        return f"other processes used {foreign * 100:.0f} % of {whose}"
    if steal is not None and steal > limits["steal_max"]:
        return f"the hypervisor stole {steal * 100:.0f} % of the CPUs"
    return None


@dataclass
class Policy:
    """How a cell is measured (pyperf's Runner arguments): rounds, repetitions, the round
    statistic, the disturbance limits, the early looks, and where the processes run. Built
    from a config block by ``policy_from``; the block's defaults are the schema's."""

    rounds: int
    warmup_rounds: int
    reps: int | str
    statistic: str
    warmup: bool
    timeout_s: float
    limits: dict[str, Any]
    cpu_list: list[int] | None
    own_cpus: int | None
    # the bench cells' rules (None: not used by the experiment)
    rep_rule: dict[str, Any] | None = None
    retire: dict[str, Any] | None = None
    delta: float = 0.0
    # rounds chosen at a pilot look from the cell's A/A spread (target resolved to its phase);
    # None: the fixed ``rounds``
    rounds_rule: dict[str, Any] | None = None
    # the anytime-valid design (issue 56): a look after every round, each comparison measured
    # until it is decided (``sequential.look``), at most ``max`` rounds; its threshold resolved
    # to the cell's phase. None: the fixed rounds (or the pilot) and the Haybittle-Peto looks
    sequential: dict[str, Any] | None = None
    budget_s: float | None = None  # the cell's share of measure.budget (None: no budget)

    @property
    def horizon(self) -> int:
        """The most measured rounds a cell can get."""
        if self.sequential:
            return int(self.sequential["max"])
        return max(int(self.rounds_rule["max"]), self.rounds) if self.rounds_rule else self.rounds

    @property
    def auto(self) -> bool:
        return self.reps == "auto"

    def looks(self) -> set[int]:
        return (set(int(x) for x in self.retire["looks"])
                if self.retire and self.retire["enabled"] else set())

    def cpus_text(self) -> str:
        return ",".join(map(str, self.cpu_list)) if self.cpu_list is not None else "any"


def policy_from(block: Mapping[str, Any], threads: int, phase: str | None = None,
                own_cpus: int | None = None, budget_s: float | None = None) -> Policy:
    """A cell's policy from its config block (``measure``, or a serving experiment's block of
    the same keys): rounds, timeout_s, disturbance and cpus always; warmup_rounds, repetitions,
    round_statistic and warmup as given; auto_repetitions, retire (with its threshold) and
    rounds_from_noise where the experiment uses them (a bench cell: ``phase`` names its
    threshold), or, in their place, the anytime-valid design ``sequential`` when it is enabled.
    ``own_cpus``: the job's CPUs (``disturbed``); ``budget_s``: the cell's share of the run's
    measuring budget (``sequential`` only)."""
    statistic = protocol.checked_statistic(block["round_statistic"])
    reps = block["repetitions"]
    protocol.check_repetitions(reps, int(block["warmup_rounds"]), statistic)
    retire = block.get("retire")
    delta = protocol.threshold_for(retire["threshold"], phase) if retire and phase else 0.0
    rule = block.get("rounds_from_noise")
    seq = protocol.check_sequential(block.get("sequential"), phase) if phase else None
    if seq:  # the design's looks replace the pilot and the Haybittle-Peto looks
        retire, rule, delta = None, None, float(seq["threshold"] or 0.0)
    return Policy(
        rounds=int(block["rounds"]), warmup_rounds=int(block["warmup_rounds"]), reps=reps,
        statistic=statistic, warmup=bool(block["warmup"]), timeout_s=float(block["timeout_s"]),
        limits=dict(block["disturbance"]),
        cpu_list=cpu_set(threads, block["cpus"], job_cpus=own_cpus), own_cpus=own_cpus,
        rep_rule=dict(block["auto_repetitions"]) if reps == "auto" else None,
        retire={k: v for k, v in retire.items() if k != "threshold"} if retire else None,
        delta=delta,
        rounds_rule=(protocol.check_rounds_rule(rule, phase, delta)
                     if rule and phase and phase != protocol.POINTS else None),
        sequential=seq, budget_s=budget_s if seq else None)


@dataclass
class Cell:
    """What is measured and what it has given so far (pyperf's Manager state): the rungs, their
    binaries and statuses, every record (by kind: a bench cell's samples; a load's levels and
    requests), and the record of re-measured rounds."""

    name: str
    rungs: Sequence[RungEntry]
    status: dict[str, RungStatus]
    bins: dict[str, str]
    raw: Path
    seed: int
    brief: dict[str, Any]
    active: list[str] = field(default_factory=list)
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    log_lines: list[str] = field(default_factory=list)
    remeasured: list[dict[str, Any]] = field(default_factory=list)
    unresolved: list[int] = field(default_factory=list)
    used_orders: list[list[str]] = field(default_factory=list)
    retired: dict[str, int] = field(default_factory=dict)
    rounds: int = 0  # measured rounds planned (the horizon until a pilot look chooses them)
    rounds_plan: RoundsPlan | None = None
    # the anytime-valid design's record: each decided comparison (``sequential.look``), why
    # the cell stopped, and the time its measured rounds took
    decided: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: str | None = None
    round_seconds: list[float] = field(default_factory=list)
    round_sizes: list[int] = field(default_factory=list)  # processes in each timed round
    identity: str = ""  # the measuring settings' identity (``settings_identity``)
    resumed: dict[str, int] | None = None  # continued from a killed run's state
    spent_s: float = 0.0  # the whole round loop, warmup rounds and re-measures included

    @property
    def samples(self) -> list[Sample]:
        """The records of kind "samples", each completed as a ``Sample`` (``run_process``)."""
        return cast(list[Sample], self.records.setdefault("samples", []))

    @property
    def by_name(self) -> dict[str, RungEntry]:
        return {r["name"]: r for r in self.rungs}

    @property
    def grid(self) -> dict[str, tuple[str, int]] | None:
        return grid_of(self.rungs)

    def roles(self) -> tuple[list[str], str | None, str | None]:
        """The ladder's rungs in order, the control and its twin."""
        ladder = [r["name"] for r in self.rungs if not r.get("twin_of")]
        control = next((r["name"] for r in self.rungs if r.get("twin_of")), None)
        twin = next((r["twin_of"] for r in self.rungs if r.get("twin_of")), None)
        return ladder, control, twin


def grid_of(rungs: Sequence[RungEntry]) -> dict[str, tuple[str, int]] | None:
    """A reconciliation cell's entries as (rung, threads) pairs by name (None: a cell of rungs
    at one thread count)."""
    got = {str(r["name"]): (str(r["reconcile"]["rung"]), int(r["reconcile"]["threads"]))
           for r in rungs if r.get("reconcile")}
    return got or None


def open_cell(name: str, rungs: Sequence[RungEntry], raw_dir: str, seed: int,
              none_ok: bool = False) -> Cell:
    """A cell before its first round: its rungs' build statuses, its raw directory."""
    active, status, bins = built_rungs(rungs, name, none_ok=none_ok)
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    return Cell(name=name, rungs=rungs, status=status, bins=bins, raw=raw, seed=seed,
                brief=host_brief(), active=active)


@dataclass
class Paths:
    """Where a measuring job's inputs and outputs are: the model record, the raw directory, the result
    file and the job's log."""

    model_meta: str
    raw_dir: str
    out_json: str
    log: str


@dataclass
class Attempt:
    """One process to run: which rung, in which round, attempt and position, its raw files'
    stem, and whether the round is a warmup round."""

    rung: RungEntry
    rnd: int
    attempt: int
    pos: int
    stem: Path
    warmup: bool

    @property
    def name(self) -> str:
        return str(self.rung["name"])

    @property
    def where(self) -> str:
        return f"{self.name} round {self.rnd}"


@dataclass
class Outcome:
    """What one process gave: its records by kind (each completed by the harness with the
    round, attempt, position, rung, warmup flag, disturbance and where it ran), what the
    machine gave it (``run.machine_share``), the CPUs its threads were seen allowed on, why it
    failed (None: it did not), a line for the progress log and one for the job's log."""

    records: dict[str, list[dict[str, Any]]]
    machine: Mapping[str, float]
    cpus_seen: list[int] | None
    failure: str | None = None
    crashed: bool = False
    raw: str | None = None
    note: str = ""
    detail: str = ""


class Experiment:
    """What a measuring experiment supplies: how to run one process of one rung and read its
    records. The round loop, the shuffling, the placement, the re-measures and the looks are the
    harness's. ``name``: the cell's, which seeds its orders."""

    name: str

    def process(self, cell: Cell, policy: Policy, at: Attempt) -> Outcome:
        raise NotImplementedError

    def after_warmup(self, cell: Cell, policy: Policy) -> None:
        """Called once the warmup rounds are done (a bench cell calibrates its repetitions)."""

    def session(self, policy: Policy) -> ContextManager[object]:
        """What holds over the whole cell (a load generator pinned beside the servers' CPUs)."""
        return nullcontext()


@dataclass
class ModelExperiment(Experiment):
    """An experiment of one model file at one thread count, with its own settings block (the
    serving experiments: prefix cache, concurrency, load)."""

    name: str
    model: dict[str, Any]
    cfg: Mapping[str, Any]
    threads: int


def nothing_measured(what: str, cell: Cell) -> LadderError:
    """The error of a cell none of whose rungs gave a record, each rung's reason named."""
    return LadderError(f"{what}: " + "; ".join(f"{n}: {st['reason']}"
                                               for n, st in cell.status.items()))


def run_process(exp: Experiment, cell: Cell, policy: Policy, at: Attempt
                ) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """One process of one rung: its records, completed, and why it was disturbed (None if it was
    not). A failure or crash becomes the rung's status."""
    tag = (["warmup"] if at.warmup else []) + ([f"re-measure {at.attempt}"] if at.attempt else [])
    out = exp.process(cell, policy, at)
    why = disturbed(out.machine, policy.limits, policy.own_cpus)
    cell.log_lines.append(f"round {at.rnd} attempt {at.attempt} pos {at.pos} {at.name}: "
                          f"{out.detail or out.note} machine={dict(out.machine)}"
                          + (f" DISTURBED: {why}" if why else ""))
    total = policy.warmup_rounds + cell.rounds
    if out.failure:
        progress.step("round", at.rnd + 1, total, at.name, out.failure.splitlines()[0], *tag)
        cell.status[at.name].update({"status": "crashed" if out.crashed else "failed",
                                     "reason": out.failure, "round": at.rnd, "raw": out.raw})
    else:
        check_placement(out.cpus_seen, policy.cpu_list, f"{cell.name} {at.where}")
        progress.step("round", at.rnd + 1, total, at.name, out.note, *tag,
                      *([f"DISTURBED ({why})"] if why else []))
    base = {"rung": at.name, "round": at.rnd, "attempt": at.attempt, "order": at.pos,
            "warmup": at.warmup, "disturbed": why,
            "build_key": cell.status[at.name]["build_key"]}
    shares = {k: out.machine.get(k) for k in ("foreign_cpu_share", "steal_share")}
    # a sample carries where it ran and on which host (what must agree before samples combine);
    # other records (a load's level rows and requests) the shares its process got
    where = {"cpus": policy.cpus_text(), "cpus_seen": out.cpus_seen, **shares, **cell.brief}
    got = {kind: [{**base, **rec, **(where if kind == "samples" else shares)} for rec in recs]
           for kind, recs in out.records.items()}
    return got, why


def raw_stem(rnd: int, attempt: int, pos: int, name: str) -> str:
    """A process's raw files: round, re-measure attempt (a1, a2, ...), position, rung."""
    return (f"round{rnd:02d}-{pos:02d}-{name}" if not attempt
            else f"round{rnd:02d}a{attempt}-{pos:02d}-{name}")


def run_round(exp: Experiment, cell: Cell, policy: Policy, rnd: int, attempt: int,
              order: Sequence[str]) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """One round: every rung still measured, once, in ``order``; its records and the reasons
    any of its processes was disturbed."""
    got: dict[str, list[dict[str, Any]]] = {}
    reasons: list[str] = []
    for pos, name in enumerate(order):
        if cell.status[name]["status"] != "measured":
            continue  # crashed earlier: a deterministic crash is not re-run every round
        at = Attempt(rung=cell.by_name[name], rnd=rnd, attempt=attempt, pos=pos,
                     stem=cell.raw / raw_stem(rnd, attempt, pos, name),
                     warmup=rnd < policy.warmup_rounds)
        records, why = run_process(exp, cell, policy, at)
        for kind, recs in records.items():
            got.setdefault(kind, []).extend(recs)
        if why:
            reasons.append(f"{name}: {why}")
    return got, reasons


def measure_round(exp: Experiment, cell: Cell, policy: Policy, rnd: int, order: list[str],
                  spare: Iterator[list[str]]) -> None:
    """One round until it is undisturbed (the re-measure loop): a disturbed attempt is kept,
    marked and set aside, and the round measured again in a fresh order, up to
    ``max_remeasure`` times; a round still disturbed then is recorded as unresolved."""
    attempt = 0
    while True:
        cell.used_orders.append(order)
        got, reasons = run_round(exp, cell, policy, rnd, attempt, order)
        for kind, recs in got.items():
            cell.records.setdefault(kind, []).extend(recs)
        if not reasons or rnd < policy.warmup_rounds:  # a warmup round never counts anyway
            return
        for recs in got.values():  # the whole attempt is set aside: its rungs no longer pair
            for s in recs:
                s["disturbed"] = s["disturbed"] or "round disturbed: " + "; ".join(reasons)
        cell.remeasured.append({"round": rnd, "attempt": attempt, "reasons": reasons})
        if attempt >= policy.limits["max_remeasure"]:
            cell.unresolved.append(rnd)
            return
        attempt += 1
        order = [n for n in next(spare, order) if n not in cell.retired]


def retire_at_look(samples: Sequence[Mapping[str, Any]], ladder: Sequence[str],
                   keep: Sequence[str | None], threshold: float, rule: Mapping[str, Any],
                   statistic: str = "mean") -> set[str]:
    """At an early look (pure): the rungs not to run again, because every comparison they
    take part in is a gross step already called at the strict interim level (Haybittle-Peto;
    ``protocol.retirable``). The rounds are fixed; nothing else ends a cell early, so an A/A pair
    or a small step that looks equivalent or inconclusive keeps running to the last round."""
    return protocol.retirable(protocol.clean_samples(samples), ladder, [k for k in keep if k],
                              threshold, float(rule["alpha"]), statistic)


def look(cell: Cell, policy: Policy, measured: int) -> None:
    """An early look after ``measured`` rounds: retire the gross steps (``retire_at_look``)."""
    if measured not in policy.looks() or measured >= cell.rounds or not policy.retire:
        return
    ladder, control, twin = cell.roles()
    gone = retire_at_look(cell.samples, ladder, [control, twin], policy.delta, policy.retire,
                          policy.statistic)
    for name in sorted(gone - set(cell.retired)):
        cell.retired[name] = measured
    progress.step("look", measured, cell.rounds, "retired (every step called at p < "
                  f"{policy.retire['alpha']:g}): {', '.join(sorted(cell.retired)) or 'none'}")


def pilot(cell: Cell, policy: Policy, measured: int) -> None:
    """The pilot look after ``rounds_rule["pilot"]`` measured rounds: the cell's rounds from
    its own A/A spread (``protocol.plan_rounds``), counted after the last retirement (a look
    at the same round count runs first)."""
    rule = policy.rounds_rule
    if not rule or measured != int(rule["pilot"]):
        return
    _, control, twin = cell.roles()
    clean = protocol.clean_samples(cell.samples)
    sets = protocol.measured_sets(clean)
    running = (sets[max(sets)] - set(cell.retired)) if sets else frozenset()
    plan = protocol.plan_rounds(clean, control, twin, rule, policy.delta, policy.rounds,
                                policy.statistic, next_set=running)
    cell.rounds, cell.rounds_plan = plan["rounds"], plan
    progress.step("pilot", measured, cell.rounds, plan["why"])


def sequential_look(cell: Cell, policy: Policy, measured: int) -> None:
    """After a measured round (the anytime-valid design): decide what the rounds so far decide
    (``sequential.look``) and retire every rung no open comparison needs any more
    (``sequential.still_needed``); with nothing open the cell has no further round. A cell
    whose samples name their points (``sequential.by_point``) looks at each point on its own,
    at its phase's δ; a rung leaves when no point needs it."""
    seq = policy.sequential
    if not seq or measured < sequential.MIN_ROUNDS:
        return
    ladder, control, twin = cell.roles()
    need: set[str] = set()
    new: dict[str, dict[str, Any]] = {}
    for point, samples in sequential.by_point(cell.samples):
        delta = policy.delta if point is None else float(
            seq["thresholds"][str(samples[0]["phase"])])
        decided = sequential.decided_at(cell.decided, point)
        got = sequential.look(samples, ladder, control, twin, decided, int(seq["max"]),
                              float(seq["alpha"]), float(seq["factor"]), delta,
                              policy.statistic, seq.get("futility"), cell.grid)
        mine = {sequential.point_key(point, key): {**d, "at": measured} for key, d in got.items()}
        cell.decided.update(mine)
        new.update(mine)
        measured_names = {str(s["rung"]) for s in protocol.clean_samples(samples)}
        # a comparison with a rung that failed or crashed gets no more rounds: not waited for
        comps = [c for c in sequential.cell_comparisons(ladder, control, twin, measured_names,
                                                        cell.grid)
                 if all(cell.status[n]["status"] == "measured" for n in c[1:])]
        need |= sequential.still_needed(comps, sequential.decided_at(cell.decided, point),
                                        control, twin, seq["wait_for"])
    for name in sorted(set(cell.active) - need - set(cell.retired)):
        cell.retired[name] = measured
    if new:
        # a step that is also a comparison with the floor is said once
        progress.step("look", measured, cell.rounds, "decided: " + ", ".join(dict.fromkeys(
            sequential.describe(k) + " "
            + ("out of reach (futility)" if d["decision"] == "futile" else d["decision"])
            for k, d in sorted(new.items()))))
    if not need:
        cell.stopped = "decided"


def over_budget(cell: Cell, policy: Policy, measured: int, spent: float) -> bool:
    """Whether the next round would overrun the cell's budget: its time estimated from the
    mean measured round so far, scaled to the rungs it still runs. Never before the fewest
    rounds a comparison is judged on."""
    if policy.budget_s is None or measured < sequential.MIN_ROUNDS or not cell.round_seconds:
        return False
    running = [n for n in cell.active if n not in cell.retired
               and cell.status[n]["status"] == "measured"]
    per_rung = sum(cell.round_seconds) / max(1, sum(cell.round_sizes))
    return spent + per_rung * len(running) > policy.budget_s


def measure(exp: Experiment, cell: Cell, policy: Policy, resume: Path | None = None,
            kept: Mapping[str, Any] | None = None) -> None:
    """Run ``warmup_rounds + rounds`` interleaved rounds of ``exp`` on ``cell`` (its records,
    statuses and re-measures are the cell's afterwards); spare orders for re-measured rounds
    come from the same seeded sequence, after the planned ones. ``resume``: where the cell's
    state is kept after every round (``state_of``) until it ends; ``kept``: a killed run's
    state of this cell (checked by ``run_cell``), continued from (``restore``) with its raw
    files put back from ``resume``."""
    cell.rounds = policy.horizon  # until a pilot look chooses them
    first = policy.warmup_rounds + policy.horizon
    orders = round_orders(cell.active, first + policy.horizon * policy.limits["max_remeasure"],
                          cell.seed, cell.name)
    spare = iter(orders[first:])
    rnd, spent_before = 0, 0.0
    if kept is not None and resume is not None:
        rnd, spent_before = restore(cell, kept)
        # the raw files of the kept rounds (Snakemake removed the killed job's outputs)
        shutil.copytree(resume / "raw", cell.raw, dirs_exist_ok=True)
        for _ in range(len(cell.used_orders) - rnd):  # the spare orders re-measures used
            next(spare, None)
        progress.step("resume", rnd, policy.warmup_rounds + cell.rounds,
                      f"continuing a killed run's cell after its round {rnd} "
                      f"({len(cell.samples)} samples kept)")
        if rnd > policy.warmup_rounds:
            exp.after_warmup(cell, policy)
    start = time.monotonic() - spent_before
    with exp.session(policy):
        while rnd < policy.warmup_rounds + cell.rounds:
            if rnd == policy.warmup_rounds:
                exp.after_warmup(cell, policy)
            measured = rnd - policy.warmup_rounds
            if cell.stopped or over_budget(cell, policy, measured, time.monotonic() - start):
                cell.stopped = cell.stopped or "budget"
                break
            order = [n for n in orders[rnd] if n not in cell.retired]
            t0 = time.monotonic()
            measure_round(exp, cell, policy, rnd, order, spare)
            if rnd >= policy.warmup_rounds:
                cell.round_seconds.append(time.monotonic() - t0)
                cell.round_sizes.append(len(order))
            look(cell, policy, measured + 1)
            pilot(cell, policy, measured + 1)
            sequential_look(cell, policy, measured + 1)
            rnd += 1
            if resume is not None:
                keep_state(resume, cell, state_of(cell, rnd, time.monotonic() - start))
    cell.spent_s = time.monotonic() - start
    if policy.sequential and not cell.stopped:
        cell.stopped = "cap"


STATE_FORMAT = "ladder-cell-state/1"


def state_of(cell: Cell, next_round: int, spent_s: float) -> dict[str, Any]:
    """What a killed run needs to continue a cell (``restore``): every record, status and
    decision so far, the orders used, and the round to measure next."""
    return {"format": STATE_FORMAT, "protocol": protocol.VERSION, "cell": cell.name,
            "identity": cell.identity, "seed": cell.seed,
            "next_round": next_round, "spent_s": spent_s,
            "build_keys": {n: st.get("build_key") for n, st in cell.status.items()},
            "status": cell.status, "records": cell.records, "remeasured": cell.remeasured,
            "unresolved": cell.unresolved, "used_orders": cell.used_orders,
            "retired": cell.retired, "rounds": cell.rounds, "rounds_plan": cell.rounds_plan,
            "decided": cell.decided, "stopped": cell.stopped,
            "round_seconds": cell.round_seconds, "round_sizes": cell.round_sizes}


def keep_state(where: Path, cell: Cell, state: Mapping[str, Any]) -> None:
    """After a round: the cell's raw files so far copied beside its state (the files a killed
    job's outputs held), then the state written atomically."""
    raw = where / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for f in cell.raw.iterdir():
        if f.is_file() and not (raw / f.name).exists():
            shutil.copy2(f, raw / f.name)
    atomic_write_json(where / "state.json", state)


def settings_identity(block: Mapping[str, Any], threads: int, phase: str | None) -> str:
    """The measuring settings a kept state belongs to (the block less its seed, which a
    fresh measurement draws anew), the threads and the phase."""
    keep = {k: v for k, v in block.items() if k != "seed"}
    text = json.dumps([keep, threads, phase], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resumable(state: Mapping[str, Any], name: str, status: Mapping[str, RungStatus],
              identity: str) -> bool:
    """Whether a kept state continues this cell: the same format, protocol, cell, measuring
    settings (``settings_identity``) and the same builds of the same rungs."""
    return (state.get("format") == STATE_FORMAT and state.get("protocol") == protocol.VERSION
            and state.get("cell") == name and state.get("identity") == identity
            and state.get("build_keys") == {n: st.get("build_key") for n, st in status.items()})


def restore(cell: Cell, state: Mapping[str, Any]) -> tuple[int, float]:
    """A kept state into ``cell``: the round to measure next and the time already spent."""
    cell.status.update(state["status"])
    cell.records = {k: list(v) for k, v in state["records"].items()}
    cell.remeasured, cell.unresolved = list(state["remeasured"]), list(state["unresolved"])
    cell.used_orders = [list(o) for o in state["used_orders"]]
    cell.retired = {k: int(v) for k, v in state["retired"].items()}
    cell.rounds, cell.rounds_plan = int(state["rounds"]), state["rounds_plan"]
    cell.decided = {k: dict(v) for k, v in state["decided"].items()}
    cell.stopped = state.get("stopped")
    cell.round_seconds = [float(x) for x in state["round_seconds"]]
    cell.round_sizes = [int(x) for x in state["round_sizes"]]
    cell.resumed = {"after_round": int(state["next_round"]),
                    "samples": len(cell.records.get("samples") or [])}
    return int(state["next_round"]), float(state["spent_s"])


def run_cell(exp: Experiment, rungs: Sequence[RungEntry], block: Mapping[str, Any],
             paths: Paths, job: tuple[int, str | None, int | None],
             none_ok: bool = False, budget_s: float | None = None
             ) -> tuple[Cell, Policy, dict[str, Any]]:
    """A measuring job: its policy from ``block`` (``policy_from``; ``job``: the processes'
    threads, the phase whose threshold the looks use, the job's CPUs), its cell through
    ``measure``, the per-process log lines appended to the job's log. The cell, the policy, and
    what every result file records of them (``cell_meta``, with where the seed came from).
    ``budget_s``: the cell's allowance of the run's budget (the anytime-valid design only)."""
    threads, phase, own_cpus = job
    policy = policy_from(block, threads, phase, own_cpus, budget_s)
    seed, seed_source = protocol.run_seed(block["seed"])
    cell = open_cell(exp.name, rungs, paths.raw_dir, seed, none_ok=none_ok)
    # a killed run of this cell left its state beside the job's log: continue it (its seed
    # gives the same orders); a state of other settings or builds is set aside, never mixed in
    resume = Path(paths.log).with_suffix(".state")
    cell.identity = settings_identity(block, threads, phase)
    kept = read_json(resume / "state.json") if (resume / "state.json").is_file() else None
    if kept is not None and resumable(kept, cell.name, cell.status, cell.identity):
        cell.seed, seed_source = int(kept["seed"]), f"{seed_source} (resumed)"
    else:
        kept = None
        if resume.exists():  # another cell's settings or builds: set aside, never mixed in
            resume.replace(resume.with_suffix(f".stale-{time.strftime('%Y%m%dT%H%M%S')}"))
    measure(exp, cell, policy, resume=resume, kept=kept)
    with open(paths.log, "a") as f:  # beside the progress lines the job's logger already wrote
        f.write("\n".join(cell.log_lines) + "\n")
    shutil.rmtree(resume, ignore_errors=True)  # the cell ended: its result holds everything
    return cell, policy, {**cell_meta(cell, policy), "seed_source": seed_source}


@dataclass
class Budget:
    """The run's measuring budget as a job sees it: its host, the host's budget in seconds
    (0: none) and the cells it is shared by (``ladder.planning.budget``)."""

    host: str
    budget_s: float
    cells: int


def run_budgeted(exp: Experiment, rungs: Sequence[RungEntry], block: Mapping[str, Any],
                 paths: Paths, job: tuple[int, str | None, int | None], budget: Budget | None,
                 cell_id: str, none_ok: bool = False
                 ) -> tuple[Cell, Policy, dict[str, Any], dict[str, Any] | None]:
    """``run_cell`` within the cell's allowance of the run's ``budget`` (what the run's
    finished cells left, shared by those still to measure: ``ladder.planning.budget``), the
    cell recorded in the run's ledger under ``cell_id`` when the anytime-valid design measured
    it; and the allowance (None: no budget)."""
    ledger = budgets.ledger_path(budget.host) if budget else None
    allowed = (budgets.allowance(budget.budget_s, budget.cells, cell_id,
                                 budgets.read_ledger(ledger))
               if budget and budget.budget_s else None)
    cell, policy, meta = run_cell(exp, rungs, block, paths, job, none_ok=none_ok,
                                  budget_s=allowed["allowance_s"] if allowed else None)
    if policy.sequential:
        budgets.record(ledger, cell_id, cell.spent_s, policy.budget_s, cell.stopped)
    return cell, policy, meta, allowed


def cell_meta(cell: Cell, policy: Policy) -> dict[str, Any]:
    """What every experiment's result file records of how it was measured: the rounds, the
    seeded orders it ran, the host, every rung's status, the re-measured and unresolved
    rounds, the retirements and where the processes ran."""
    return {
        "protocol": protocol.VERSION, "rounds": cell.rounds,
        "warmup_rounds": policy.warmup_rounds, "rounds_plan": cell.rounds_plan,
        "round_statistic": policy.statistic, "seed": cell.seed,
        "order_seed": {"cell": cell.name, "seed": cell_seed(cell.seed, cell.name)},
        "orders": cell.used_orders, "host": cell.brief, "rungs": cell.status,
        "disturbance": {"limits": policy.limits, "remeasured": cell.remeasured,
                        "unresolved": cell.unresolved},
        "retire": ({**policy.retire, "threshold": policy.delta, "retired": cell.retired}
                   if policy.retire else None),
        "sequential": sequential_meta(cell, policy),
        "cpus": policy.cpu_list,
        "resumed": cell.resumed,
    }


def sequential_meta(cell: Cell, policy: Policy) -> dict[str, Any] | None:
    """What a cell measured by the anytime-valid design records of it: the design, its budget
    and what it spent, why the cell stopped (decided: every comparison; budget; cap: the
    design's maximum), each comparison decided with its decision, rounds and the look it was
    decided at, and when each rung left the rounds."""
    if not policy.sequential:
        return None
    # a cell of several points has no one δ: each point's phase has its own ("thresholds")
    one = policy.delta if policy.sequential.get("threshold") is not None else None
    return {**policy.sequential, "rule": "gs", "threshold": one,
            "budget_s": policy.budget_s, "spent_s": round(cell.spent_s, 3),
            "measured_rounds": len(cell.round_seconds), "stopped": cell.stopped,
            "decided": cell.decided, "left": cell.retired}
