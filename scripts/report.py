import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.adapter import run_step
from ladder.report import write_report

inp = snakemake.input
run_step(snakemake, lambda: write_report(
    plan=snakemake.params.plan, stats_cfg=snakemake.params.stats,
    source=inp.source, host=inp.host, builds=inp.builds, models=inp.models,
    evidence=inp.evidence, bench=inp.bench, quality=inp.quality, ledger=inp.ledger,
    bandwidth=inp.bandwidth, serving_points=inp.serving_points,
    serving_prefix=inp.serving_prefix, serving_concurrency=inp.serving_concurrency,
    serving_load=inp.serving_load,
    hotspots=inp.hotspots, kernel_tests=inp.kernel_tests, report_cfg=snakemake.params.report, cost=snakemake.params.cost,
    out_json=snakemake.output.json,
))
