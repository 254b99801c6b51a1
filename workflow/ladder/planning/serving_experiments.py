"""The serving experiments' definitions and points: what the plan, the rules, the figures and
the report share (no measurement code: planning a run never imports it).

* llama-bench points (one job per point): ``context`` (prefill at growing prompt lengths, decode
  at growing depth), ``kv_cache`` (cache types, flash attention on), ``ubatch`` (-ub sizes) and
  ``toggle`` (one binary with its mechanism on vs off, per thread count);
* the experiments that run their own tool, one job per host, model and thread count with every
  rung in each round (``measuring/prefix_cache``: ``prefix_cache``; ``measuring/concurrency``:
  ``concurrency``; ``measuring/load``: ``load``). Each is declared where its settings
  are, by its config block's ``x-serving`` in config.schema.yaml (:class:`ServerExperiment`);
  the ``serve`` rule, its result path, the start-up checks and the serving section's inputs
  iterate :func:`server_experiments`, and the serving view, schema, templates and figures
  iterate their keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ladder.core.errors import LadderError
from ladder.planning.schema import CONFIG_SCHEMA, load_schema

# The llama-bench experiments, each described once: its report title and its figures' x axis
# per phase (the rules, the report, the templates and the figures read this table).
EXPERIMENTS: dict[str, dict[str, Any]] = {
    "context": {"title": "Context length: prefill at growing prompts, decode at depth",
                "axes": {"prefill": "prompt tokens", "decode": "context depth (tokens)"}},
    "kv_cache": {"title": "KV-cache type (flash attention on), on each rung against its first type",
                 "axes": {"prefill": "KV cache type (flash attention on)",
                          "decode": "KV cache type (flash attention on)"},
                 "lever": True},
    "ubatch": {"title": "Micro-batch size (-ub), on each rung against the default",
               "axes": {"prefill": "micro-batch (-ub)"}, "lever": True},
    "toggle": {"title": "Vendor/repack toggle across thread counts",
               "axes": {"prefill": "threads", "decode": "threads"}},
}
BENCH_EXPERIMENTS = tuple(EXPERIMENTS)
# a lever is judged on one rung at a time: its settings against its baseline setting
LEVERS = tuple(e for e, spec in EXPERIMENTS.items() if spec.get("lever"))


@dataclass(frozen=True)
class ServerExperiment:
    """A serving experiment that runs its own tool (llama-server, llama-batched-bench): one
    ``serve`` job per host, model and thread count, every rung in each round through
    ``measuring/harness``. Declared by ``x-serving`` in its config block (serving.<key>)."""
    key: str  # its config block, result folder and key in the report's serving section
    measure: str  # "<module>:<function>" of measuring/: (rungs, policy, settings, paths, threads,
    #               own_cpus=..., **inputs) -> the result it wrote
    tool: str  # the build target it runs (a start-up check: build.targets has it)
    inputs: tuple[str, ...] = ()  # the workflow's files it reads beyond the model ("corpus")
    # a folder under the resources it keeps content-addressed state in across jobs and runs
    # (the depth experiment's saved contexts), passed as settings["keeps"]
    keeps: str | None = None
    # it shares the run's measuring budget with the bench cells (measure.budget): its cells
    # are measured by the anytime-valid design, each within its allowance
    budgeted: bool = False

    @property
    def module(self) -> str:
        return self.measure.partition(":")[0]


def server_experiments(schema_path: str | Path = CONFIG_SCHEMA) -> tuple[ServerExperiment, ...]:
    """Every serving experiment that runs its own tool, in the schema's order."""
    blocks = load_schema(schema_path)["properties"]["serving"]["properties"]
    out = []
    for key, block in blocks.items():
        spec = block.get("x-serving")
        if spec is None:
            continue
        if key in EXPERIMENTS:
            raise LadderError(f"config schema: serving.{key} is a llama-bench experiment")
        unknown = sorted(set(spec) - {"measure", "tool", "inputs", "keeps", "budgeted"})
        missing = sorted({"measure", "tool"} - set(spec))
        if unknown or missing:
            raise LadderError(f"config schema: serving.{key}.x-serving: "
                              + (f"unknown keys {unknown}" if unknown else f"no {missing}")
                              + " (measure, tool, inputs, keeps, budgeted)")
        out.append(ServerExperiment(key, spec["measure"], spec["tool"],
                                    tuple(spec.get("inputs", ())), spec.get("keeps"),
                                    bool(spec.get("budgeted", False))))
    return tuple(out)


# --- the points of the llama-bench experiments ---------------------------------------------------
def bench_points(cfg: Mapping[str, Any], threads_all: int) -> list[dict[str, Any]]:
    """Every llama-bench point: experiment, point name, workload spec, thread count."""
    pts: list[dict[str, Any]] = []

    def add(exp: str, name: str, spec: dict[str, Any], threads: int, x: Any, **extra: Any) -> None:
        pts.append({"experiment": exp, "point": name, "spec": spec, "threads": threads,
                    "x": x, **extra})

    c = cfg.get("context") or {}
    if c.get("enabled"):
        for p in c["prompts"]:
            add("context", f"pp{p}", {"n_prompt": p, "n_gen": 0}, threads_all, p, phase="prefill")
        for d in c["depths"]:
            add("context", f"tg{c['n_gen']}_d{d}", {"n_prompt": 0, "n_gen": c["n_gen"],
                                                     "n_depth": d}, threads_all, d, phase="decode")
    # levers: one point per workload, expanded per lever rung by the plan (Plan.serving_points):
    # the lever's settings are interleaved inside one job on that rung and judged against the
    # lever's baseline setting, whose second label gives the point its own noise floor
    k = cfg.get("kv_cache") or {}
    if k.get("enabled"):
        settings = {t: ["-ctk", t, "-ctv", t, "-fa", "1"] for t in k["types"]}
        add("kv_cache", f"pp{k['n_prompt']}", {"n_prompt": k["n_prompt"], "n_gen": 0},
            threads_all, f"pp{k['n_prompt']}", phase="prefill",
            lever={"baseline": k["types"][0], "settings": settings})
        if k["n_gen"]:
            add("kv_cache", f"tg{k['n_gen']}_d{k['depth']}",
                {"n_prompt": 0, "n_gen": k["n_gen"], "n_depth": k["depth"]}, threads_all,
                f"tg{k['n_gen']}_d{k['depth']}", phase="decode",
                lever={"baseline": k["types"][0], "settings": settings})
    u = cfg.get("ubatch") or {}
    if u.get("enabled"):
        settings = {"ub_default": [], **{f"ub{n}": ["-ub", str(n)] for n in u["sizes"]}}
        add("ubatch", f"pp{u['n_prompt']}", {"n_prompt": u["n_prompt"], "n_gen": 0},
            threads_all, f"pp{u['n_prompt']}", phase="prefill",
            lever={"baseline": "ub_default", "settings": settings})
    t = cfg.get("toggle") or {}
    if t.get("enabled"):
        spec = {"n_prompt": t["n_prompt"], "n_gen": t["n_gen"]}
        if bool(spec["n_prompt"]) == bool(spec["n_gen"]):
            raise LadderError("serving.toggle: give n_prompt or n_gen (one phase), not both")
        name = f"pp{spec['n_prompt']}" if spec["n_prompt"] else f"tg{spec['n_gen']}"
        seen = []
        for th in t["threads"]:
            n = threads_all if th == "all" else int(th)
            if n not in seen:
                seen.append(n)
                add("toggle", name, spec, n, n,
                    phase="prefill" if spec["n_prompt"] else "decode")
    return pts


def toggle_variant(cfg: Mapping[str, Any], arch: str) -> dict[str, Any] | None:
    return ((cfg.get("toggle") or {}).get("variants") or {}).get(arch)
