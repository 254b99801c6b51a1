rule report:
    input:
        unpack(report_inputs),
    output:
        md="results/report/ladder.md",
        json="results/report/ladder.json",
    log:
        "logs/report.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        plan=lambda wc: PLAN.report_plan(),
        stats=config["stats"],
        code=code_hash("report", "stats", "evidence", "quality", "dispatch"),
    script:
        "../../scripts/report.py"
