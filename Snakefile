import os
import sys

from snakemake.utils import min_version

min_version("9.0")
sys.path.insert(0, f"{workflow.basedir}/workflow")
from ladder.reporting.fleet import check_executor, explain_failures
from ladder.measuring.quality import cleanup_logits
from ladder.planning.announce import announce_plan
from ladder.core.outcome import recheck
from ladder.planning.budget import RUN_ENV, new_run_id


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/source.smk"
include: "workflow/rules/build.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/evidence.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/quality.smk"
include: "workflow/rules/dispatch.smk"
include: "workflow/rules/hotspots.smk"
include: "workflow/rules/serving.smk"
include: "workflow/rules/report.smk"


# a failure of the moment that an earlier run recorded (an input not there, a job killed) is
# checked again, never reused as a fact about the content (ladder.core.outcome); a job step on a
# cluster node or in a subprocess leaves that to the run that plans
if not (workflow.remote_exec or workflow.subprocess_exec):
    recheck(str(o) for r in workflow.rules for o in r.output)
    # one identity for this invocation's jobs: the bench cells share measure.budget through
    # its ledger (ladder.planning.budget); jobs inherit it (local and SLURM's exported env)
    os.environ.setdefault(RUN_ENV, new_run_id())


localrules:
    fetch_source,
    fetch_model,
    fetch_corpus,
    rung,
    ledger,
    dispatch_gate,
    host_report,
    report,
    render,
    fleet,


onstart:
    check_executor(HOSTS.values(), workflow)
    announce_plan(workflow)


onsuccess:
    for h in HOSTS:
        cleanup_logits(paths.result("quality_logits", host=h))


onerror:
    explain_failures(log, HOSTS)


rule all:
    default_target: True
    input:
        rules.report.input,
