import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.adapter import run_step
from ladder.report import write_report

run_step(snakemake, lambda: write_report(
    plan=snakemake.params.plan, stats_cfg=snakemake.params.stats,
    source=snakemake.input.source, host=snakemake.input.host, builds=snakemake.input.builds,
    models=snakemake.input.models, evidence=snakemake.input.evidence,
    bench=snakemake.input.bench, quality=snakemake.input.quality,
    ledger=snakemake.input.ledger,
    template=snakemake.input.template,
    out_md=snakemake.output.md, out_json=snakemake.output.json,
))
