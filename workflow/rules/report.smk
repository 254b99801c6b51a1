# One host's report (its JSON; render writes the HTML/Markdown beside it).
rule host_report:
    input:
        unpack(report_inputs),
    output:
        json=paths.pattern("report_json"),
    log:
        "logs/{host}/report.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        plan=report_plan,
        stats=config["stats"],
        report=config["report"],
        cost=config["cost"],
        code=code("report"),
    script:
        "../../scripts/report.py"


rule render:
    input:
        json=paths.pattern("report_json"),
        templates=render_templates(),
    output:
        md=report(
            paths.beside("report_json", ".md"),
            caption="../report/ladder.rst",
            category="Report",
            subcategory="{host}",
            labels={"host": "{host}", "file": "Markdown"},
        ),
        html=report(
            paths.beside("report_json", ".html"),
            caption="../report/ladder.rst",
            category="Report",
            subcategory="{host}",
            labels={"host": "{host}", "file": "standalone HTML"},
        ),
        figures=report(
            directory(paths.pattern("figures")),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
            subcategory="{host}",
        ),
    log:
        "logs/{host}/render.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        code=code("render"),
    script:
        "../../scripts/render.py"


# The fleet: the same rung x quant x workload across hosts, each judged against its own floor.
rule fleet:
    input:
        reports=host_reports,
        templates=render_templates("fleet"),
    output:
        json="results/report/fleet.json",
        md=report(
            "results/report/fleet.md",
            caption="../report/fleet.rst",
            category="Fleet",
            labels={"file": "Markdown"},
        ),
        html=report(
            "results/report/fleet.html",
            caption="../report/fleet.rst",
            category="Fleet",
            labels={"file": "standalone HTML"},
        ),
    log:
        "logs/fleet.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        hosts=[h.as_dict() for h in HOSTS.values()],
        stats=config["stats"],
        code=code("fleet"),
    script:
        "../../scripts/fleet.py"


# What a user types first: every host's report and the fleet report (= the default target).
rule report:
    input:
        final_reports(),
