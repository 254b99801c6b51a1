import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.preparing.vendor import fetch_vendor

run_step(snakemake, lambda: fetch_vendor(snakemake.wildcards.vendor, snakemake.params.spec,
                                         snakemake.output.json))
