import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.adapter import run_step
from ladder.emulators import fetch

run_step(snakemake, lambda: fetch(snakemake.wildcards.emulator, snakemake.params.spec,
                                  snakemake.output.json, snakemake.params.downloads))
