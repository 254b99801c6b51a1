import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.dispatch import build_ledger

run_step(snakemake, lambda: build_ledger(
    rung_files=snakemake.input.rungs, host=snakemake.input.host,
    out_json=snakemake.output[0], must_dispatch=snakemake.params.must,
))
