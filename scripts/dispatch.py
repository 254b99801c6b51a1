import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.dispatch import sweep

inp = snakemake.input
run_step(snakemake, lambda: sweep(
    rung=snakemake.params.rung,
    provenance=inp.build,
    quants={q: {"model": inp[f"model_{q}"], "evidence": inp[f"evidence_{q}"]}
            for q in snakemake.params.quants},
    settings=snakemake.params.settings, threads=snakemake.params.threads,
    out_json=snakemake.output.json, raw_dir=snakemake.output.raw, families_file=inp.families,
))
