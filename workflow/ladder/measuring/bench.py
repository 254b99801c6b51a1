"""Interleaved llama-bench rounds: every rung once per round, in a fresh shuffled order.

One job per (quant, workload, threads) cell, so slow drift of the machine hits every rung alike.
Every raw llama-bench JSON and stderr is kept; the samples file is derived from them.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ladder.core import parse, progress
from ladder.planning import protocol
from ladder.core.errors import LadderError
from ladder.core.machine import cpu_set, host_brief
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.run import run
from ladder.core.status import unbuilt_status

FORMAT = "ladder-samples/1"


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


def bench_argv(bin_dir: str, model: str, workload: Mapping[str, Any], threads: int, reps: int,
               warmup: bool, runtime_args: Sequence[str]) -> list[str]:
    argv = [str(Path(bin_dir) / "llama-bench"), "-m", model,
            "-p", str(workload.get("n_prompt", 0)), "-n", str(workload.get("n_gen", 0)),
            "-t", str(threads), "-r", str(reps), "-o", "json"]
    if workload.get("n_depth"):
        argv += ["-d", str(workload["n_depth"])]
    argv += [str(a) for a in workload.get("args") or ()]  # e.g. -ctk/-ctv/-fa, -ub (serving)
    if not warmup:
        argv.append("--no-warmup")
    return argv + list(runtime_args)


def built_rungs(rungs: Sequence[Mapping[str, Any]], where: str, none_ok: bool = False
                ) -> tuple[list[str], dict[str, dict[str, Any]], dict[str, str]]:
    """The rungs whose build succeeded (names, in order), every rung's status entry, and the
    bin dir of each built one; a failed build is a status, not an error, unless none built
    (``none_ok``: then too, for a cell whose rungs are all one build's binary)."""
    status: dict[str, dict[str, Any]] = {}
    active: list[str] = []
    bins: dict[str, str] = {}
    for r in rungs:
        prov = read_json(r["provenance"])
        entry = {"build_key": prov.get("build_key"), "runtime": r["runtime"],
                 "source": (prov.get("source") or {}).get("label"),
                 "status": "measured", "reason": None}
        if prov.get("status") != "ok":
            entry.update(status=unbuilt_status(prov), reason=prov.get("reason"), log=prov.get("log"))
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


DEFAULT_DISTURBANCE = {"foreign_cpu_max": 0.10, "steal_max": 0.05, "max_remeasure": 3}


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


DEFAULT_AUTO_REPETITIONS = {"min_seconds": 3.0, "max": 5}


def calibrated_repetitions(samples: Sequence[Mapping[str, Any]], rungs: Sequence[Mapping[str, Any]],
                           rule: Mapping[str, Any]) -> dict[str, int]:
    """llama-bench -r per rung, from the warmup round's speed (pyperf calibrates its loops the
    same way): enough repetitions that one process measures for ``min_seconds``, at most
    ``max``. A fast rung's round becomes the mean of several repetitions (measured here: the
    pair-ratio spread of pp128 fell from 5.2 % to 3.0 % with the mean of 5), while the slow floor,
    whose single repetition already lasts seconds, is not run five times longer. A control and
    its twin (one binary, the noise floor) always get the same count."""
    seconds: dict[str, list[float]] = {}
    for s in samples:
        if s.get("warmup") and s.get("ns"):
            seconds.setdefault(s["rung"], []).append(float(s["ns"]) / 1e9)
    out = {}
    for r in rungs:
        got = sorted(seconds.get(r["name"]) or [])
        rep_s = got[len(got) // 2] if got else None
        out[r["name"]] = (max(1, min(int(rule["max"]), math.ceil(float(rule["min_seconds"]) / rep_s)))
                          if rep_s else 1)
    for r in rungs:
        if r.get("twin_of") in out:
            out[r["twin_of"]] = out[r["name"]] = max(out[r["twin_of"]], out[r["name"]])
    return out


DEFAULT_RETIRE = {"enabled": True, "looks": [3, 5, 10], "alpha": protocol.INTERIM_ALPHA}
phase_of = protocol.phase_of


def retire_at_look(samples: Sequence[Mapping[str, Any]], ladder: Sequence[str],
                   keep: Sequence[str | None], threshold: float, rule: Mapping[str, Any],
                   statistic: str = "mean") -> set[str]:
    """At an early look (pure): the rungs not to run again, because every comparison they
    take part in is a gross step already called at the strict interim level (Haybittle-Peto;
    ``protocol.retirable``). The rounds are fixed; nothing else ends a cell early, so an A/A pair
    or a small step that looks equivalent or inconclusive keeps running to the last round."""
    return protocol.retirable(protocol.clean_samples(samples), ladder, [k for k in keep if k],
                              threshold, float(rule["alpha"]), statistic)


@dataclass
class Policy:
    """How a cell is measured (pyperf's Runner arguments): rounds, repetitions, the round
    statistic, the disturbance limits, the early looks, and where the processes run."""

    rounds: int
    warmup_rounds: int
    reps: int | str
    rep_rule: dict[str, Any]
    statistic: str
    warmup: bool
    timeout_s: float
    limits: dict[str, Any]
    retire: dict[str, Any]
    delta: float
    cpu_list: list[int] | None
    own_cpus: int | None
    # rounds chosen at a pilot look from the cell's A/A spread (target resolved to its phase);
    # None: the fixed ``rounds``
    rounds_rule: dict[str, Any] | None = None

    @property
    def horizon(self) -> int:
        """The most measured rounds a cell can get."""
        return max(int(self.rounds_rule["max"]), self.rounds) if self.rounds_rule else self.rounds

    @property
    def auto(self) -> bool:
        return self.reps == "auto"

    def looks(self) -> set[int]:
        return set(int(x) for x in self.retire["looks"]) if self.retire["enabled"] else set()


@dataclass
class Cell:
    """What is measured and what it has given so far (pyperf's Manager state): the rungs, their
    binaries and statuses, every sample, and the record of re-measured rounds."""

    name: str
    quant: str
    workload_name: str
    rungs: Sequence[Mapping[str, Any]]
    status: dict[str, dict[str, Any]]
    bins: dict[str, str]
    model: dict[str, Any]
    workload: Mapping[str, Any]
    threads: int
    raw: Path
    reps_by: dict[str, int]
    brief: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    remeasured: list[dict[str, Any]] = field(default_factory=list)
    unresolved: list[int] = field(default_factory=list)
    used_orders: list[list[str]] = field(default_factory=list)
    retired: dict[str, int] = field(default_factory=dict)
    rounds: int = 0  # measured rounds planned (the horizon until a pilot look chooses them)
    rounds_plan: dict[str, Any] | None = None

    @property
    def by_name(self) -> dict[str, Mapping[str, Any]]:
        return {r["name"]: r for r in self.rungs}

    def roles(self) -> tuple[list[str], str | None, str | None]:
        """The ladder's rungs in order, the control and its twin."""
        ladder = [r["name"] for r in self.rungs if not r.get("twin_of")]
        control = next((r["name"] for r in self.rungs if r.get("twin_of")), None)
        twin = next((r["twin_of"] for r in self.rungs if r.get("twin_of")), None)
        return ladder, control, twin


def run_process(cell: Cell, policy: Policy, name: str, rnd: int, attempt: int, pos: int
                ) -> tuple[list[dict[str, Any]], str | None]:
    """One llama-bench process of one rung: its raw output kept, its samples, and why it was
    disturbed (None if it was not). A crash or failure becomes the rung's status."""
    r = cell.by_name[name]
    tag = (["warmup"] if rnd < policy.warmup_rounds else []) + (
        [f"re-measure {attempt}"] if attempt else [])
    # before an auto calibration (the warmup round) every rung runs 1 repetition
    argv = bench_argv(cell.bins[name], cell.model["path"], cell.workload, cell.threads,
                      cell.reps_by[name], policy.warmup, r["bench_argv"])
    res = run(argv, env=r["env"], timeout_s=policy.timeout_s, cpus=policy.cpu_list)
    stem = cell.raw / raw_stem(rnd, attempt, pos, name)
    atomic_write_text(f"{stem}.json", res.stdout)
    atomic_write_text(f"{stem}.stderr.log", f"$ {' '.join(argv)}\n# env {r['env']}\n{res.stderr}")
    why = disturbed(res.machine, policy.limits, policy.own_cpus)
    cell.log_lines.append(f"round {rnd} attempt {attempt} pos {pos} {name}: "
                          f"rc={res.returncode} wall={res.wall_s:.2f}s cpu={res.cpu_s:.2f}s "
                          f"rss={res.peak_rss_kib}KiB machine={res.machine}"
                          + (f" DISTURBED: {why}" if why else ""))
    failure = res.failure()
    if failure:
        progress.step("round", rnd + 1, policy.warmup_rounds + cell.rounds, name,
                      failure.splitlines()[0], *tag)
        cell.status[name].update(status="crashed" if res.signal_name else "failed",
                                 reason=failure, round=rnd, raw=f"{stem}.stderr.log")
        return [], None
    check_placement(res.cpus_seen, policy.cpu_list, f"{cell.name} {name} round {rnd}")
    got = []
    for rec in parse.bench_records(res.stdout, f"{stem}.json"):
        if int(rec["n_threads"]) != cell.threads:
            raise LadderError(f"{stem}.json: llama-bench ran {rec['n_threads']} threads, "
                              f"asked for {cell.threads}")
        base = {"rung": name, "round": rnd, "attempt": attempt, "order": pos,
                "warmup": rnd < policy.warmup_rounds, "disturbed": why}
        got += [sample_record(base, rep, ts, ns, rec, res, cell, policy)
                for rep, (ts, ns) in enumerate(zip(rec["samples_ts"], rec["samples_ns"]))]
        progress.step("round", rnd + 1, policy.warmup_rounds + cell.rounds, name,
                      f"{float(np.mean(rec['samples_ts'])):.1f} tok/s", *tag,
                      *([f"DISTURBED ({why})"] if why else []))
    return got, why


def sample_record(base: Mapping[str, Any], rep: int, ts: float, ns: int,
                  rec: Mapping[str, Any], res: Any, cell: Cell, policy: Policy
                  ) -> dict[str, Any]:
    """One repetition of one process, with everything that must agree before samples combine
    (``stats.check_combinable``) and where it ran."""
    wall = res.wall_s
    return {
        **base, "rep": rep, "build_key": cell.status[base["rung"]]["build_key"],
        "n_threads": rec["n_threads"], "n_prompt": rec["n_prompt"], "n_gen": rec["n_gen"],
        "n_depth": rec.get("n_depth", 0), "tokens_per_s": float(ts), "ns": int(ns),
        "build_commit": rec["build_commit"], "model_type": rec["model_type"],
        "model_size": rec["model_size"], "model_n_params": rec.get("model_n_params"),
        "repack": rec.get("repack"), "peak_rss_kib": res.peak_rss_kib,
        "wall_s": round(wall, 3),
        "raw": base_raw(cell, base),
        "cpu_share": round(res.cpu_s / (wall * cell.threads), 4) if wall > 0 else None,
        **{k: res.machine.get(k) for k in ("foreign_cpu_share", "steal_share")},
        **cell.brief,
        "cpus": ",".join(map(str, policy.cpu_list)) if policy.cpu_list is not None else "any",
        "cpus_seen": res.cpus_seen,
    }


def raw_stem(rnd: int, attempt: int, pos: int, name: str) -> str:
    """A process's raw files: round, re-measure attempt (a1, a2, ...), position, rung."""
    return (f"round{rnd:02d}-{pos:02d}-{name}" if not attempt
            else f"round{rnd:02d}a{attempt}-{pos:02d}-{name}")


def base_raw(cell: Cell, base: Mapping[str, Any]) -> str:
    stem = raw_stem(base["round"], base["attempt"], base["order"], base["rung"])
    return f"{cell.raw / stem}.json"


def run_round(cell: Cell, policy: Policy, rnd: int, attempt: int, order: Sequence[str]
              ) -> tuple[list[dict[str, Any]], list[str]]:
    """One round: every rung still measured, once, in ``order``; its samples and the reasons
    any of its processes was disturbed."""
    got: list[dict[str, Any]] = []
    reasons: list[str] = []
    for pos, name in enumerate(order):
        if cell.status[name]["status"] != "measured":
            continue  # crashed earlier: a deterministic crash is not re-run every round
        samples, why = run_process(cell, policy, name, rnd, attempt, pos)
        got += samples
        if why:
            reasons.append(f"{name}: {why}")
    return got, reasons


def measure_round(cell: Cell, policy: Policy, rnd: int, order: list[str],
                  spare: Iterator[list[str]]) -> None:
    """One round until it is undisturbed (the re-measure loop): a disturbed attempt is kept,
    marked and set aside, and the round measured again in a fresh order, up to
    ``max_remeasure`` times; a round still disturbed then is recorded as unresolved."""
    attempt = 0
    while True:
        cell.used_orders.append(order)
        got, reasons = run_round(cell, policy, rnd, attempt, order)
        cell.samples += got
        if not reasons or rnd < policy.warmup_rounds:  # a warmup round never counts anyway
            return
        for s in got:  # the whole attempt is set aside: its rungs no longer pair cleanly
            s["disturbed"] = s["disturbed"] or "round disturbed: " + "; ".join(reasons)
        cell.remeasured.append({"round": rnd, "attempt": attempt, "reasons": reasons})
        if attempt >= policy.limits["max_remeasure"]:
            cell.unresolved.append(rnd)
            return
        attempt += 1
        order = [n for n in next(spare, order) if n not in cell.retired]


def look(cell: Cell, policy: Policy, measured: int) -> None:
    """An early look after ``measured`` rounds: retire the gross steps (``retire_at_look``)."""
    if measured not in policy.looks() or measured >= cell.rounds:
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


def make_policy(*, rounds: int, reps: int | str, warmup: bool, timeout_s: float,
                warmup_rounds: int, disturbance: Mapping[str, Any] | None,
                retire: Mapping[str, Any] | None,
                thresholds: float | Mapping[str, float] | None, round_statistic: str,
                cpus: str | Sequence[int] | None, threads: int, workload: Mapping[str, Any],
                auto_repetitions: Mapping[str, Any] | None, own_cpus: int | None,
                rounds_from_noise: Mapping[str, Any] | None = None) -> Policy:
    statistic = protocol.checked_statistic(round_statistic)
    protocol.check_repetitions(reps, warmup_rounds, statistic)
    phase = phase_of(workload)
    delta = protocol.threshold_for(thresholds, phase)
    return Policy(
        rounds=rounds, warmup_rounds=warmup_rounds, reps=reps,
        rep_rule={**DEFAULT_AUTO_REPETITIONS, **(auto_repetitions or {})}, statistic=statistic,
        warmup=warmup, timeout_s=timeout_s,
        limits={**DEFAULT_DISTURBANCE, **(disturbance or {})},
        retire={**DEFAULT_RETIRE, **(retire or {})},
        delta=delta, cpu_list=cpu_set(threads, cpus, job_cpus=own_cpus), own_cpus=own_cpus,
        rounds_rule=protocol.check_rounds_rule(rounds_from_noise, phase, delta))


def measure(*, quant: str, workload_name: str, workload: Mapping[str, Any], threads: int,
            rungs: Sequence[Mapping[str, Any]], model_meta: str, rounds: int, reps: int | str,
            seed: int | None, warmup: bool, timeout_s: float, raw_dir: str, out_json: str,
            log: str, warmup_rounds: int = 1,
            disturbance: Mapping[str, Any] | None = None,
            retire: Mapping[str, Any] | None = None,
            thresholds: float | Mapping[str, float] | None = None,
            round_statistic: str = "mean", cpus: str | Sequence[int] | None = "auto",
            identity: Mapping[str, Any] | None = None,
            one_build: bool = False,
            auto_repetitions: Mapping[str, Any] | None = None,
            own_cpus: int | None = None,
            rounds_from_noise: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run ``warmup_rounds + rounds`` interleaved rounds; warmup-round samples are kept but
    flagged (``"warmup": true``) and never enter the statistics.

    Every run records what it got from the machine (its CPU time; the other processes' and the
    hypervisor's share of the CPUs meanwhile). A measured round in which a run was clearly
    disturbed is measured again in a fresh order, up to ``max_remeasure`` times
    (``measure_round``); the disturbed attempt's samples are kept, marked, and never enter the
    statistics. A round still disturbed after that is recorded as unresolved (the report says
    "disturbed", never "equivalent").

    The rounds are fixed (``rounds``), or, with ``rounds_from_noise.enabled``, chosen once per
    cell at a pilot look from its own control/twin spread (``pilot``, an internal pilot:
    enough rounds to call ``target`` with 80 % power, within ``min``-``max``). With
    ``retire.enabled``, after each measured-round count in ``retire.looks`` a rung whose every
    comparison is a gross step already called at the strict level ``retire.alpha`` is not run
    again (``look``; ``retired``: the rung and the look), e.g. the slow floor once its 20x step
    is certain. Nothing else ends a cell early; the control and its twin run every round.

    ``cpus``: where every process of the cell runs (``machine.cpu_set``): one fixed CPU set of
    ``threads`` CPUs for every rung, read back from /proc while each process runs and recorded
    with its samples; a process seen on other CPUs is an error.

    ``reps="auto"``: each rung's llama-bench -r is calibrated from its warmup-round speed
    (``calibrated_repetitions``, rule ``auto_repetitions``); warmup rounds run one repetition.

    ``own_cpus``: the job's CPUs (``disturbed``: on a shared node others may use the rest).

    ``one_build``: every rung is one build's binary (a toggle, a lever's settings); when that
    build failed or is not applicable, the cell is written with each rung's status and no
    samples (the report names it), instead of failing the workflow."""
    policy = make_policy(rounds=rounds, reps=reps, warmup=warmup, timeout_s=timeout_s,
                         warmup_rounds=warmup_rounds, disturbance=disturbance, retire=retire,
                         thresholds=thresholds, round_statistic=round_statistic, cpus=cpus,
                         threads=threads, workload=workload, auto_repetitions=auto_repetitions,
                         own_cpus=own_cpus, rounds_from_noise=rounds_from_noise)
    name = f"{quant}/{workload_name}/t{threads}"
    seed, seed_source = protocol.run_seed(seed)
    active, status, bins = built_rungs(rungs, f"bench {name}", none_ok=one_build)
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    cell = Cell(name=name, quant=quant, workload_name=workload_name, rungs=rungs, status=status, bins=bins, model=read_json(model_meta),
                workload=workload, threads=threads, raw=raw, brief=host_brief(),
                reps_by={r["name"]: 1 if policy.auto else int(reps) for r in rungs})
    cell.rounds = policy.horizon  # until a pilot look chooses them
    # spare orders from the same seeded sequence, for re-measured rounds
    first = warmup_rounds + policy.horizon
    orders = round_orders(active, first + policy.horizon * policy.limits["max_remeasure"],
                          seed, name)
    spare = iter(orders[first:])
    rnd = 0
    while rnd < warmup_rounds + cell.rounds:
        if rnd == warmup_rounds and policy.auto:
            calibrate(cell, policy)
        measure_round(cell, policy, rnd, [n for n in orders[rnd] if n not in cell.retired],
                      spare)
        look(cell, policy, rnd + 1 - warmup_rounds)
        pilot(cell, policy, rnd + 1 - warmup_rounds)
        rnd += 1
    with open(log, "a") as f:  # beside the progress lines the job's logger already wrote
        f.write("\n".join(cell.log_lines) + "\n")
    doc = cell_doc(cell, policy, identity=identity, seed=seed)
    doc["seed_source"] = seed_source
    atomic_write_json(out_json, doc)
    return doc


def calibrate(cell: Cell, policy: Policy) -> None:
    cell.reps_by = calibrated_repetitions(cell.samples, cell.rungs, policy.rep_rule)
    progress.step("calibrated", 1, 1, "llama-bench -r " + ", ".join(
        f"{n} {k}" for n, k in cell.reps_by.items()),
        f"(each process measures >= {policy.rep_rule['min_seconds']:g} s, at most "
        f"{policy.rep_rule['max']} repetitions)")


def cell_doc(cell: Cell, policy: Policy, *, identity: Mapping[str, Any] | None,
             seed: int) -> dict[str, Any]:
    """The samples file: the cell's identity, its policy, every sample and status."""
    return {
        # what the cell is, carried by the result itself (e.g. a serving point's experiment)
        **dict(identity or {}),
        "format": FORMAT, "protocol": protocol.VERSION, "quant": cell.quant,
        "workload": cell.workload_name, "workload_spec": dict(cell.workload),
        "threads": cell.threads,
        "model": {k: cell.model.get(k) for k in
                  ("model", "quant", "sha256", "requantized", "size_bytes")},
        "rounds": cell.rounds, "warmup_rounds": policy.warmup_rounds,
        "rounds_plan": cell.rounds_plan,
        "repetitions": policy.reps, "repetitions_by_rung": cell.reps_by,
        "auto_repetitions": policy.rep_rule if policy.auto else None,
        "round_statistic": policy.statistic, "seed": seed,
        "order_seed": {"cell": cell.name, "seed": cell_seed(seed, cell.name)},
        "warmup": policy.warmup, "orders": cell.used_orders, "host": cell.brief,
        "rungs": cell.status, "samples": cell.samples,
        "disturbance": {"limits": policy.limits, "remeasured": cell.remeasured,
                        "unresolved": cell.unresolved},
        "retire": {**policy.retire, "threshold": policy.delta, "retired": cell.retired},
        "cpus": policy.cpu_list,
    }
