"""Parsers fed with real llama.cpp output (see tests/fixtures/README.md for how it was captured)."""

from __future__ import annotations

import pytest

from ladder.core import parse
from ladder.core.errors import LadderError

ARM = "aarch64-qemu/"


def test_kleidiai_q4_k_m_is_not_a_pure_opt_out(fixture_text):
    log = fixture_text(ARM + "aarch64-kleidiai-qemu_max-q4_k_m-t1.stderr.excerpt.log")
    assert parse.weight_buffers(log) == {
        "CPU_Mapped": 235.16, "CPU_KLEIDIAI": 328.87, "CPU_REPACK": 21.88}
    assert parse.kleidiai_primary(log) == {"q4": "I8MM", "q8": "SME", "f32": "SME"}
    assert parse.kleidiai_unaccelerated_types(log) == ["q5_0"]
    assert parse.repacked_layouts(log) == {"q6_K_8x8": 1}
    fb = parse.buffer_fallbacks(log)
    assert fb == [{"tensor": "token_embd.weight", "type": "q8_0", "others": 226,
                   "preferred": "CPU_KLEIDIAI", "used": "CPU"}]
    vendor = parse.vendor_lines(log)
    assert vendor[0].startswith("kleidiai: SME detected; SMCU count unavailable")
    assert any("cap=1" in v for v in vendor)


def test_kleidiai_on_neoverse_n1_uses_dotprod(fixture_text):
    log = fixture_text(ARM + "aarch64-kleidiai-qemu_neoverse_n1-q4_0-t1.stderr.excerpt.log")
    assert parse.kleidiai_primary(log) == {"q4": "DOTPROD", "q8": "DOTPROD"}
    assert parse.weight_buffers(log) == {"CPU_Mapped": 224.0, "CPU_KLEIDIAI": 223.80}
    assert "kleidiai: SME disabled" in parse.vendor_lines(log)


def test_repack_rung_buffers(fixture_text):
    log = fixture_text(ARM + "aarch64-repack_i8mm-qemu_max-q4_0-t1.stderr.excerpt.log")
    assert parse.weight_buffers(log) == {"CPU_Mapped": 224.0, "CPU_REPACK": 223.79}
    assert parse.kleidiai_primary(log) == {}
    assert set(parse.repacked_layouts(log)) == {"q4_0_4x8"}


def test_bench_json_records(fixture_text):
    recs = parse.bench_records(fixture_text(ARM + "aarch64-kleidiai-qemu_max-q8_0-t2.json"))
    assert [(r["n_prompt"], r["n_gen"]) for r in recs] == [(16, 0), (0, 2)]
    assert all(r["n_threads"] == 2 for r in recs)
    assert all(len(r["samples_ts"]) == len(r["samples_ns"]) == 1 for r in recs)


def test_bench_json_errors_name_the_source():
    with pytest.raises(LadderError, match="run7.json: not llama-bench JSON"):
        parse.bench_records("llama-bench: error", "run7.json")
    with pytest.raises(LadderError, match="record 0 lacks"):
        parse.bench_records('[{"avg_ts": 1}]', "x.json")


def test_first_load_only():
    log = ("load_tensors:   CPU_Mapped model buffer size =   10.00 MiB\n"
           "load_tensors:   CPU_REPACK model buffer size =    5.00 MiB\n"
           "load_tensors:   CPU_Mapped model buffer size =   10.00 MiB\n")
    assert parse.weight_buffers(log) == {"CPU_Mapped": 10.0, "CPU_REPACK": 5.0}
