"""Serving experiments: their points, the toggle variant, and the lever sentence (no tools run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ladder.core.errors import LadderError
from ladder.planning.serving_experiments import bench_points, toggle_variant
from ladder.analysis.serving_view import lever_sentence

CFG = {
    "context": {"enabled": True, "prompts": [512, 1024], "depths": [0, 512], "n_gen": 16},
    "kv_cache": {"enabled": True, "types": ["f16", "q8_0"], "n_prompt": 64, "n_gen": 16,
                 "depth": 256},
    "ubatch": {"enabled": True, "sizes": [16, 128], "n_prompt": 128},
    "toggle": {"enabled": True, "threads": [1, "all", 2], "n_prompt": 64, "n_gen": 0,
               "variants": {"x86_64": {"rung": "native_repack", "name": "repack_off",
                                       "runtime": {"repack": False}}}},
}


def test_points_are_one_llama_bench_test_each():
    pts = bench_points(CFG, threads_all=2)
    names = [(p["experiment"], p["point"], p["threads"]) for p in pts]
    assert names == [
        ("context", "pp512", 2), ("context", "pp1024", 2),
        ("context", "tg16_d0", 2), ("context", "tg16_d512", 2),
        ("kv_cache", "pp64", 2), ("kv_cache", "tg16_d256", 2),
        ("ubatch", "pp128", 2),
        ("toggle", "pp64", 1), ("toggle", "pp64", 2),  # 'all' = 2 is listed once
    ]
    for p in pts:  # never both phases in one point: llama-bench would run two tests
        assert bool(p["spec"]["n_prompt"]) != bool(p["spec"]["n_gen"])
    kv = next(p for p in pts if p["point"] == "tg16_d256")
    assert kv["spec"] == {"n_prompt": 0, "n_gen": 16, "n_depth": 256}
    assert kv["lever"] == {"baseline": "f16", "settings": {
        "f16": ["-ctk", "f16", "-ctv", "f16", "-fa", "1"],
        "q8_0": ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "1"]}}
    ub = next(p for p in pts if p["experiment"] == "ubatch")
    assert ub["lever"] == {"baseline": "ub_default", "settings": {
        "ub_default": [], "ub16": ["-ub", "16"], "ub128": ["-ub", "128"]}}


def test_a_lever_is_judged_on_one_rung_against_its_baseline(default_config):
    """Issue 18, item 6: q8_0 KV against f16 KV on the same rung (not each rung against the
    floor at q8_0): one job per lever rung and point, the settings as variants of that rung's
    binary, and the baseline under a second label for the point's own noise floor."""
    plan = _plan(default_config, "aarch64")
    assert plan.lever_rungs() == ["native_repack", "kleidiai"]  # not the floor
    kv = [p for p in plan.serving_points() if p["experiment"] == "kv_cache"]
    assert [p["point"] for p in kv] == ["native_repack_pp64", "kleidiai_pp64",
                                       "native_repack_tg16_d256", "kleidiai_tg16_d256"]
    p = kv[1]
    assert (p["base"], p["ladder"], p["twin"], p["control"]) == (
        "kleidiai", ["f16", "q8_0", "q4_0"], "f16", "f16_twin")
    rungs = plan.serving_rungs(p, lambda key: f"b/{key}.json")
    assert [r["name"] for r in rungs] == ["f16", "q8_0", "q4_0", "f16_twin"]
    key = plan.build_keys["kleidiai"]
    assert {r["build_key"] for r in rungs} == {key}  # one build, four labels
    assert rungs[1]["bench_argv"] == ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "1"]
    assert rungs[3]["twin_of"] == "f16" and rungs[3]["bench_argv"] == rungs[0]["bench_argv"]
    assert all(r.get("variant_of") == "kleidiai" for r in rungs[:3])
    default_config["serving"]["lever_rungs"] = ["kleidiai"]
    assert _plan(default_config, "aarch64").lever_rungs() == ["kleidiai"]
    default_config["serving"]["lever_rungs"] = ["kleidiai"]  # not this x86 host's: no lever
    assert _plan(default_config, "x86_64").lever_rungs() == []


def _step(base, rung, est, lo, hi, call):
    return {"base": base, "rung": rung, "ratio": {"estimate": est, "lo": lo, "hi": hi},
            "verdict": {"call": call}}


def test_the_context_sweep_says_where_an_advantage_shrinks_or_inverts():
    from ladder.analysis.serving_view import advantage_along

    def pts(*steps):
        return [{"x": x, "cell": {"steps": [s]}} for x, s in steps]

    shrink = advantage_along(pts((1024, _step("floor", "repack", 14.0, 13.0, 15.0, "faster")),
                                 (512, _step("floor", "repack", 20.0, 19.0, 21.0, "faster"))),
                             "prompt tokens")
    assert shrink == ["`repack` over `floor`: 20.0x at 512, 14.0x at 1024; shrinks from 512 to "
                      "1024 prompt tokens (the intervals do not overlap)."]
    (flip,) = advantage_along(pts((32, _step("repack", "kleidiai", 1.10, 1.05, 1.15, "faster")),
                                  (1024, _step("repack", "kleidiai", 0.9, 0.85, 0.95, "slower"))),
                              "prompt tokens")
    assert "inverts between 32 and 1024 prompt tokens" in flip
    (same,) = advantage_along(pts((32, _step("a", "b", 1.10, 0.95, 1.25, "cannot tell")),
                                  (64, _step("a", "b", 1.05, 0.9, 1.2, "cannot tell"))), "x")
    assert "no change this run can show" in same


def test_lever_memory_is_each_settings_peak_rss_against_the_baseline():
    from ladder.analysis.serving_view import lever_memory

    cell = {"rungs": {"f16": {"peak_rss_kib": 409600}, "q8_0": {"peak_rss_kib": 399360},
                      "q4_0": {}}}
    assert lever_memory(cell, ["f16", "q8_0", "q4_0"]) == [
        {"setting": "f16", "peak_rss_mib": 400.0, "vs_baseline_mib": 0.0},
        {"setting": "q8_0", "peak_rss_mib": 390.0, "vs_baseline_mib": -10.0},
        {"setting": "q4_0", "peak_rss_mib": None, "vs_baseline_mib": None}]


def test_disabled_experiments_have_no_points():
    off = {k: {**v, "enabled": False} for k, v in CFG.items()}
    assert bench_points(off, 2) == []


def test_toggle_with_both_phases_is_refused():
    bad = {"toggle": {**CFG["toggle"], "n_gen": 8}}
    with pytest.raises(LadderError, match="serving.toggle: give n_prompt or n_gen"):
        bench_points(bad, 2)


def _plan(default_config, arch):
    from snakemake.utils import validate

    from ladder.core.hosts import hosts_from_config
    from ladder.core.machine import host_facts
    from ladder.planning.plan import Plan

    cfg = dict(default_config)
    validate(cfg, str(Path(__file__).resolve().parents[1] / "workflow" / "schemas" /
                      "config.schema.yaml"))
    (host,) = hosts_from_config(cfg, arch)
    facts = {**host_facts("local"), "arch": arch, "cores": 2,
             "cpu_flags": ["asimddp", "i8mm", "sve", "sme", "avx2"],
             "compiler": {"c": "cc", "cxx": "c++"}, "native_target": {"resolved": "x"}}
    return Plan.from_config(cfg, host, facts)


def test_variant_is_the_same_build_with_the_mechanism_off(default_config):
    plan = _plan(default_config, "x86_64")
    base = plan.rung("native_repack")
    v = plan.rung_entry(plan.variant_rung(base, toggle_variant(plan.serving, "x86_64")),
                        lambda key: f"b/{key}.json", base.name)
    assert v["name"] == "repack_off" and v["build_key"] == plan.build_keys["native_repack"]
    assert v["provenance"] == f"b/{plan.build_keys['native_repack']}.json"
    assert v["bench_argv"] == ["--repack", "0"] and v["common_argv"] == ["--no-repack"]
    assert v["variant_of"] == "native_repack" and v["twin_of"] is None
    from ladder.core.records import RungEntry  # every key a rung entry has is declared

    for entry in [v, *plan.rung_entries(lambda key: f"b/{key}.json")]:
        assert set(entry) <= set(RungEntry.__annotations__)
        assert RungEntry.__required_keys__ <= set(entry)
    arm = _plan(default_config, "aarch64")
    k = arm.variant_rung(arm.rung("kleidiai"), toggle_variant(arm.serving, "aarch64"))
    assert dict(k.runtime.env) == {"GGML_KLEIDIAI_SME": "0"} and k.runtime.bench_argv() == []


def _lever(rung, base, est, lo, hi):
    return {"rung": rung, "base": base,
            "ratio": {"estimate": est, "lo": lo, "hi": hi, "confidence": 0.95}}


def test_lever_sentence_compares_both_levers_on_one_rung_with_intervals():
    # issue 19, item 5: "the bigger lever is the prefix cache" came from the floor's cache
    # figure against native_repack's kernel figure, point estimates only
    kernel = _lever("native_repack", "floor", 19.8, 18.8, 20.8)
    cache = _lever("native_repack", None, 15.3, 14.1, 16.6)
    text = lever_sentence(kernel, cache)
    assert text.startswith("TTFT on `native_repack`: kernel ladder (vs `floor`, cold) 19.8x "
                           "(95% CI 18.8x-20.8x); prefix cache (warm vs cold) 15.3x")
    assert text.endswith("The kernel ladder is the bigger lever on this rung.")
    wide = _lever("native_repack", None, 17.0, 6.0, 48.0)  # one cold outlier in 3 rounds
    assert lever_sentence(kernel, wide).endswith("cannot tell which lever is bigger.")
    assert lever_sentence(None, cache) == "not both levers measured on one rung"


def test_batched_bench_jsonl(fixture_text):
    from ladder.measuring.concurrency import batched_records

    recs = batched_records(fixture_text("x86_64/batched-bench-native_repack-q4_0.jsonl"), "f")
    assert [r["pl"] for r in recs] == [1, 2]
    assert all(r["pp"] == 16 and r["tg"] == 4 and r["speed"] > 0 for r in recs)
    with pytest.raises(LadderError, match="no llama-batched-bench jsonl records"):
        batched_records("main: n_kv_max = 56\n", "stdout of a run")


def test_the_aarch64_toggle_has_a_noise_floor_of_its_own(default_config):
    """The aarch64 control is native_repack's twin; the SME toggle is on the KleidiAI rung, so
    it gets a second label of that rung, interleaved with the toggle's points."""
    plan = _plan(default_config, "aarch64")
    (toggle, *_) = [p for p in plan.serving_points() if p["experiment"] == "toggle"]
    assert toggle["base"] == "kleidiai" and toggle["variant"] == "sme_off"
    assert toggle["twin"] == "kleidiai" and toggle["control"] == "kleidiai_twin"
    rungs = plan.serving_rungs(toggle, lambda key: f"b/{key}.json")
    names = [r["name"] for r in rungs]
    assert names == ["kleidiai", "sme_off", "kleidiai_twin"]
    twin = rungs[2]
    assert twin["twin_of"] == "kleidiai" and twin["build_key"] == rungs[0]["build_key"]
    assert twin["env"] == rungs[0]["env"] and rungs[1]["env"] == {"GGML_KLEIDIAI_SME": "0"}
    # the dispatch sweep's toggle cells are the same variant, made in the same place
    (cells,) = plan.dispatch_toggles("kleidiai") if plan.settings["dispatch_toggle"] else [
        {**rungs[1], "family": "kleidiai"}]
    assert cells["name"] == "sme_off" and cells["env"] == rungs[1]["env"]
    x86 = [p for p in _plan(default_config, "x86_64").serving_points()
           if p["experiment"] == "toggle"][0]
    assert x86["control"] == "control"  # native_repack's twin is the x86 control already


def test_a_dispatch_toggle_is_a_job_of_its_own(default_config):
    """The toggle's cells are swept by their own dispatch job (on an emulated host, beside the
    rung's job on the other core), with the rung's build and evidence."""
    default_config["dispatch"]["toggle"] = True
    plan = _plan(default_config, "aarch64")
    assert plan.dispatch_rungs() == ["floor", "native_repack", "kleidiai", "sme_off"]
    unit = plan.dispatch_unit("sme_off")
    assert unit["variant_of"] == "kleidiai" and unit["env"] == {"GGML_KLEIDIAI_SME": "0"}
    assert unit["build_key"] == plan.build_keys["kleidiai"] and unit["family"] == "kleidiai"
    assert plan.dispatch_base("sme_off") == "kleidiai"
    assert plan.dispatch_base("kleidiai") == "kleidiai"
    assert "toggles" not in plan.dispatch_unit("kleidiai")
    with pytest.raises(LadderError, match="dispatch: 'control' is neither"):
        plan.dispatch_unit("control")


def test_the_depth_levers_are_settings_of_each_lever_rungs_server(default_config):
    """Issue 58, item 4: on each lever rung, the depth experiment's lever settings are that
    rung's binary under extra llama-server arguments (named <rung>+<setting>), with the first
    setting under a second label for the lever cell's own noise floor; each lever rung is a
    cell of the run's measuring budget."""
    plan = _plan(default_config, "aarch64")
    rungs = plan.server_levers("depth", lambda key: f"b/{key}.json")
    assert [r["name"] for r in rungs] == [
        f"{base}+{s}" for base in ("native_repack", "kleidiai")
        for s in ("default", "fa_off", "kv_q8_0", "default_twin")]
    kv = next(r for r in rungs if r["name"] == "kleidiai+kv_q8_0")
    assert kv["common_argv"][-4:] == ["-ctk", "q8_0", "-ctv", "q8_0"]
    assert kv["build_key"] == plan.build_keys["kleidiai"] and kv["variant_of"] == "kleidiai"
    assert kv["lever"] == {"base": "kleidiai", "setting": "kv_q8_0",
                           "baseline": "kleidiai+default"}
    twin = next(r for r in rungs if r["name"] == "kleidiai+default_twin")
    assert twin["twin_of"] == "kleidiai+default" and twin["lever"]["setting"] is None
    assert plan.server_cells("depth") == 3  # the ladder's cell and one per lever rung
    default_config["serving"]["depth"]["levers"] = {"enabled": False}
    off = _plan(default_config, "aarch64")
    assert off.server_levers("depth", str) == [] and off.server_cells("depth") == 1
    default_config["serving"]["depth"]["enabled"] = False
    assert _plan(default_config, "aarch64").server_cells("depth") == 0
    assert plan.server_levers("load", str) == []  # an experiment without levers
