import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.hotspots import sweep

inp = snakemake.input
run_step(snakemake, lambda: sweep(
    rung=snakemake.params.rung, provenance=inp.build, model_meta=inp.model,
    quant=snakemake.wildcards.quant, settings=snakemake.params.settings,
    workloads=snakemake.params.workloads, threads=snakemake.params.threads,
    out_json=snakemake.output.json, raw_dir=snakemake.output.raw, families_file=inp.families,
    bench=inp.bench,
))
