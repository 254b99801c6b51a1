import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.dispatch import check_gate

run_step(snakemake, lambda: check_gate(snakemake.input[0], snakemake.output[0]))
