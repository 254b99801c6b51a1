import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.bench import measure

m = snakemake.params.measure
run_step(snakemake, lambda: measure(
    quant=snakemake.wildcards.quant, workload_name=snakemake.wildcards.workload,
    workload=snakemake.params.workload, threads=int(snakemake.wildcards.threads), rungs=snakemake.params.rungs,
    model_meta=snakemake.input.model, rounds=m["rounds"], reps=m["repetitions"],
    round_statistic=m["round_statistic"], seed=m["seed"],
    warmup=m["warmup"], timeout_s=m["timeout_s"], disturbance=m.get("disturbance"),
    retire=m["retire"], cpus=m["cpus"], auto_repetitions=m.get("auto_repetitions"),
    thresholds=m["retire"]["threshold"], raw_dir=snakemake.output.raw,
    out_json=snakemake.output.samples, log=snakemake.log[0], warmup_rounds=m["warmup_rounds"],
    own_cpus=snakemake.threads,  # the job's CPUs (a shared SLURM node: fewer than the node's)
    rounds_from_noise=m.get("rounds_from_noise"),
))
