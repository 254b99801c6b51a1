import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.bench import Budget, bench_cell, measure
from ladder.measuring.harness import Paths

w, p = snakemake.wildcards, snakemake.params
run_step(snakemake, lambda: measure(
    bench_cell(p.settings["quant"].lower(), w.point, p.point["spec"], int(w.threads),
               snakemake.input.model),
    p.rungs, p.policy,
    Paths(snakemake.input.model, snakemake.output.raw, snakemake.output.samples, snakemake.log[0]),
    identity={"experiment": w.experiment, "point": w.point},
    one_build=bool(p.point.get("ladder")),
    own_cpus=snakemake.threads,  # the job's CPUs (a shared SLURM node: fewer than the node's)
    budget=Budget(w.host, snakemake.resources.budget_s, snakemake.resources.budget_cells),
))
