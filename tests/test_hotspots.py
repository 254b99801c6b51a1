"""Hotspots and kernel tests: parsers fed with real captured output, grouping, report lines.

Fixtures (tests/fixtures/README.md "x86_64/hotspots/", "x86_64/kernel_tests/") are real
`perf report` and test-quantize-* output of this project's default x86_64 builds.
"""

from __future__ import annotations

import pytest

from ladder.core.errors import LadderError
from ladder.measuring.hotspots import group_samples, parse_perf_report
from ladder.planning.stages import phase_workloads
from ladder.core.kernels import OTHER, load_families
from ladder.measuring.kernel_tests import ggml_type, parse_fns, parse_perf
from ladder.reporting.report import kernel_flag, time_share

X86 = load_families("x86_64")


def grouped(fixture_text, name: str) -> dict:
    text = fixture_text(f"x86_64/hotspots/{name}.perf-report.txt")
    return group_samples(parse_perf_report(text, name), X86, top=8)


def test_perf_report_rows_and_event(fixture_text):
    rep = parse_perf_report(fixture_text("x86_64/hotspots/floor.prefill.q4_k_m.t2.perf-report.txt"))
    assert rep["event"] == "cpu-clock"
    top = rep["rows"][0]
    assert (top["symbol"], top["dso"], top["samples"]) == (
        "ggml_vec_dot_q5_0_q8_0_generic", "libggml-cpu.so.0.25.3", 3923)
    # libgomp is stripped: its addresses are pooled into one row, not spread over many
    gomp = [r for r in rep["rows"] if r["dso"].startswith("libgomp")]
    assert len(gomp) == 1 and gomp[0]["symbol"] == "(unresolved in libgomp.so.1.0.0)"
    assert gomp[0]["samples"] > 1146


def test_floor_time_is_in_generic_code(fixture_text):
    g = grouped(fixture_text, "floor.prefill.q4_k_m.t2")["groups"]
    families = {k: v for k, v in g.items() if k in X86.families}
    assert max(families, key=families.get) == "generic"
    assert g["generic"] > 0.7
    assert "repack" not in g and "llamafile" not in g


def test_native_repack_time_is_in_its_kernels(fixture_text):
    # Q4_K_M: repack takes the q4_K tensors, llamafile's tinyBLAS the q5_0 ones (prefill)
    g = grouped(fixture_text, "native_repack.prefill.q4_k_m.t2")["groups"]
    assert g["llamafile"] > g.get("generic", 0)
    assert g["repack"] > 0
    d = grouped(fixture_text, "native_repack.decode.q4_k_m.t2")["groups"]
    assert d["repack"] > 0 and d["generic"] > 0  # decode: q5_0 rows stay on vec_dot


def test_amx_decode_time_is_in_the_vnni_kernels(fixture_text):
    out = grouped(fixture_text, "amx.decode.q4_k_m.t2")
    assert out["groups"]["amx"] > 0.2
    assert out["top"][1]["group"] == "amx"
    assert out["top"][1]["symbol"].startswith("(anonymous namespace)::tinygemm_kernel_vnni<")


def test_every_sample_lands_in_exactly_one_group(fixture_text):
    out = grouped(fixture_text, "floor.decode.q4_k_m.t2")
    assert sum(out["groups"].values()) == pytest.approx(1.0, abs=0.002)
    assert out["groups"]["threading"] > 0  # the OpenMP runtime ggml's threads wait in
    assert set(out["groups"]) <= set(X86.group_names())
    assert X86.group_names()[-1] == OTHER


def test_not_perf_output_is_named():
    with pytest.raises(LadderError, match="cell.txt: not perf report output"):
        parse_perf_report("Error:\nThe sys_perf_event_open() syscall failed\n", "cell.txt")


@pytest.mark.parametrize("rung", ["floor", "native_repack"])
def test_kernel_test_output_is_read(fixture_text, rung):
    fns = parse_fns(fixture_text(f"x86_64/kernel_tests/{rung}.test-quantize-fns.txt"))
    assert fns["failed"] == 0 and fns["passed"] == len(fns["checks"]) > 70
    q4 = [c for c in fns["checks"] if c["type"] == "q4_0"]
    assert {c["test"] for c in q4} >= {"absolute quantization error", "dot product error"}
    rows = parse_perf(fixture_text(f"x86_64/kernel_tests/{rung}.test-quantize-perf.txt"))
    assert {(r["type"], r["op"]) for r in rows} >= {("q4_0", "vec_dot_q"), ("q4_K", "vec_dot_q"),
                                                   ("q8_0", "quantize_row_q_dot")}
    assert all(r["min_cycles"] <= r["avg_cycles"] and r["quantized_gbps"] > 0 for r in rows)


def test_the_floor_vec_dot_is_slower_than_the_native_one(fixture_text):
    def vec_dot(rung: str, typ: str) -> float:
        rows = parse_perf(fixture_text(f"x86_64/kernel_tests/{rung}.test-quantize-perf.txt"))
        return next(r["min_cycles"] for r in rows if (r["type"], r["op"]) == (typ, "vec_dot_q"))

    for typ in ("q4_0", "q4_K", "q8_0"):
        assert vec_dot("floor", typ) > 2 * vec_dot("native_repack", typ)


def test_fns_count_mismatch_and_empty_output_are_named(fixture_text):
    text = fixture_text("x86_64/kernel_tests/floor.test-quantize-fns.txt")
    with pytest.raises(LadderError, match="says 2 tests failed, 0 FAILED"):
        parse_fns(text.replace("0 tests failed", "2 tests failed"), "fns.log")
    with pytest.raises(LadderError, match="fns.log: no check lines"):
        parse_fns("Testing q4_0\n", "fns.log")


@pytest.mark.parametrize("quant, typ", [("Q4_K_M", "q4_K"), ("q4_0", "q4_0"), ("Q8_0", "q8_0"),
                                        ("Q5_K_S", "q5_K"), ("IQ4_XS", "iq4_xs"), ("F16", "f16")])
def test_quant_names_map_to_ggml_types(quant, typ):
    assert ggml_type(quant) == typ


def test_hotspot_workloads_must_be_bench_workloads_of_their_phase():
    wl = {"pp128": {"n_prompt": 128}, "tg64": {"n_gen": 64}, "pp32": None}
    assert phase_workloads({"workloads": {"prefill": "pp128", "decode": "tg64"}}, wl) == {
        "prefill": ("pp128", wl["pp128"]), "decode": ("tg64", wl["tg64"])}
    with pytest.raises(LadderError, match=r"hotspots.workloads.prefill: 'pp32' is not"):
        phase_workloads({"workloads": {"prefill": "pp32"}}, wl)


def test_hotspot_workloads_default_to_the_benchs_largest_of_each_phase():
    """A config that shrinks the bench's workloads (the resume test's pp16/tg16) samples what it
    measures, without naming them again under hotspots."""
    wl = {"pp32": {"n_prompt": 32}, "pp128": {"n_prompt": 128}, "tg64": {"n_gen": 64},
          "tg16": {"n_gen": 16}, "pp512": None}
    assert {p: w for p, (w, _) in phase_workloads({"workloads": None}, wl).items()} == {
        "prefill": "pp128", "decode": "tg64"}
    assert {p: w for p, (w, _) in phase_workloads({"workloads": {"prefill": "pp32"}},
                                                  wl).items()} == {"prefill": "pp32",
                                                                   "decode": "tg64"}
    only = {"pp16": {"n_prompt": 16}}
    assert list(phase_workloads({}, only)) == ["prefill"]


def _hot(groups: dict, threads: int = 2, status: str = "ok") -> dict:
    return {"unavailable": None, "groups": {}, "cells": [
        {"rung": "native_repack", "quant": "q4_0", "phase": "prefill", "threads": threads,
         "status": status, "reason": None if status == "ok" else "perf record: exit code 255",
         "groups": groups}]}


def test_time_share_beside_a_ledger_verdict():
    lc = {"rung": "native_repack", "quant": "q4_0", "phase": "prefill", "threads": 2,
          "family": "repack", "verdict": "DISPATCHED"}
    assert time_share(_hot({"repack": 0.61}), lc)["text"] == "repack 61 % of the sampled time"
    little = time_share(_hot({"repack": 0.08, "threading": 0.7}), lc)
    assert little["share"] == 0.08 and "most of the time went elsewhere" in little["text"]
    assert time_share(_hot({"repack": 0.6}, threads=1), lc)["text"] == (
        "not sampled at 2 thread(s) (sampled at t1)")
    assert "exit code 255" in time_share(_hot({}, status="failed"), lc)["text"]
    off = {"unavailable": "emulated host: perf would sample QEMU", "groups": {}, "cells": []}
    assert time_share(off, lc)["text"].startswith("not sampled: emulated host")
    assert time_share(None, lc)["text"] == "hotspots off (hotspots.enabled)"


def test_a_rung_whose_kernels_fail_is_flagged():
    kt = {"rungs": [
        {"rung": "native_repack", "fns": {"status": "ok", "passed": 77, "failed": 1},
         "failed_checks": ["q4_0 dot product error (0.031)"]},
        {"rung": "floor", "fns": {"status": "ok", "passed": 78, "failed": 0}, "failed_checks": []},
        {"rung": "amx", "fns": {"status": "unavailable", "reason": "build failed: ICE"},
         "failed_checks": []}]}
    flag = kernel_flag(kt, "native_repack")
    assert flag["flag"] and "q4_0 dot product error (0.031)" in flag["text"]
    assert kernel_flag(kt, "floor") == {"flag": False,
                                        "text": "kernels pass test-quantize-fns (78 checks)"}
    assert kernel_flag(kt, "amx")["text"] == "kernel tests not run: build failed: ICE"
    assert kernel_flag(kt, "kleidiai") is None


def test_sampled_runs_last_long_enough_by_the_bench_speed():
    from ladder.measuring.hotspots import repetitions_for

    settings = {"min_seconds": 2, "max_repetitions": 50}
    doc = {"samples": [{"rung": "native_repack", "tokens_per_s": v, "warmup": w}
                       for v, w in ((100.0, True), (800.0, False), (820.0, False),
                                    (790.0, False))]}
    reps, why = repetitions_for(doc, "native_repack", {"n_prompt": 128}, settings)
    assert reps == 13 and "0.16 s" in why and "800.0 tokens/s" in why  # 13 x 0.16 s >= 2 s
    assert repetitions_for(doc, "floor", {"n_prompt": 128}, settings)[0] == 1
    assert repetitions_for(None, "floor", {"n_gen": 64}, settings) == (
        1, "no bench result for this cell: 1 repetition")
    capped = repetitions_for(doc, "native_repack", {"n_prompt": 1}, settings)
    assert capped[0] == 50 and "capped" in capped[1]
