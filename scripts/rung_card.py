import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.reporting.report import write_rung_card

run_step(snakemake, lambda: write_rung_card(
    rung=snakemake.params.rung, inputs=list(snakemake.input), out_json=snakemake.output.json,
))
