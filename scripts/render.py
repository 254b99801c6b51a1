import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.reporting.render import render_all

run_step(snakemake, lambda: render_all(
    snakemake.input.json, os.path.dirname(snakemake.output.html), workdir=os.getcwd(), announce=True,
))
