import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.adapter import run_step
from ladder.host import host_facts
from ladder.io import atomic_write_json

run_step(snakemake, lambda: atomic_write_json(
    snakemake.output.json, host_facts(snakemake.wildcards.host)))
