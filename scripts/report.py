import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.reporting.report import write_report

# every named input as it is: the core's and each registered section's (ladder.reporting.sections)
inputs = dict(snakemake.input.items())
run_step(snakemake, lambda: write_report(
    plan=snakemake.params.plan, stats_cfg=snakemake.params.stats, inputs=inputs,
    report_cfg=snakemake.params.report, cost=snakemake.params.cost,
    out_json=snakemake.output.json,
))
