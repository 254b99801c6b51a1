import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.harness import Paths
from ladder.measuring.server_load import measure_load

p = snakemake.params
run_step(snakemake, lambda: measure_load(
    p.rungs, p.policy, p.settings,
    Paths(snakemake.input.model, snakemake.output.raw, snakemake.output.json, snakemake.log[0]),
    int(snakemake.wildcards.threads),
    own_cpus=snakemake.threads,  # the job's CPUs (a shared SLURM node: fewer than the node's)
))
