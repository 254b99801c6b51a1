import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.reporting.fleet import write_fleet

run_step(snakemake, lambda: write_fleet(
    list(snakemake.input.reports), Path(snakemake.output.json).parent,
    stats_cfg=snakemake.params.stats,
))
