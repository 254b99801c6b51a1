import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.bench import measure

s = snakemake.params.settings
run_step(snakemake, lambda: measure(
    quant=s["quant"].lower(), workload_name=snakemake.wildcards.point,
    workload=snakemake.params.point["spec"], threads=int(snakemake.wildcards.threads),
    rungs=snakemake.params.rungs, model_meta=snakemake.input.model, rounds=s["rounds"], reps=1,
    seed=snakemake.params.seed, warmup=True, timeout_s=s["timeout_s"],
    raw_dir=snakemake.output.raw, out_json=snakemake.output.samples, log=snakemake.log[0],
    warmup_rounds=0, disturbance=snakemake.params.disturbance, cpus=snakemake.params.cpus,
    identity={"experiment": snakemake.wildcards.experiment, "point": snakemake.wildcards.point},
    one_build=bool(snakemake.params.point.get("ladder")),
    own_cpus=snakemake.threads,  # the job's CPUs (a shared SLURM node: fewer than the node's)
))
