"""Thread reconciliation (issue 57, items 1-2): the cell's comparisons (paired across thread
counts), its looks, each rung's best count or tied set, steps best-vs-best, and the Arm
Dispatch Ledger's two section-4 sentences produced from synthetic rounds with its numbers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ladder.analysis import reconcile
from ladder.core.errors import LadderError
from ladder.measuring.bench import grid_identity, reconcile_block
from ladder.planning import protocol, sequential

STATS = {"confidence": 0.95, "threshold": {"prefill": 0.05, "decode": 0.03}}


def grid(rungs: list[str], counts: list[int]) -> dict[str, tuple[str, int]]:
    return {f"{r}@t{t}": (r, t) for r in rungs for t in counts}


def test_grid_comparisons_pair_equal_counts_and_each_rungs_counts():
    g = grid(["floor", "native", "vendor"], [1, 2, 4])
    ladder = list(g)
    got = protocol.grid_comparisons(ladder, g, set(g))
    steps = [c for c in got if c[0] == "step"]
    threads = [c for c in got if c[0] == "threads"]
    assert ("step", "floor@t1", "native@t1") in steps and ("step", "native@t4", "vendor@t4") in steps
    assert not any(g[a][1] != g[b][1] for _, a, b in steps)  # never across counts
    assert threads == [("threads", f"{r}@t{a}", f"{r}@t{b}") for r in ("floor", "native", "vendor")
                       for a, b in ((1, 2), (2, 4))]
    # a failed entry leaves its comparisons out, its neighbours are compared directly
    part = protocol.grid_comparisons(ladder, g, set(g) - {"native@t2"})
    assert ("step", "floor@t2", "vendor@t2") in part and ("threads", "native@t1", "native@t4") in part


def rounds(speeds: dict[str, float], n: int, sd: float = 0.01, seed: int = 0,
           n_gen: int = 0) -> list[dict[str, Any]]:
    """Synthetic bench samples: every entry once per round at its speed, lognormal noise."""
    rng = np.random.default_rng(seed)
    out = []
    for rnd in range(1, n + 1):
        drift = rng.normal(0, sd)  # the machine's state this round: every entry alike
        for name, v in speeds.items():
            out.append({"round": rnd, "rung": name, "rep": 0, "warmup": False,
                        "tokens_per_s": v * math.exp(drift + rng.normal(0, sd)),
                        "n_prompt": 0 if n_gen else 128, "n_gen": n_gen})
    return out


def test_looks_decide_steps_and_thread_counts_and_stop():
    g = grid(["floor", "native"], [1, 2])
    speed = {"floor@t1": 10, "floor@t2": 19, "native@t1": 40, "native@t2": 75}
    samples = rounds(speed, 5)
    new = sequential.look(samples, list(g), None, None, {}, 28, 0.05, 1.1, 0.05, grid=g)
    assert set(new) == {"step:floor@t1:native@t1", "step:floor@t2:native@t2",
                        "threads:floor@t1:floor@t2", "threads:native@t1:native@t2"}
    assert all(d["decision"] == "faster" for d in new.values())
    comps = sequential.cell_comparisons(list(g), None, None, set(g), g)
    assert sequential.still_needed(comps, new, None, None, ("step", "threads")) == set()
    # the thread counts are waited for: with only the steps decided, every entry still runs
    steps_only = {k: v for k, v in new.items() if k.startswith("step")}
    assert sequential.still_needed(comps, steps_only, None, None, ("step", "threads")) == set(g)


def doc_of(speeds: dict[str, float], g: dict[str, tuple[str, int]], n: int = 12,
           decode: bool = False, control: str | None = None, twin: str | None = None,
           sd: float = 0.01) -> dict[str, Any]:
    return {"quant": "q4_0", "workload": "tg64" if decode else "pp128",
            "workload_spec": {"n_prompt": 0, "n_gen": 64} if decode else
            {"n_prompt": 128, "n_gen": 0},
            "model": {"model": "m"}, "grid": {k: {"rung": r, "threads": t} for k, (r, t) in
                                              g.items()},
            "control": control, "twin": twin, "samples": rounds(speeds, n, sd=sd,
                                                                n_gen=64 if decode else 0)}


# The Arm Dispatch Ledger's section 4, in ladder's words: NEON (the rung below) and SME2 (the
# vendor rung, its SME path capped at 2 threads) at 2 and 8 threads
LEDGER_COUNTS = [2, 8]


def test_the_ledgers_decode_sentence_sme2_at_2_beats_neons_best():
    g = grid(["neon", "sme2"], LEDGER_COUNTS)
    # decode: NEON scales to 8 (20 tok/s); SME2 is best at 2 (24.6 tok/s = 1.23x NEON's best)
    doc = doc_of({"neon@t2": 11.0, "neon@t8": 20.0, "sme2@t2": 24.6, "sme2@t8": 15.0}, g,
                 decode=True)
    got = reconcile.cell(doc, ["neon", "sme2"], STATS)
    best = {r["rung"]: r["best"] for r in got["rungs"]}
    assert best["neon"]["threads"] == [8] and best["neon"]["decided"]
    assert best["sme2"]["threads"] == [2] and best["sme2"]["decided"]
    [step] = got["steps"]
    assert [p["call"] for p in step["same_threads"]] == ["faster", "slower"]
    bvb = step["best_vs_best"]
    assert bvb["call"] == "faster" and (bvb["main"]["threads"], bvb["main"]["base_threads"]) == (2, 8)
    assert bvb["main"]["estimate"] == pytest.approx(1.23, abs=0.02)
    assert step["sentence"].startswith("sme2 at 2 threads beats neon at its best (8 threads) by 1.2")


def test_the_ledgers_prefill_sentence_neon_at_8_beats_sme2s_best():
    g = grid(["neon", "sme2"], LEDGER_COUNTS)
    # prefill: NEON at 8 (146 tok/s) beats SME2's best (100 tok/s at 2: its cap) by 1.46x,
    # though SME2 is 2x faster at equal (2) threads
    doc = doc_of({"neon@t2": 50.0, "neon@t8": 146.0, "sme2@t2": 100.0, "sme2@t8": 90.0}, g)
    got = reconcile.cell(doc, ["neon", "sme2"], STATS)
    [step] = got["steps"]
    assert step["best_vs_best"]["call"] == "slower"
    s = step["sentence"]
    assert s.startswith("neon at 8 threads beats sme2 at its best (2 threads) by 1.46x"), s
    assert "though sme2 is faster at equal threads (2 threads)" in s
    assert "stops gaining from threads beyond 2" in s


def test_a_tie_is_named_and_best_vs_best_is_called_only_when_every_pairing_agrees():
    g = grid(["floor", "native"], [1, 2])
    # native is memory-bound at 2 cores: 1 and 2 threads within noise of each other
    doc = doc_of({"floor@t1": 10.0, "floor@t2": 19.0, "native@t1": 40.0, "native@t2": 40.4},
                 g, sd=0.03, decode=True)
    got = reconcile.cell(doc, ["floor", "native"], STATS)
    native = next(r for r in got["rungs"] if r["rung"] == "native")
    assert native["best"]["threads"] == [1, 2] and not native["best"]["decided"]
    assert "tied at 1 or 2 threads" in native["text"]
    bvb = got["steps"][0]["best_vs_best"]
    assert len(bvb["pairings"]) == 2 and bvb["call"] == "faster"  # both pairings: ~2x
    assert got["steps"][0]["sentence"] is None  # agrees with both equal-count steps


def test_the_aa_pair_and_the_ledger_at_the_best_count():
    g = {**grid(["floor", "native"], [1, 2]), "control@t2": ("control", 2)}
    doc = doc_of({"floor@t1": 10.0, "floor@t2": 19.0, "native@t1": 40.0, "native@t2": 70.0,
                  "control@t2": 70.0}, g, control="control@t2", twin="native@t2")
    ledger = {"cells": [{"rung": "native", "quant": "Q4_0", "phase": "prefill", "threads": 2,
                         "verdict": "DISPATCHED"},
                        {"rung": "native", "quant": "Q4_0", "phase": "prefill", "threads": 1,
                         "verdict": "DISPATCHED"}]}
    got = reconcile.cell(doc, ["floor", "native"], STATS, ledger)
    assert got["aa"]["control"] == "control@t2" and got["aa"]["call"] in ("equivalent",
                                                                          "inconclusive")
    native = next(r for r in got["rungs"] if r["rung"] == "native")
    assert native["dispatch"] == {"2": "DISPATCHED", "1": "DISPATCHED"}
    assert "dispatch ledger at 2 threads: DISPATCHED" in native["text"]
    assert [r["rung"] for r in got["rungs"]] == ["floor", "native"]  # the control is no rung


def test_the_cells_record_and_settings():
    entries = [{"name": "floor@t1", "reconcile": {"rung": "floor", "threads": 1}},
               {"name": "native@t2", "reconcile": {"rung": "native", "threads": 2}},
               {"name": "control@t2", "twin_of": "native@t2",
                "reconcile": {"rung": "control", "threads": 2}}]
    ident = grid_identity(entries)  # type: ignore[arg-type]
    assert ident["control"] == "control@t2" and ident["twin"] == "native@t2"
    assert ident["grid"]["floor@t1"] == {"rung": "floor", "threads": 1}
    block = reconcile_block({"sequential": {"enabled": True, "max": 28},
                             "retire": {"enabled": True, "looks": [3]}})
    assert block["sequential"]["wait_for"] == ["step", "threads"]
    assert block["retire"]["enabled"] is False


def plan_with(default_config, reconcile):
    from test_serving import _plan

    return _plan({**default_config, "reconcile": reconcile}, "x86_64")


def test_the_plans_cells_and_entries(default_config):
    plan = plan_with(default_config, {"enabled": True, "threads": [1, "all"], "quants": ["Q4_0"],
                                      "phases": ["decode"]})
    assert plan.reconcile_threads() == [1, 2]  # all: the host's 2 cores
    assert plan.reconcile_cells() == [("gemma3-270m", "q4_0", "tg64")]
    entries = plan.grid_entries(lambda key: f"builds/{key}/provenance.json")
    names = [e["name"] for e in entries]
    assert names == ["floor@t1", "floor@t2", "native_repack@t1", "native_repack@t2",
                     "control@t2"]  # amx: not applicable on this host's flags
    control = entries[-1]
    assert control["twin_of"] == "native_repack@t2" and control["reconcile"]["threads"] == 2
    assert plan_with(default_config, {"enabled": False}).reconcile_cells() == []
    # a workload the run switches off (an overlay: tg64 null) is off here too, not an error
    off = {**default_config, "measure": {**default_config["measure"], "workloads": {
        "pp128": {"n_prompt": 128, "n_gen": 0}, "tg64": None}}}
    assert plan_with(off, {"enabled": True, "workloads": ["tg64"]}).reconcile_cells() == []


def test_bad_reconcile_settings_are_named(default_config):
    with pytest.raises(LadderError, match=r"reconcile.threads: \[1, 64\]|reconcile.threads: \[64\] above host"):
        plan_with(default_config, {"enabled": True, "threads": [1, 64]}).reconcile_cells()
    with pytest.raises(LadderError, match="reconcile.workloads: 'pp9' is not a workload"):
        plan_with(default_config, {"enabled": True, "workloads": ["pp9"]}).reconcile_cells()


def test_the_fleet_shows_each_hosts_best_counts_and_sentences():
    from ladder.reporting.fleet import reconcile_rows

    g = grid(["neon", "sme2"], LEDGER_COUNTS)
    doc = doc_of({"neon@t2": 50.0, "neon@t8": 146.0, "sme2@t2": 100.0, "sme2@t8": 90.0}, g)
    cell = reconcile.cell(doc, ["neon", "sme2"], STATS)
    [row] = reconcile_rows([("graviton", {"reconcile": {"cells": [cell]}}),
                            ("x86", {"reconcile": None})])
    assert row["host"] == "graviton" and row["best"] == {"neon": [8], "sme2": [2]}
    [step] = row["steps"]
    assert (step["call"], step["threads"], step["base_threads"]) == ("slower", 2, 8)
    assert step["same"] == {"2": "faster", "8": "slower"}
    assert step["sentence"].startswith("neon at 8 threads beats sme2")


def test_an_emulated_host_shows_the_dispatch_per_count_not_timing(tmp_path):
    import json

    from ladder.reporting.sections import SectionContext

    ledger = {"cells": [
        {"rung": "kleidiai", "quant": "Q4_0", "phase": "prefill", "threads": t, "verdict": v}
        for t, v in ((1, "DISPATCHED"), (2, "HYBRID"))] + [
        {"rung": "native_repack", "quant": "Q4_0", "phase": "prefill", "threads": 2,
         "verdict": "DISPATCHED"}]}
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(ledger))
    ctx = SectionContext(plan={"ladder_order": ["floor", "native_repack", "kleidiai"],
                               "emulated": {"cpu": "sme2"}}, stats_cfg=STATS,
                         files={"reconcile": [], "reconcile_ledger": [str(path)]})
    got = reconcile.section(ctx)
    assert got is not None and got["cells"] == [] and got["counts"] == [1, 2]
    assert "timing under emulation is not measured" in got["emulated"]["text"]
    assert [(r["rung"], r["by_threads"]) for r in got["emulated"]["dispatch"]] == [
        ("native_repack", {"2": "DISPATCHED"}), ("kleidiai", {"1": "DISPATCHED", "2": "HYBRID"})]
    # a real host without reconciliation cells has no section
    ctx.plan = {"ladder_order": ["floor"]}
    assert reconcile.section(ctx) is None
