import importlib
import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.harness import Budget, Paths

# the experiment's entry, "<module>:<function>" of ladder.measuring (its config block's
# x-serving); the rule's code identity is this adapter's and that module's (common.smk)
module, _, function = snakemake.params.measure.partition(":")
measure = getattr(importlib.import_module(f"ladder.measuring.{module}"), function)
inputs = {k: str(v) for k, v in snakemake.input.items() if k not in ("model", "builds")}
p = snakemake.params
run_step(snakemake, lambda: measure(
    p.rungs, p.policy, p.settings,
    Paths(snakemake.input.model, snakemake.output.raw, snakemake.output.json, snakemake.log[0]),
    int(snakemake.wildcards.threads),
    own_cpus=snakemake.threads,  # the job's CPUs (a shared SLURM node: fewer than the node's)
    **inputs,  # the files the experiment declares (x-serving inputs: corpus)
    # its lever settings on each lever rung, where its block has levers (Plan.server_levers)
    **({"levers": list(p.levers)} if p.levers else {}),
    # its cells share the run's measuring budget (x-serving budgeted)
    **({"budget": Budget(snakemake.wildcards.host, snakemake.resources.budget_s,
                         snakemake.resources.budget_cells)} if p.budgeted else {}),
))
