import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.harness import Paths
from ladder.measuring.batched_bench import concurrency

p = snakemake.params
run_step(snakemake, lambda: concurrency(
    p.rungs, p.policy, p.settings,
    Paths(snakemake.input.model, snakemake.output.raw, snakemake.output.json, snakemake.log[0]),
    p.threads,
    own_cpus=snakemake.threads,  # the job's CPUs (a shared SLURM node: fewer than the node's)
))
