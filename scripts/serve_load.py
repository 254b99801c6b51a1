import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.serveload import measure_load

s = snakemake.params.settings
run_step(snakemake, lambda: measure_load(
    rungs=snakemake.params.rungs, model_meta=snakemake.input.model, settings={"load": s},
    threads=int(snakemake.wildcards.threads), rounds=snakemake.params.rounds,
    seed=snakemake.params.seed, raw_dir=snakemake.output.raw, out_json=snakemake.output.json,
    cpus=snakemake.params.cpus, own_cpus=snakemake.threads, port=s["port"],
))
