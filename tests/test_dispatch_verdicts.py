"""Verdict logic of the dispatch ledger (pure functions), the gate, and the report's credit.

The counts below have the shapes measured on this machine's real builds (Gemma 3 270M, decode
8 tokens at 1 thread: 127 matmuls per token), see the issue-3 closing note; the KleidiAI ISA
case is the seed's silent fallback (SME2 advertised, I8MM kernels executed).
"""

from __future__ import annotations

import pytest

from ladder.measuring.dispatch import family_totals, gate, judge_cell
from ladder.core.errors import LadderError
from ladder.core.kernels import load_families
from ladder.reporting.report import dispatch_for, workload_phase

X86 = load_families("x86_64")
ARM = load_families("aarch64")


def res(fset, **matched):
    """A resolution summary: every family present in the binary unless told otherwise."""
    out = {}
    for name, f in fset.families.items():
        out[name] = {k: {"pattern": getattr(f, k), "matched": matched.get(name, 1)}
                     for k in ("dispatch", "kernels") if getattr(f, k)}
    return out


def t(**fams):
    return {f: {"dispatch": d, "kernels": k, "variants": v} for f, (d, k, v) in fams.items()}


def test_floor_generic_only_is_dispatched():
    v = judge_cell(expected=X86["generic"], families=X86, resolution=res(X86),
                   totals=t(generic=(1016, 0, {})), advertised=True)
    assert v["verdict"] == "DISPATCHED" and v["share"] == 1.0


def test_repack_with_generic_output_head_is_hybrid_with_share():
    v = judge_cell(expected=X86["repack"], families=X86, resolution=res(X86),
                   totals=t(repack=(1008, 4032, {}), generic=(8, 0, {})), advertised=True)
    assert v["verdict"] == "HYBRID" and v["share"] == pytest.approx(1008 / 1016)
    assert "generic 8" in v["detail"]


def test_advertised_but_never_executed_is_silent_fallback():
    v = judge_cell(expected=X86["repack"], families=X86, resolution=res(X86),
                   totals=t(repack=(0, 0, {}), generic=(1016, 0, {})), advertised=True)
    assert v["verdict"] == "SILENT_FALLBACK" and "generic 1016" in v["detail"]


def test_nothing_in_the_buffer_is_not_applicable():
    # x86 has no Q8_0 repack: no CPU_REPACK buffer, nothing for repack to run
    v = judge_cell(expected=X86["repack"], families=X86, resolution=res(X86),
                   totals=t(generic=(1016, 0, {})), advertised=False)
    assert v["verdict"] == "NOT_APPLICABLE" and "CPU_REPACK" in v["detail"]


def test_crash_keeps_its_signal_symbol_and_counts_before_it():
    v = judge_cell(expected=X86["amx"], families=X86, resolution=res(X86),
                   totals=t(amx=(2, 0, {})), advertised=True,
                   crash={"signal": "SIGILL", "symbol": "ggml_backend_amx_mul_mat::{lambda}"})
    assert v["verdict"] == "CRASHED"
    assert "SIGILL" in v["detail"] and "ggml_backend_amx_mul_mat" in v["detail"]
    assert "amx 2" in v["detail"]


def test_generic_fallback_kernels_inside_the_family_make_it_hybrid():
    v = judge_cell(expected=X86["repack"], families=X86, resolution=res(X86),
                   totals=t(repack=(1016, 0, {}), repack_generic=(0, 4032, {})), advertised=True)
    assert v["verdict"] == "HYBRID" and "repack_generic kernels ran 4032" in v["detail"]


def test_kleidiai_advertised_sme2_but_i8mm_ran_is_silent_fallback():
    v = judge_cell(expected=ARM["kleidiai"], families=ARM, resolution=res(ARM),
                   totals=t(kleidiai=(2032, 8000, {"I8MM": 8000, "SME2": 0})),
                   advertised=True, advertised_variant="SME2")
    assert v["verdict"] == "SILENT_FALLBACK" and "SME2" in v["detail"] and "I8MM" in v["detail"]


def test_kleidiai_advertised_variant_ran_is_dispatched():
    v = judge_cell(expected=ARM["kleidiai"], families=ARM, resolution=res(ARM),
                   totals=t(kleidiai=(2032, 8000, {"I8MM": 8000})),
                   advertised=True, advertised_variant="I8MM")
    assert v["verdict"] == "DISPATCHED"


def test_amx_decode_names_its_vnni_kernels():
    # measured here: decode (M == 1) runs the AMX buffer's AVX512-VNNI kernels, no tile code
    v = judge_cell(expected=X86["amx"], families=X86, resolution=res(X86),
                   totals=t(amx=(1016, 2032, {"VNNI": 1016})), advertised=True)
    assert v["verdict"] == "DISPATCHED" and "TILE 0, VNNI 1016" in v["detail"]


def test_unmeasured_and_undeclared():
    v = judge_cell(expected=X86["repack"], families=X86, resolution=res(X86), totals={},
                   advertised=True, unmeasured="no instrumentation method: uprobes unavailable")
    assert v["verdict"] == "UNMEASURED"
    v = judge_cell(expected=None, families=X86, resolution=res(X86), totals={}, advertised=True)
    assert v["verdict"] == "NOT_APPLICABLE" and "family" in v["detail"]


def test_presence_only_hybrid_has_no_share():
    v = judge_cell(expected=X86["repack"], families=X86, resolution=res(X86),
                   totals=t(repack=(1, 1, {}), generic=(1, 0, {})), advertised=True, exact=False)
    assert v["verdict"] == "HYBRID" and v["share"] is None


def test_family_totals_sum_probes_by_kind_and_variant():
    probes = [{"id": "p0", "family": "kleidiai", "kind": "dispatch", "variant": None},
              {"id": "p1", "family": "kleidiai", "kind": "kernels", "variant": "I8MM"},
              {"id": "p2", "family": "kleidiai", "kind": "kernels", "variant": "I8MM"},
              {"id": "p3", "family": "generic", "kind": "dispatch", "variant": None}]
    tot = family_totals(probes, {"p0": 5, "p1": 7, "p2": 1})
    assert tot["kleidiai"] == {"dispatch": 5, "kernels": 8, "variants": {"I8MM": 8}}
    assert tot["generic"]["dispatch"] == 0


CELLS = [
    {"rung": "native_repack", "quant": "q4_0", "workload": "decode_short", "phase": "decode",
     "threads": 1, "verdict": "HYBRID", "share": 0.992, "detail": "repack 1008 of 1016"},
    {"rung": "native_repack", "quant": "q4_0", "workload": "decode_short", "phase": "decode",
     "threads": 2, "verdict": "HYBRID", "share": 0.992, "detail": "repack 2016 of 2032"},
    {"rung": "amx", "quant": "q4_0", "workload": "prefill_long", "phase": "prefill",
     "threads": 2, "verdict": "CRASHED", "share": 1.0, "detail": "killed by SIGILL"},
]


def test_gate_fails_on_fallback_and_on_selectors_matching_nothing():
    g = gate(CELLS, [{"rung": "amx"}, {"rung": "native_repack", "accept": ["DISPATCHED"]},
                     {"rung": "kleidiai"}])
    assert not g["passed"]
    assert {f["cell"] for f in g["failures"]} == {
        "amx/q4_0/prefill_long/t2", "native_repack/q4_0/decode_short/t1",
        "native_repack/q4_0/decode_short/t2"}
    assert g["unmatched"] == [{"rung": "kleidiai"}]
    assert gate(CELLS, [{"rung": "native_repack", "threads": 2}])["passed"]


def test_check_gate_error_names_cells(tmp_path):
    from ladder.measuring.dispatch import check_gate
    from ladder.core.io import atomic_write_json

    lj = tmp_path / "ledger.json"
    atomic_write_json(lj, {"gate": gate(CELLS, [{"rung": "amx"}])})
    with pytest.raises(LadderError, match=r"amx/q4_0/prefill_long/t2: CRASHED"):
        check_gate(str(lj), str(tmp_path / "gate.ok"))
    assert lj.exists() and not (tmp_path / "gate.ok").exists()


def test_report_credits_only_dispatched_or_hybrid():
    assert workload_phase({"n_prompt": 0, "n_gen": 64}) == "decode"
    assert workload_phase({"n_prompt": 128, "n_gen": 0}) == "prefill"
    assert workload_phase({"n_prompt": 128, "n_gen": 64}) is None
    d = dispatch_for(CELLS, "native_repack", "q4_0", "decode", 2)
    assert d["credited"] and d["threads"] == 2 and "99.2 %" in d["text"]
    d = dispatch_for(CELLS, "amx", "q4_0", "prefill", 2)
    assert not d["credited"] and "not credited" in d["text"]
    d = dispatch_for(CELLS, "native_repack", "q4_0", "decode", 8)  # nearest thread count
    assert d["threads"] == 2 and "ledger at 2 threads" in d["text"]
    assert not dispatch_for(CELLS, "floor", "q4_0", "decode", 2)["credited"]
    # issue 19, item 9: a pp32 credit from the ledger's prefill run says which run it was
    d = dispatch_for(CELLS, "native_repack", "q4_0", "decode", 2, "tg64")
    assert "(ledger at its decode workload decode_short)" in d["text"]
