"""Drift judgement on real figures measured on this VM (tests/fixtures/README.md)."""

from __future__ import annotations

import json

import pytest

from ladder.quality import first_divergence, judge_drift

Q = "x86_64/quality/"
TOL = {"ppl_rel": 0.01, "kld_mean": 0.01}


def load(fixture_text, name):
    return json.loads(fixture_text(Q + name + ".json"))


def test_q4_0_native_repack_drifts_past_the_ppl_tolerance(fixture_text):
    floor, native = load(fixture_text, "q4_0-floor"), load(fixture_text, "q4_0-native_repack")
    assert floor["ppl"] == pytest.approx(19.6388) and native["ppl"] == pytest.approx(19.405443)
    v = judge_drift(native, floor, TOL)
    assert v["flag"] is True
    assert v["reasons"] == ["PPL -1.19 % vs floor (tolerance 1 %)"]
    assert native["probe"]["identical_to_floor"] is True  # yet the greedy text is the same


def test_q8_0_native_repack_is_within_tolerance(fixture_text):
    floor, native = load(fixture_text, "q8_0-floor"), load(fixture_text, "q8_0-native_repack")
    v = judge_drift(native, floor, TOL)
    assert v["flag"] is False
    assert v["text"] == "within tolerance (PPL +0.96 %, mean KLD 0.0028)"
    assert native["probe"]["first_divergence"] == 49
    # a stricter KLD limit catches it
    assert judge_drift(native, floor, {"ppl_rel": 0.01, "kld_mean": 0.002})["flag"] is True


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
    from ladder.quality import scored_tokens

    # 96.825 % same-top-p in the captured run (ctx 128, 4 chunks) is 244 of 252 tokens
    assert scored_tokens(128, 4) == 252 and round(244 / 252 * 100, 3) == 96.825
