import sys

from snakemake.utils import min_version

min_version("9.0")
sys.path.insert(0, f"{workflow.basedir}/workflow")
from ladder.config import validate_config
from ladder.quality import cleanup_logits


configfile: "config/config.yaml"


validate_config(config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/source.smk"
include: "workflow/rules/build.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/evidence.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/quality.smk"
include: "workflow/rules/dispatch.smk"
include: "workflow/rules/report.smk"


onsuccess:
    cleanup_logits("results/quality/logits")


rule all:
    default_target: True
    input:
        "results/report/ladder.html",
        "results/report/ladder.md",
