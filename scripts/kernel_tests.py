import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.kernel_tests import run_tests

run_step(snakemake, lambda: run_tests(
    rung=snakemake.params.rung, provenance=snakemake.input.build,
    quants=snakemake.params.quants, settings=snakemake.params.settings,
    out_json=snakemake.output.json, raw_dir=snakemake.output.raw,
))
