import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.quality import measure

inp = snakemake.input
run_step(snakemake, lambda: measure(
    rung=snakemake.params.rung, is_reference=snakemake.params.reference,
    provenance=inp.build, floor_provenance=inp.floor_build,
    floor_result=inp.get("floor_result"), model_meta=inp.model, corpus=inp.txt,
    corpus_meta=inp.meta, settings=snakemake.params.settings, threads=snakemake.params.threads,
    logits_dir=snakemake.params.logits_dir, out_json=snakemake.output.json,
    raw_log=snakemake.output.raw,
))
