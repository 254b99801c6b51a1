"""The records the layers hand each other, typed: a rung's entry (what a measuring job is told of
a rung), a rung's status in a cell, a sample, the rounds plan of a pilot look, and a bench
cell's samples file. TypedDicts, so they stay the JSON the result files hold (asv and pyperf
keep theirs as JSON too); mypy checks the code that builds them, and a reader finds every key
in one place. The keys a record always has are Required; the rest depend on the experiment.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict


class RungEntry(TypedDict, total=False):
    """A rung as a measuring job sees it (``Plan.rung_summary`` plus its build's provenance
    file, ``Plan.rung_entries``)."""

    name: Required[str]
    provenance: Required[str]  # the build's provenance.json
    runtime: Required[dict[str, Any]]
    env: Required[dict[str, str]]
    bench_argv: list[str]  # llama-bench flags of its runtime (e.g. --repack 0)
    common_argv: list[str]  # the same for llama-server and llama-batched-bench
    twin_of: str | None  # the control: the rung whose build it measures under another label
    label: str
    adds: str | None
    build_key: str
    recipe: dict[str, Any]
    mechanisms: list[str]
    negative_controls: list[str]
    markers: list[dict[str, Any]]
    not_applicable: str | None
    launcher: list[str]  # an emulated host's (qemu)
    guest: dict[str, Any]
    variant_of: str  # a runtime variant of another rung's binary (a toggle, a lever)
    # an entry of a reconciliation cell: which rung at which thread count (``Plan.grid_entries``)
    reconcile: dict[str, Any]
    # a lever setting of a serving experiment that runs its own tool (``Plan.server_levers``):
    # its rung, its setting and the lever's baseline setting
    lever: dict[str, Any]


class RungStatus(TypedDict, total=False):
    """A rung's status in one cell (``harness.built_rungs``, then its processes): measured, or
    why not (unbuilt, failed, crashed) with the round and raw file that says so."""

    build_key: Required[str | None]
    runtime: Required[dict[str, Any]]
    source: Required[str | None]
    status: Required[str]
    reason: Required[str | None]
    log: str | None
    round: int
    raw: str | None


class Sample(TypedDict, total=False):
    """One measured value of one rung in one round (``harness.run_process`` completes what an
    experiment's process gives): a llama-bench repetition, a prefix-cache request, a
    batched-bench line. ``tokens_per_s`` is what the statistics compare (for a latency, its
    rate)."""

    rung: Required[str]
    round: Required[int]
    attempt: Required[int]
    order: Required[int]
    warmup: Required[bool]
    disturbed: Required[str | None]
    build_key: Required[str | None]
    tokens_per_s: Required[float]
    # where it ran (every sample) and what the machine gave its process
    cpus: str
    cpus_seen: list[int] | None
    foreign_cpu_share: float | None
    steal_share: float | None
    hostname: str
    arch: str
    thp: str | None
    cpu_model: str | None
    identity: str | None
    slurm_job_id: str | None
    slurm_partition: str | None
    # a llama-bench repetition
    rep: int
    ns: int
    n_threads: int
    n_prompt: int
    n_gen: int
    n_depth: int
    build_commit: str
    model_type: str
    model_size: int
    model_n_params: int | None
    repack: Any
    peak_rss_kib: int
    wall_s: float
    cpu_share: float | None
    raw: str
    # a prefix-cache request
    base_rung: str
    kind: str
    ttft_ms: float
    wall_ms: float
    prompt_ms: float
    prompt_n: int | None
    cache_n: int | None
    # a llama-batched-bench line
    parallel: int
    speed_pp: float
    speed_tg: float
    t_s: float


class RoundsPlan(TypedDict, total=False):
    """How a cell's rounds were chosen at its pilot look (``protocol.plan_rounds``)."""

    pilot: Required[int]
    min: Required[int]
    max: Required[int]
    target: Required[float]
    assurance: Required[float]
    alpha: Required[float]
    power: Required[float]
    threshold: Required[float]
    rho: Required[float]
    sd: Required[float | None]
    rounds: Required[int]
    capped: Required[bool]
    why: Required[str]
    planning_sd: float
    pairs: int
    before: int


class SequentialRecord(TypedDict, total=False):
    """How a cell of the anytime-valid design was measured (``harness.sequential_meta``)."""

    rule: Required[str]
    alpha: Required[float]
    max: Required[int]
    rho: Required[float]
    factor: Required[float]
    wait_for: list[str]
    futility: dict[str, Any]  # non-binding futility (sequential.out_of_reach), when enabled
    threshold: Required[float]
    budget_s: Required[float | None]
    spent_s: Required[float]
    measured_rounds: Required[int]
    stopped: Required[str | None]  # decided | budget | cap
    # comparison key -> its decision (faster, slower, equivalent; futile: closed out of reach)
    decided: Required[dict[str, dict[str, Any]]]
    left: Required[dict[str, int]]  # rung -> the measured rounds after which it left


class CellDoc(TypedDict, total=False):
    """A bench cell's samples file (format ladder-samples/1): what the cell is, how it was
    measured (``harness.cell_meta``), every rung's status and every sample."""

    format: Required[str]
    protocol: Required[int]
    quant: Required[str]
    workload: Required[str]
    workload_spec: Required[dict[str, Any]]
    threads: Required[int]
    model: dict[str, Any]
    rounds: Required[int]
    warmup_rounds: int
    rounds_plan: RoundsPlan | None
    repetitions: int | str
    repetitions_by_rung: dict[str, int]
    auto_repetitions: dict[str, Any] | None
    round_statistic: str
    seed: int
    seed_source: str
    order_seed: dict[str, Any]
    warmup: bool
    orders: list[list[str]]
    host: dict[str, Any]
    rungs: Required[dict[str, RungStatus]]
    samples: Required[list[Sample]]
    disturbance: dict[str, Any]
    retire: dict[str, Any] | None
    sequential: SequentialRecord | None
    budget: dict[str, Any] | None  # the cell's allowance of measure.budget (planning.budget)
    resumed: dict[str, int] | None  # continued after a killed run's round (harness.restore)
    cpus: list[int] | None
    experiment: str  # a serving point's
    point: str
