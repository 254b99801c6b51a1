import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.preparing.model import model_file, quantize

run_step(snakemake, lambda: quantize(
    base_meta=snakemake.input.base, quant=snakemake.wildcards.quant,
    quantizer_provenance=snakemake.input.quantizer, dest=model_file(snakemake.output.meta),
    meta_out=snakemake.output.meta, log=snakemake.log[0],
    threads=len(os.sched_getaffinity(0)),  # every CPU it may run on (common.smk quantize_threads)
))
