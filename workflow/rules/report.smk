rule report:
    input:
        unpack(report_inputs),
    output:
        json="results/report/ladder.json",
    log:
        "logs/report.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        plan=lambda wc: PLAN.report_plan(),
        stats=config["stats"],
        report=config["report"],
        cost=config["cost"],
        code=code_hash("report", "stats", "evidence", "quality", "dispatch"),
    script:
        "../../scripts/report.py"


rule render:
    input:
        json="results/report/ladder.json",
        templates=render_templates(),
    output:
        md=report(
            "results/report/ladder.md",
            caption="../report/ladder.rst",
            category="Report",
            labels={"file": "Markdown"},
        ),
        html=report(
            "results/report/ladder.html",
            caption="../report/ladder.rst",
            category="Report",
            labels={"file": "standalone HTML"},
        ),
        figures=report(
            directory("results/report/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    log:
        "logs/render.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        code=code_hash("render", "figures"),
    script:
        "../../scripts/render.py"
