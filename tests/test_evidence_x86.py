"""Evidence and statistics on real x86 output captured by this workflow (tests/fixtures/README.md)."""

from __future__ import annotations

import json
import math

from ladder.core import parse
from ladder.analysis import stats
from ladder.measuring.evidence import judge_claims
from ladder.preparing.recipes import rungs_from_config

X86 = "x86_64/"


def markers(config, rung):
    return next(r for r in rungs_from_config(config, "x86_64") if r.name == rung).markers


def test_completion_fit_pass_is_skipped(fixture_text):
    log = fixture_text(X86 + "completion-native_repack-q4_0.excerpt.log")
    # llama-completion's no-alloc "fit" pass prints 0.00 MiB first; the real load follows.
    assert parse.buffer_loads(log)[0] == {"CPU": 0.0, "CPU_REPACK": 0.0}
    assert parse.weight_buffers(log) == {"CPU_Mapped": 224.0, "CPU_REPACK": 53.79}
    assert parse.repacked_layouts(log) == {"q4_0_8x8": 7}  # block 0's seven weights
    feats = parse.system_info_features(log)
    assert feats["AVX2"] == "1" and feats["REPACK"] == "1" and "AMX_INT8" not in feats


def test_native_repack_claims_are_credited(fixture_text, default_config):
    log = fixture_text(X86 + "completion-native_repack-q4_0.excerpt.log")
    claims = judge_claims(markers(default_config, "native_repack"), parse.weight_buffers(log),
                          parse.system_info_features(log), log, None)
    assert {c["mechanism"]: c["verdict"] for c in claims} == {
        "native_isa": "credited", "repack": "credited", "llamafile": "credited",
        "no_amx": "credited"}


def test_floor_is_generic(fixture_text, default_config):
    log = fixture_text(X86 + "completion-floor-q4_0.excerpt.log")
    assert parse.weight_buffers(log) == {"CPU_Mapped": 224.0}
    assert parse.system_info_features(log) == {"OPENMP": "1"}
    claims = judge_claims(markers(default_config, "floor"), parse.weight_buffers(log),
                          parse.system_info_features(log), log, None)
    assert claims == [{"mechanism": "generic_floor", "verdict": "credited", "credited": True,
                       "seen": ["no compiled feature AVX2", "no weight buffer CPU_REPACK"],
                       "missing": []}]


def test_no_marker_no_claim_when_the_marker_is_missing(fixture_text, default_config):
    # The floor's log offers no CPU_REPACK buffer, so a repack claim on it must fail.
    log = fixture_text(X86 + "completion-floor-q4_0.excerpt.log")
    claims = judge_claims(markers(default_config, "native_repack"), parse.weight_buffers(log),
                          parse.system_info_features(log), log, None)
    verdicts = {c["mechanism"]: c["verdict"] for c in claims}
    assert verdicts["repack"] == "no marker, no claim"
    assert verdicts["native_isa"] == "no marker, no claim"


def test_amx_crash_markers_present_but_not_credited(fixture_text, default_config):
    log = fixture_text(X86 + "completion-amx-q4_0.excerpt.log")
    crash = json.loads(fixture_text(X86 + "evidence-amx-q4_0.crash.json"))
    assert crash["returncode"] == -4 and crash["crash"]["signal"] == "SIGILL"
    assert crash["crash"]["instruction"].startswith("tilezero")
    assert parse.weight_buffers(log) == {"AMX": 243.79, "CPU_Mapped": 224.0}
    # block 0's seven Q4_0 weights and the tied Q8_0 output head, which x86 repack cannot take
    assert parse.amx_repacked_types(log) == {"q4_0": 7, "q8_0": 1}
    claims = judge_claims(markers(default_config, "amx"), parse.weight_buffers(log),
                          parse.system_info_features(log), log, crash["reason"])
    assert not claims[0]["credited"]
    assert claims[0]["verdict"].startswith("markers present, but the run crashed (SIGILL in")


def test_x86_llama_bench_json(fixture_text):
    recs = parse.bench_records(fixture_text(X86 + "llama-bench-amx-q4_0-tg8.json"))
    assert recs[0]["n_gen"] == 8 and recs[0]["n_threads"] == 2
    assert recs[0]["build_commit"] == "0c1e570"


def test_real_samples_verdicts(fixture_text):
    doc = json.loads(fixture_text(X86 + "samples-q4_0-tg8-t2.json"))
    cell = stats.summarize_cell(doc, ["floor", "native_repack", "amx"], "control",
                                "native_repack")
    assert cell["rungs"]["floor"]["n"] == 3  # the warmup round is left out
    steps = {s["rung"]: s for s in cell["steps"]}
    assert steps["native_repack"]["verdict"]["call"] == "faster"
    floor = cell["noise_floor"]["floor"]
    assert floor is not None and floor > 0
    # Every called ratio is significant and clears the threshold; nothing else is a multiplier.
    for s in cell["steps"] + cell["vs_floor"]:
        v = s["verdict"]
        if v["call"] in {"faster", "slower"}:  # significant and at least the threshold
            r = s["ratio"]
            assert v["p_value"] <= 0.05 and abs(math.log(r["estimate"])) >= math.log1p(
                v["threshold"])
        else:
            assert "x " not in v["text"]
