import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.serving import concurrency

s = snakemake.params.settings
run_step(snakemake, lambda: concurrency(
    rungs=snakemake.params.rungs, model_meta=snakemake.input.model, settings=s,
    threads=snakemake.params.threads, rounds=s["rounds"], seed=snakemake.params.seed,
    timeout_s=s["timeout_s"], raw_dir=snakemake.output.raw, out_json=snakemake.output.json,
))
