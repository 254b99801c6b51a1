"""KleidiAI judged by its own selection rules (workflow/data/kernel_families.yaml, from ggml's
kleidiai/kernels.cpp at 0c1e570): a set's GEMV kernel is not a fallback from its GEMM kernel,
above the SME thread cap the non-SME fallback set is the design, an SME/non-SME split is HYBRID,
and the thread cap shows as a pattern across thread counts. Kernel names are the real
``kai_run_*`` symbols of a KleidiAI v1.24.0 build; the init lines are from the QEMU -cpu max
captures in tests/fixtures/aarch64-qemu/."""

from __future__ import annotations

from pathlib import Path

from ladder.core import parse
from ladder.measuring.dispatch import judge_cell, judge_vendor, sme_patterns
from ladder.core.kernels import load_families

FIX = Path(__file__).parent / "fixtures" / "aarch64-qemu"
FSET = load_families("aarch64")
KAI = FSET["kleidiai"]
Q4_GEMM_I8MM = "kai_run_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm"
Q4_GEMV_DOT = "kai_run_matmul_clamp_f32_qsi8d32p1x8_qsi4c32p4x8_1x4x32_neon_dotprod"
Q8_GEMV_SME = "kai_run_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme_dot"
Q8_GEMV_DOT = "kai_run_matmul_clamp_f32_qai8dxp1x8_qsi8cxp4x8_1x4_neon_dotprod"
Q8_GEMM_SME = "kai_run_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme_mopa"
Q8_GEMM_I8MM = "kai_run_matmul_clamp_f32_qai8dxp4x8_qsi8cxp4x8_16x4_neon_i8mm"
LOG = (FIX / "aarch64-kleidiai-qemu_max-q4_0-t1.stderr.excerpt.log").read_text()
PRIMARY = parse.kleidiai_primary(LOG)
SME = parse.kleidiai_sme(LOG)


def k(symbol, calls, threads=None):
    return {"symbol": symbol, "calls": calls, "threads": threads}


def judge(ran, threads, primary=PRIMARY, sme=SME):
    vendor = judge_vendor(KAI, ran, primary, sme, threads)
    totals = {"kleidiai": {"dispatch": 10, "kernels": sum(r["calls"] for r in ran),
                           "variants": {}}}
    res = {"kleidiai": {"dispatch": {"matched": 3}, "kernels": {"matched": 20}}}
    return vendor, judge_cell(expected=KAI, families=FSET, resolution=res, totals=totals,
                              advertised=True, advertised_variant=PRIMARY["q4"], vendor=vendor)


def test_init_lines_of_the_cpu_max_capture():
    assert PRIMARY == {"q4": "I8MM", "q8": "SME", "f32": "SME"}
    assert SME["state"] == "enabled" and SME["thread_cap"] == 1
    assert SME["cap_source"] == "conservative"


def test_decode_dotprod_gemv_is_the_i8mm_sets_design():
    """The hand-run ledger called this SILENT_FALLBACK ("advertised I8MM, ran DOTPROD")."""
    vendor, cell = judge([k(Q4_GEMV_DOT, 36, {0: 36}), k(Q8_GEMV_SME, 2, {0: 2})], threads=1)
    assert cell["verdict"] == "DISPATCHED", cell["detail"]
    roles = {r["symbol"]: r["role"] for r in vendor["kernels"]}
    assert roles[Q4_GEMV_DOT] == "set (the I8MM set's GEMV kernel)"
    assert roles[Q8_GEMV_SME] == "set"
    assert "q4 GEMV: DOTPROD 36" in cell["detail"]


def test_above_the_sme_cap_the_fallback_set_is_the_design():
    vendor, cell = judge([k(Q4_GEMV_DOT, 72, {0: 36, 1: 36}), k(Q8_GEMV_DOT, 4, {0: 2, 1: 2})],
                         threads=2)
    assert cell["verdict"] == "DISPATCHED", cell["detail"]
    role = next(r["role"] for r in vendor["kernels"] if r["symbol"] == Q8_GEMV_DOT)
    assert role == "fallback set above the SME thread cap (1)"


def test_non_sme_kernel_within_the_cap_is_a_fallback():
    _, cell = judge([k(Q4_GEMV_DOT, 36), k(Q8_GEMV_DOT, 2)], threads=1)
    assert cell["verdict"] == "SILENT_FALLBACK"
    assert "q8 GEMV: the SME set was advertised" in cell["detail"]


def test_wrong_isa_for_the_set_is_a_fallback():
    gemm_dot = "kai_run_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod"
    _, cell = judge([k(gemm_dot, 10)], threads=1)
    assert cell["verdict"] == "SILENT_FALLBACK"
    assert "q4 GEMM: DOTPROD kernel ran where the I8MM set's GEMM kernel is I8MM" in cell["detail"]


def test_sme_split_across_threads_is_hybrid_with_shares():
    vendor, cell = judge([k(Q4_GEMM_I8MM, 40, {0: 20, 1: 20}), k(Q8_GEMM_SME, 3, {0: 3}),
                          k(Q8_GEMM_I8MM, 3, {1: 3})], threads=2)
    assert cell["verdict"] == "HYBRID", cell["detail"]
    (split,) = vendor["splits"]
    assert split["operand"] == "q8" and split["shape"] == "GEMM"
    assert split["sme"]["threads"] == [0] and split["other"]["threads"] == [1]
    assert split["sme_share"] == 0.5
    assert "q8 GEMM split: SME on thread(s) [0]" in cell["detail"]


def test_thread_cap_pattern_across_thread_counts():
    def cell(threads, ran, sme=SME):
        vendor = judge_vendor(KAI, ran, PRIMARY, sme, threads)
        return {"rung": "kleidiai", "quant": "q4_0", "workload": "decode_short",
                "threads": threads, "L3": {"vendor": vendor}}

    cells = [cell(1, [k(Q4_GEMV_DOT, 36), k(Q8_GEMV_SME, 2)]),
             cell(2, [k(Q4_GEMV_DOT, 72), k(Q8_GEMV_DOT, 4)])]
    (pt,) = sme_patterns(cells)
    assert pt["pattern"] == "SME_THREAD_CAP" and pt["sme_thread_cap"] == 1
    assert "ran at 1 thread(s) and none at 2" in pt["text"] and "q8 GEMV" in pt["text"]
    off = parse.kleidiai_sme("kleidiai: SME disabled\n")
    cells = [cell(t, [k(Q4_GEMV_DOT, 36 * t), k(Q8_GEMV_DOT, 2 * t)], off) for t in (1, 2)]
    for c in cells:
        c["rung"] = "sme_off"
    (pt,) = sme_patterns(cells)
    assert pt["pattern"] == "SME_OFF" and "no SME kernel at 1, 2 thread(s)" in pt["text"]


def test_neoverse_n1_dotprod_sets():
    log = (FIX / "aarch64-kleidiai-qemu_neoverse_n1-q4_0-t1.stderr.excerpt.log").read_text()
    primary, sme = parse.kleidiai_primary(log), parse.kleidiai_sme(log)
    assert primary["q4"] == "DOTPROD" and sme["state"] == "disabled"
    gemm = "kai_run_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod"
    vendor = judge_vendor(KAI, [k(gemm, 10), k(Q8_GEMV_DOT, 1)], primary, sme, 2)
    assert not vendor["mismatches"] and not vendor["splits"]


def test_q4_k_m_is_a_negative_control_that_is_not_a_pure_opt_out():
    """The -cpu max capture: KleidiAI warns it has no q5_0 kernel, yet CPU_KLEIDIAI holds
    328.87 MiB of the Q4_K_M model (the tied Q8_0 embedding)."""
    from ladder.reporting.report import negative_controls

    log = (FIX / "aarch64-kleidiai-qemu_max-q4_k_m-t1.stderr.excerpt.log").read_text()
    ev = {"status": "ok", "weight_buffers_mib": parse.weight_buffers(log),
          "kleidiai_unaccelerated_types": parse.kleidiai_unaccelerated_types(log)}
    rung = {"name": "kleidiai", "negative_controls": ["q4_k_m"],
            "markers": [{"mechanism": "kleidiai", "buffer": "CPU_KLEIDIAI"},
                        {"mechanism": "kleidiai", "feature": "KLEIDIAI"}]}
    (nc,) = negative_controls([rung], {"q4_k_m": {"kleidiai": ev}})
    assert nc["pure"] is False and nc["held_mib"] == {"CPU_KLEIDIAI": 328.87}
    assert nc["text"].startswith("not a pure opt-out: CPU_KLEIDIAI holds 328.87 MiB")
    assert "does not accelerate: q5_0" in nc["text"]
    ev["weight_buffers_mib"] = {"CPU_Mapped": 250.0}
    (nc,) = negative_controls([rung], {"q4_k_m": {"kleidiai": ev}})
    assert nc["pure"] is True
