"""KleidiAI's own test suite as a rung's "kernels alone" (ladder.measuring.vendor_tests, issue 45 item 5),
on real inputs: the pinned llama.cpp's KleidiAI glue, KleidiAI's source from ../shared, and
googletest reports of its SME2 tests run under QEMU 11 (tests/fixtures/README.md)."""

from __future__ import annotations

import json
import tarfile

import pytest

from ladder.measuring import vendor_tests as vt
from workflow_runner import kleidiai_archive

SME2_Q4_GEMV = "matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot"
SME2_Q4_GEMM = "matmul_clamp_f32_f16p1vlx2_qsi4c32p4vlx2_1vlx4vl_sme2_mopa"


def gtest(fixture_text, name):
    return vt.parse_gtest(json.loads(fixture_text(f"vendor_tests/{name}.trimmed.json")))


def test_the_kernels_llama_cpp_calls(fixture_text):
    names = vt.used_ukernels(fixture_text("vendor_tests/kernels.cpp.kai_run_matmul.excerpt"))
    assert SME2_Q4_GEMV in names and SME2_Q4_GEMM in names
    assert "matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa" in names
    # the fallback sets above the SME thread cap are llama.cpp's kernels too
    assert "matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm" in names
    assert all(not n.startswith("kai_run_") for n in names) and names == sorted(set(names))


def test_each_kernel_maps_to_its_test_binary(tmp_path, fixture_text):
    archive = kleidiai_archive()
    if archive is None:
        pytest.skip("no KleidiAI archive in ../shared/third_party")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    names = vt.used_ukernels(fixture_text("vendor_tests/kernels.cpp.kai_run_matmul.excerpt"))
    targets, untested = vt.test_targets(root, names)
    assert SME2_Q4_GEMV in targets["matmul_clamp_f32_qsi8d32p_qsi4c32p_test"]
    assert SME2_Q4_GEMM in targets["matmul_clamp_f32_f16p_qsi4c32p_test"]
    covered = [u for us in targets.values() for u in us]
    assert sorted([*covered, *untested]) == names
    # a build key names the vendor source, toolchain and targets: another target set, another key
    ident = {"kind": "archive", "sha256": "9c13"}
    assert vt.build_key(ident, None, ["a_test"]) != vt.build_key(ident, None, ["b_test"])


def test_sme2_tests_that_ran_and_the_ones_the_kernel_skips(fixture_text):
    tests = gtest(fixture_text, "q4_gemv-sme2_sdot-qemu11_max")
    t = vt.tally(tests)
    assert (t["passed"], t["failed"], t["skipped"]) == (3, 0, 2)
    assert t["skip_reasons"] == {"Kernel does not support M != 1": 2}
    per = vt.per_ukernel(tests, [SME2_Q4_GEMV])
    assert per[SME2_Q4_GEMV]["passed"] == 3 and "by_binary" not in per[SME2_Q4_GEMV]


def test_no_sme2_guest_skips_every_sme2_test(fixture_text):
    # the same binary under QEMU 11's neoverse-n2 (SVE2, no SME): KleidiAI's cpu_check skips
    t = vt.tally(gtest(fixture_text, "q4_gemv-sme2_sdot-qemu11_neoverse_n2"))
    assert t["passed"] == 0 and t["skipped"] == 2
    assert t["skip_reasons"] == {"Unsupported CPU feature": 2}


def test_a_binary_whose_test_names_carry_no_kernel_is_counted_whole(fixture_text):
    tests = gtest(fixture_text, "f16p_qsi4c32p-qemu11_max")
    assert all("variant_0" in t["name"] for t in tests)
    per = vt.per_ukernel(tests, [SME2_Q4_GEMM])
    assert per[SME2_Q4_GEMM]["by_binary"] and per[SME2_Q4_GEMM]["passed"] == len(tests)


def test_summary_and_failures():
    rec = {"status": "failed", "totals": {"tests": 3, "passed": 2, "failed": 1, "skipped": 0},
           "ukernels": ["a", "b"],
           "results": {"x_test": {"ukernels": {"a": {"passed": 2}, "b": {"passed": 0}}}}}
    assert vt.summary(rec).startswith("2 passed, 1 failed, 0 skipped of 3 tests")
    assert vt.summary(rec).endswith("1 of 2")
    assert vt.summary({"status": "not_run", "reason": "no source"}) == "not_run: no source"
    failed = vt.parse_gtest({"testsuites": [{"name": "S", "testsuite": [
        {"name": "t", "result": "COMPLETED", "failures": [{"failure": "x.cpp:1\nmismatch"}]}]}]})
    assert failed[0]["result"] == "failed" and failed[0]["failures"] == ["x.cpp:1"]


def test_a_rung_without_a_build_is_a_record_with_its_raw_folder(tmp_path):
    # the rule's outputs exist even when nothing runs (the wrong-archive lane: not applicable)
    prov = tmp_path / "provenance.json"
    prov.write_text(json.dumps({"status": "not_applicable", "reason": "no KleidiAI source"}))
    rec = vt.run_suite(rung={"name": "kleidiai", "launcher": []}, provenance=str(prov),
                       resources_dir=str(tmp_path / "res"), out_json=str(tmp_path / "k.json"),
                       raw_dir=str(tmp_path / "k.raw"), log=str(tmp_path / "k.log"), jobs=2,
                       timeout_s=10, ccache_dir=None)
    assert rec["status"] == "not_run" and "no KleidiAI source" in rec["reason"]
    assert (tmp_path / "k.raw").is_dir() and json.loads((tmp_path / "k.json").read_text())
