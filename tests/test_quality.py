"""Drift judgement on real figures measured on this VM (tests/fixtures/README.md)."""

from __future__ import annotations

import json

import pytest

from ladder.core import parse
from ladder.measuring.quality import first_divergence, judge_drift, sme_scope

Q = "x86_64/quality/"
TOL = {"ppl_rel": 0.01, "kld_mean": 0.01}


def load(fixture_text, name):
    return json.loads(fixture_text(Q + name + ".json"))


def test_a_lower_perplexity_is_not_flagged(fixture_text):
    # issue 19, item 7: PPL -1.19 % (lower), mean KLD 0.004, greedy text identical was flagged
    # "changes outputs"; a lower perplexity is not the direction that matters
    floor, native = load(fixture_text, "q4_0-floor"), load(fixture_text, "q4_0-native_repack")
    assert floor["ppl"] == pytest.approx(19.6388) and native["ppl"] == pytest.approx(19.405443)
    v = judge_drift(native, floor, TOL)
    assert v["flag"] is False and v["reasons"] == []
    assert "PPL -1.19 % ± 0.55 (lower: not a regression)" in v["text"]
    assert "greedy text identical" in v["text"]
    assert native["probe"]["identical_to_floor"] is True


def test_a_perplexity_rise_must_clear_the_tolerance_by_its_error(fixture_text):
    floor, native = load(fixture_text, "q4_0-floor"), load(fixture_text, "q4_0-native_repack")
    worse = {**native, "ppl": floor["ppl"] * 1.03, "probe": {"identical_to_floor": True}}
    assert judge_drift(worse, floor, TOL)["flag"] is True  # +3 % ± 0.55: clears 1 % + 2 err
    close = {**worse, "ppl": floor["ppl"] * 1.015}
    v = judge_drift(close, floor, TOL)  # +1.5 % ± 0.55 is inside 1 % + 2 err, but not below 1 %
    assert v["flag"] is False and v["text"].startswith("no drift shown, none ruled out: PPL +1.50")
    assert "within tolerance" not in v["text"]
    inside = {**worse, "ppl": floor["ppl"] * 0.999}
    # top-1 96.43 % ± 1.17 reaches below a 95 % minimum: that alone keeps it undecided
    assert "same top-1 96.43 % ± 1.17 reaches below" in judge_drift(inside, floor, TOL)["text"]
    loose = {**TOL, "same_top1_min": 0.90}
    assert judge_drift(inside, floor, loose)["text"].startswith("within tolerance (PPL -0.10 %")


def test_a_different_greedy_text_is_flagged(fixture_text):
    # issue 19, item 7: Q8_0's greedy text differs from the floor's at character 49 and passed
    floor, native = load(fixture_text, "q8_0-floor"), load(fixture_text, "q8_0-native_repack")
    v = judge_drift(native, floor, TOL)
    assert native["probe"]["first_divergence"] == 49
    assert v["flag"] is True
    assert v["reasons"] == ["greedy text differs from the floor's from character 49"]
    # a stricter KLD limit adds its own reason
    strict = judge_drift(native, floor, {"ppl_rel": 0.01, "kld_mean": 0.002})
    assert strict["reasons"][0] == "mean KLD 0.0028 (tolerance 0.002)"


def test_top1_agreement_below_its_minimum_is_flagged(fixture_text):
    floor, native = load(fixture_text, "q4_0-floor"), load(fixture_text, "q4_0-native_repack")
    v = judge_drift(native, floor, {**TOL, "same_top1_min": 0.99})  # 96.43 ± 1.17 %
    assert v["flag"] is True and v["reasons"] == ["same top-1 96.43 % ± 1.17 (minimum 99 %)"]


def test_crashed_rung_is_not_judged(fixture_text):
    floor, amx = load(fixture_text, "q4_0-floor"), load(fixture_text, "q4_0-amx")
    assert amx["status"] == "crashed"
    v = judge_drift(amx, floor, TOL)
    assert v["flag"] is None and v["text"] == "not measured: killed by SIGILL"
    assert judge_drift(floor, None, TOL)["text"] == "reference (floor)"


def test_first_divergence():
    assert first_divergence("Paris.", "Paris.") is None
    assert first_divergence("Paris is", "Paris was") == 6
    assert first_divergence("Paris", "Paris, France") == 5


def test_scored_tokens_match_llama_perplexity(fixture_text):
    from ladder.planning.scoring import scored_tokens

    # 96.825 % same-top-p in the captured run (ctx 128, 4 chunks) is 244 of 252 tokens
    assert scored_tokens(128, 4) == 252 and round(244 / 252 * 100, 3) == 96.825


def test_drift_over_the_sme_cap_is_named_the_fallback_kernels(fixture_text):
    # issue 45, item 5: on the SME2 host (QEMU 11 max) KleidiAI's init lines set a conservative
    # SME thread cap of 1; the quality runs use 2 threads, where every matmul goes to the
    # non-SME kernels (the ledger's SME_THREAD_CAP), so their drift is not the SME2 kernels'
    log = fixture_text("aarch64-qemu11/completion-kleidiai-sme2-q4_0.excerpt.log")
    evidence = {"kleidiai_sme": parse.kleidiai_sme(log)}
    assert evidence["kleidiai_sme"]["thread_cap"] == 1
    assert parse.kleidiai_primary(log) == {"q4": "SME2", "q8": "SME2", "f32": "SME2"}
    over = sme_scope({"threads": 2}, evidence)
    assert over is not None and "over KleidiAI's SME thread cap 1 (conservative)" in over
    assert "SME kernels' drift is not measured" in over
    within = sme_scope({"threads": 1}, evidence)
    assert within is not None and "within KleidiAI's SME thread cap 1" in within
    # SME off (GGML_KLEIDIAI_SME=0), no SME line (x86, or a build without KleidiAI): no scope
    assert sme_scope({"threads": 2}, {"kleidiai_sme": {"state": "disabled", "thread_cap": 0}}) is None
    assert sme_scope({"threads": 2}, {}) is None


def test_sme_off_and_an_sme_cap_override_from_real_init_lines(fixture_text):
    # the same SME2 build under GGML_KLEIDIAI_SME=0 and =4 (tests/fixtures/README.md)
    off = parse.kleidiai_sme(fixture_text("aarch64-qemu11/bench-kleidiai-sme_off-q4_0.stderr.excerpt.log"))
    assert off is not None and off["state"] == "disabled" and off["thread_cap"] == 0
    assert sme_scope({"threads": 2}, {"kleidiai_sme": off}) is None
    cap4 = parse.kleidiai_sme(fixture_text("aarch64-qemu11/bench-kleidiai-sme_cap4-q4_0.stderr.excerpt.log"))
    assert cap4 is not None and cap4["thread_cap"] == 4 and cap4["cap_source"] == "override"
    assert "within KleidiAI's SME thread cap 4" in (sme_scope({"threads": 2}, {"kleidiai_sme": cap4}) or "")
