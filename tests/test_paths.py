"""Result paths have one template each (ladder.core.paths): the rules' outputs come from it, and the
input functions, `ladder paths` and the report read results by it or by their own identity."""

from __future__ import annotations

import re
from pathlib import Path

from ladder.core import paths

ROOT = Path(__file__).resolve().parents[1]


def test_result_and_match_round_trip():
    p = paths.result("serving_point", host="c7g", experiment="kv_cache", model="gemma3-270m",
                     point="q8_0", threads=2)
    assert p == "results/hosts/c7g/serving/kv_cache/gemma3-270m/q8_0/t2.json"
    assert paths.match("serving_point", p) == {"host": "c7g", "experiment": "kv_cache",
                                               "model": "gemma3-270m", "point": "q8_0",
                                               "threads": "2"}
    assert paths.match("serving_point", "/tmp/w/" + p)["point"] == "q8_0"  # any work dir
    assert paths.match("bench", p) is None
    assert paths.beside("bench", ".raw").endswith("/t{threads}.raw")


def test_no_rule_or_input_function_spells_a_result_path():
    """Every results/hosts path in the workflow comes from ladder.core.paths."""
    spelled = []
    for f in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk")),
              *sorted((ROOT / "workflow" / "ladder").glob("*.py"))]:
        if f.name == "paths.py":
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"results/hosts/\{|[{}]/(evidence|quality|bench|dispatch)/\{", line) \
                    and "logs/" not in line and not line.lstrip().startswith("#"):
                spelled.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not spelled, "\n".join(spelled)


def test_serving_section_reads_the_points_own_identity(tmp_path):
    """A point's JSON says which experiment and point it is; the report does not parse paths."""
    import json

    from ladder.analysis.serving_view import serving_section

    doc = {"experiment": "ubatch", "point": "ub64", "workload": "ub64", "threads": 2,
           "quant": "q4_0", "samples": [], "rungs": {}}
    f = tmp_path / "anywhere.json"
    f.write_text(json.dumps(doc))
    missing: list = []
    point = {"experiment": "ubatch", "point": "ub64", "threads": 2}
    stats_cfg = {"confidence": 0.95, "bootstrap_resamples": 100, "seed": 1}
    point = {**point, "x": 64, "phase": "prefill", "spec": {"n_prompt": 64}}
    out = serving_section(plan={"ladder_order": []}, stats_cfg=stats_cfg, points=[point],
                          point_files=[str(f)], missing=missing)
    assert not missing, missing  # recognised by its identity, though its path says nothing
    (p,) = out["ubatch"]
    assert (p["point"], p["threads"]) == ("ub64", 2)
