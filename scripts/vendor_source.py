import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.adapter import run_step
from ladder.vendor import fetch_vendor

run_step(snakemake, lambda: fetch_vendor(snakemake.wildcards.vendor, snakemake.params.spec,
                                         snakemake.output.json))
