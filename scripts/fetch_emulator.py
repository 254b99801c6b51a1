import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.preparing.emulators import fetch

run_step(snakemake, lambda: fetch(snakemake.wildcards.emulator, snakemake.params.spec,
                                  snakemake.output.json, snakemake.params.downloads))
