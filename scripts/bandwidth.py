import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.bandwidth import probe

p = snakemake.params.probe
run_step(snakemake, lambda: probe(snakemake.output.json, p["size_mib"], p["repeats"]))
