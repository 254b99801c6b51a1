"""The emulated aarch64 lane: HWCAP decoding, the rung recipe under emulation, QEMU's exec log,
host config errors. Parsers run on real QEMU output (tests/fixtures/qemu-exec/README.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from workflow_runner import requires

from ladder.preparing import emulation
from ladder.core.errors import LadderError
from ladder.core.hosts import hosts_from_config
from ladder.preparing.recipes import Recipe, build_key, build_key_material

FIX = Path(__file__).parent / "fixtures" / "qemu-exec"
DATA = Path(__file__).parent / "data"
HAVE_QEMU = shutil.which("qemu-aarch64-static") is not None
HAVE_CROSS = shutil.which("aarch64-linux-gnu-gcc") is not None
needs_tools = requires(
    "LADDER_REQUIRE_EMULATION",
    [t for t, have in (("qemu-user-static", HAVE_QEMU), ("gcc-aarch64-linux-gnu", HAVE_CROSS))
     if not have], "the emulation tests")


def test_hwcaps_of_real_qemu_models() -> None:
    # values printed by workflow/emulation/hwcap_probe.c under QEMU 7.2 (see fixtures README)
    n1 = emulation.decode_hwcaps(1155067, 0)
    assert {"asimd", "asimddp", "asimdhp", "atomics", "lrcpc", "dcpop"} <= set(n1)
    assert not {"i8mm", "sve", "sve2", "sme"} & set(n1)
    mx = emulation.decode_hwcaps(3976200187, 2139586559)
    assert {"asimddp", "i8mm", "sve", "sve2", "sme", "bf16", "svei8mm"} <= set(mx)
    assert "sme2" not in mx  # QEMU 7.2 emulates SME, not SME2


def test_emulated_recipe_names_its_march() -> None:
    native = Recipe(cmake={"GGML_NATIVE": "ON", "GGML_CPU_REPACK": "ON",
                           "BUILD_SHARED_LIBS": "ON"}, cflags=(), targets=("llama-server",),
                    build_type="Release")
    r = emulation.emulated_recipe(native, "armv8.2-a+dotprod+i8mm", ["llama-bench"])
    assert r.cmake["GGML_NATIVE"] == "OFF"
    assert r.cmake["GGML_CPU_ARM_ARCH"] == "armv8.2-a+dotprod+i8mm"
    assert r.cmake["BUILD_SHARED_LIBS"] == "OFF"
    assert r.targets == ("llama-bench",) and r.toolchain == "aarch64-linux-gnu.cmake"
    floor = Recipe(cmake={"GGML_NATIVE": "OFF", "GGML_CPU_ARM_ARCH": "armv8-a"}, cflags=(),
                   targets=(), build_type="Release")
    assert emulation.emulated_recipe(floor, "armv9-a", []).cmake["GGML_CPU_ARM_ARCH"] == "armv8-a"


def test_cross_build_key_holds_the_toolchain_file() -> None:
    r = Recipe(cmake={"GGML_NATIVE": "OFF"}, cflags=(), targets=("llama-bench",),
               build_type="Release", toolchain="aarch64-linux-gnu.cmake")
    facts = {"arch": "aarch64", "compiler": {"c": "x"}, "native_target": None}
    m = build_key_material(r, "src", facts)
    assert m["toolchain_file"]["name"] == "aarch64-linux-gnu.cmake"
    assert len(m["toolchain_file"]["sha256"]) == 16
    plain = Recipe(cmake={"GGML_NATIVE": "OFF"}, cflags=(), targets=("llama-bench",),
                   build_type="Release")
    assert "toolchain" not in plain.as_dict()  # native build keys did not change
    assert build_key(r, "src", facts) != build_key(plain, "src", facts)


def test_exec_log_counts_entries_per_guest_thread() -> None:
    text = (FIX / "repack-max-q4_0-decode-t2.excerpt.log").read_text()
    assert emulation.start_code(text) == 0x5500000000
    entries = {0x55005100A0: "traits", 0x550052AF40: "generic", 0x5500520110: "gemv"}
    hits, cpus = emulation.count_entries(text, entries)
    trace = [ln for ln in text.splitlines() if ln.startswith("Trace ")]
    assert sum(hits.values()) == len(trace) == 40
    assert hits["traits"] == sum("compute_forward" in ln for ln in trace)
    assert "generic" not in hits
    assert cpus["traits"] == [0, 1] and set(cpus["gemv"]) <= {0, 1}


def test_exec_log_argv_filters_symbol_entries() -> None:
    argv = emulation.exec_log_argv(["qemu-aarch64-static", "-cpu", "max"],
                                   [0x5500520110, 0x55005100A0], "/tmp/x.log")
    assert argv[:3] == ["qemu-aarch64-static", "-cpu", "max"]
    assert argv[argv.index("-d") + 1] == "exec,nochain,page"
    assert argv[argv.index("-dfilter") + 1] == "0x55005100a0+4,0x5500520110+4"


def test_guest_crash_line() -> None:
    line = emulation.guest_crash((FIX / "guest-sigill.stderr").read_text())
    assert line == "qemu: uncaught target signal 4 (Illegal instruction)"
    assert emulation.guest_crash("all fine") is None


@pytest.mark.parametrize("entry, needle", [
    ({"name": "e", "kind": "emulated-aarch64"}, "needs a QEMU CPU model"),
    ({"name": "e", "kind": "emulated-aarch64", "cpu": "max", "arch": "x86_64"}, "is aarch64"),
    ({"name": "e", "kind": "emulated-aarch64", "cpu": "max", "executor": "slurm",
      "partition": "p", "cpus": 2}, "runs on this machine under QEMU"),
    ({"name": "e", "kind": "emulated-aarch64", "cpu": "max", "instance": "c7g.large"},
     "never reports throughput"),
    ({"name": "e", "cpu": "max"}, "only an emulated host"),
])
def test_emulated_host_config_errors(entry: dict, needle: str) -> None:
    with pytest.raises(LadderError, match=needle):
        hosts_from_config({"hosts": [entry]}, "x86_64")


def test_emulated_hosts_beside_the_local_one() -> None:
    hosts = hosts_from_config({"hosts": [
        {"name": "local"}, {"name": "emu_n1", "kind": "emulated-aarch64", "cpu": "neoverse-n1"},
        {"name": "emu_max", "kind": "emulated-aarch64", "cpu": "max"}]}, "x86_64")
    assert [h.emulated for h in hosts] == [False, True, True]
    assert hosts[2].arch == "aarch64" and "QEMU -cpu max" in hosts[2].where()


def test_missing_qemu_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LadderError, match="emulation.qemu: 'no-such-qemu' is not on PATH.*"
                                          "qemu-user-static"):
        emulation.qemu_path({"qemu": "no-such-qemu"})


def test_missing_cross_compiler_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LadderError, match="cross compiler aarch64-linux-gnu-gcc is not on PATH"):
        emulation.cross_compilers()


@needs_tools
def test_unknown_qemu_cpu_model_is_named() -> None:
    with pytest.raises(LadderError, match="cpu 'cortex-x9' is not a CPU model of .*neoverse-n1"):
        emulation.check_cpu_model(shutil.which("qemu-aarch64-static") or "qemu-aarch64-static",
                                  "cortex-x9", "emu")


@needs_tools
def test_guest_facts_come_from_the_guest(tmp_path: Path) -> None:
    settings = {"qemu": "qemu-aarch64-static",
                "cpu_models": {"neoverse-n1": {"march": "armv8.2-a+dotprod"},
                               "max": {"march": "armv8.2-a+dotprod+i8mm"}}}
    n1 = emulation.emulated_facts(host_name="n1", model="neoverse-n1", settings=settings,
                                  probe_dir=str(tmp_path))
    mx = emulation.emulated_facts(host_name="mx", model="max", settings=settings,
                                  probe_dir=str(tmp_path))
    assert n1["arch"] == mx["arch"] == "aarch64"
    assert "asimddp" in n1["cpu_flags"] and "i8mm" not in n1["cpu_flags"]
    assert {"i8mm", "sve", "sme"} <= set(mx["cpu_flags"])
    assert mx["emulated"]["sve_vl_bytes"] > 0 and n1["emulated"]["sve_vl_bytes"] == 0
    # not the x86 carrier's flags
    assert "avx2" not in n1["cpu_flags"] and n1["identity"] != mx["identity"]
    assert n1["native_target"]["resolved"] == "armv8.2-a+dotprod"


@needs_tools
def test_guest_crash_is_named_by_evidence(tmp_path: Path) -> None:
    """A real guest SIGILL through the evidence step: a named reason, the record written."""
    from ladder.measuring.evidence import collect
    from ladder.core.io import atomic_write_json

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    subprocess.run(["aarch64-linux-gnu-gcc", "-march=armv8.2-a+sve", "-static", "-O1", "-o",
                    str(bin_dir / "llama-completion"), str(DATA / "guest_sigill.c")], check=True)
    prov, meta = tmp_path / "prov.json", tmp_path / "model.json"
    atomic_write_json(str(prov), {"status": "ok", "bin_dir": str(bin_dir), "build_key": "k"})
    atomic_write_json(str(meta), {"quant": "Q4_0", "sha256": "x", "path": "/nonexistent.gguf"})
    rung = {"name": "repack", "runtime": {}, "launcher": emulation.launcher({}, "neoverse-n1"),
            "guest": {"arch": "aarch64", "cpu": "neoverse-n1", "cpu_flags": ["asimd"],
                      "timeout_s": 60}}
    out = tmp_path / "ev.json"
    rec = collect(rung=rung, markers=[], provenance=str(prov), model_meta=str(meta), prompt="x",
                  n_predict=1, threads=1, timeout_s=60, out_json=str(out),
                  raw_log=str(tmp_path / "ev.log"), env={}, common_args=[])
    assert rec["status"] == "crashed"
    assert rec["reason"].startswith("guest SIGILL under qemu -cpu neoverse-n1")
    assert "uncaught target signal 4" in rec["reason"]
    assert out.exists() and rec["ran_on"]["emulated"]["cpu"] == "neoverse-n1"


def test_advertised_kernel_per_quant_from_real_kleidiai_log(fixture_text) -> None:
    """KleidiAI under -cpu max advertises I8MM for Q4_0 and SME for Q8_0 (the SME thread cap
    case); the ledger compares each quant's kernels with its own advertised variant."""
    from ladder.core import parse
    from ladder.measuring.dispatch import advertised_kernel

    log = fixture_text("aarch64-qemu/aarch64-kleidiai-qemu_max-q8_0-t2.stderr.excerpt.log")
    ev = {"kleidiai_primary": parse.kleidiai_primary(log)}
    assert advertised_kernel(ev, "q4_0") == "I8MM"
    assert advertised_kernel(ev, "q8_0") == "SME"
    assert advertised_kernel(ev, "q4_k_m") is None
    assert "SME thread cap=1" in " ".join(parse.vendor_lines(log))


def test_translation_log_gives_kernel_presence() -> None:
    text = (FIX / "repack-max-q4_0-decode-t2.in_asm.log").read_text()
    entries = {0x5500520110: "gemv_q4_0", 0x5500522A64: "gemv_q8_0", 0x5500523CB0: "gemm_q4_0"}
    assert emulation.count_translations(text, entries) == {"gemv_q4_0": 1, "gemv_q8_0": 1}
    argv = emulation.translation_log_argv(["qemu"], [0x5500522A64], "/tmp/a.log")
    assert argv[1:3] == ["-d", "in_asm"] and argv[4] == "0x5500522a64+4"


def test_the_exec_log_filters_only_what_the_plain_run_translated() -> None:
    """Exec logging slows with every -dfilter range, so the instrumented run filters on the
    symbols its plain run translated; without a translation record, on every dispatch-level
    symbol (never an empty filter)."""
    from ladder.measuring.counting import exec_filter

    text = (FIX / "repack-max-q4_0-decode-t2.in_asm.log").read_text()
    entries = {0x5500520110: "gemv_q4_0", 0x5500522A64: "gemv_q8_0", 0x5500523CB0: "gemm_q4_0",
               0x55005100A0: "mul_mat", 0x550052AF40: "repack_forward"}
    seen = emulation.count_translations(text, entries)
    kept = exec_filter(entries, seen, {"mul_mat", "repack_forward"})
    assert kept == {0x5500520110: "gemv_q4_0", 0x5500522A64: "gemv_q8_0"}
    assert exec_filter(entries, {}, {"mul_mat", "repack_forward"}) == {
        0x55005100A0: "mul_mat", 0x550052AF40: "repack_forward"}
    assert exec_filter(entries, None, {"mul_mat"}) == {0x55005100A0: "mul_mat"}


def test_the_emulated_lane_is_one_overlay(default_config):
    """emulation.effective_settings is the only place the lane differs from a real host: the
    two are compared key by key, and nothing else in the plan branches on emulation."""
    from snakemake.utils import validate

    cfg = dict(default_config)
    validate(cfg, str(Path(__file__).resolve().parents[1] / "workflow" / "schemas" /
                      "config.schema.yaml"))
    real = emulation.effective_settings(cfg, emulated=False)
    emu = emulation.effective_settings(cfg, emulated=True)
    assert real["throughput"] and real["serving"] and real["bandwidth"]
    assert not (emu["throughput"] or emu["serving"] or emu["bandwidth"])
    assert real["dispatch"] == {k: v for k, v in cfg["dispatch"].items() if k != "must_dispatch"}
    assert emu["dispatch"]["method"] == "qemu-exec" and emu["dispatch"]["crosscheck"] is True
    assert emu["dispatch"]["workloads"] == cfg["emulation"]["dispatch"]["workloads"]
    assert emu["dispatch_threads"] == [1, 2] and real["dispatch_threads"] == [1, "all"]
    assert emu["dispatch_toggle"] is True and real["dispatch_toggle"] is False
    assert (emu["quality"]["ctx"], emu["quality"]["chunks"]) == (202, 1)
    assert emu["quality"]["timeout_s"] == 1800 and real["quality"]["timeout_s"] == 1200
    differing = {k for k in real if real[k] != emu[k]}
    assert differing == {"throughput", "serving", "bandwidth", "quality", "dispatch",
                         "dispatch_threads", "dispatch_toggle", "timeout_s", "hotspots",
                         "kernel_tests"}
    assert real["hotspots"] and real["kernel_tests"]  # perf would sample QEMU: off
    plan_src = (Path(__file__).resolve().parents[1] / "workflow" / "ladder" / "planning" /
                "plan.py").read_text()
    # settings are read from the overlay; only the launcher (qemu) and labels know the lane
    assert plan_src.count("self.emulated") <= 2


def _emulated_plan(default_config, cpu: str, cpu_flags: list[str], caps: list[int]):
    import copy

    from snakemake.utils import validate

    from ladder.core.machine import host_facts
    from ladder.planning.plan import Plan

    cfg = copy.deepcopy(default_config)
    cfg["hosts"] = [{"name": "emu", "kind": "emulated-aarch64", "cpu": cpu}]
    cfg["emulation"]["dispatch"]["sme_caps"] = caps
    validate(cfg, str(Path(__file__).resolve().parents[1] / "workflow" / "schemas" /
                      "config.schema.yaml"))
    (host,) = hosts_from_config(cfg, "x86_64")
    model = cfg["emulation"]["cpu_models"][cpu]
    facts = {**host_facts("emu"), "arch": "aarch64", "cores": 2, "cpu_flags": cpu_flags,
             "compiler": {"c": "aarch64-linux-gnu-gcc", "cxx": "aarch64-linux-gnu-g++"},
             "native_target": {"resolved": model["march"], "fingerprint": "f"},
             "emulated": {"cpu": cpu, "qemu_cpu": emulation.qemu_cpu_of(
                 cfg["emulation"]["cpu_models"], cpu), "march": model["march"],
                 "qemu": "/res/emulators/qemu-11/0123/qemu-aarch64"}}
    return Plan.from_config(cfg, host, facts)


def test_sme_caps_are_dispatch_rungs_of_the_kleidiai_binary_on_sme_guests(default_config):
    """The seed's caps auto, 0, 2, 4: the rung itself, the toggle (sme_off) and sme_cap2/4, the
    same build under GGML_KLEIDIAI_SME=<cap>; only where the guest has SME."""
    plan = _emulated_plan(default_config, "sme2", ["asimddp", "i8mm", "sve", "sme", "sme2"],
                          [2, 4])
    assert plan.dispatch_rungs() == ["floor", "native_repack", "kleidiai", "sme_off",
                                     "sme_cap2", "sme_cap4"]
    for name, cap in (("sme_off", "0"), ("sme_cap2", "2"), ("sme_cap4", "4")):
        unit = plan.dispatch_unit(name)
        assert unit["env"] == {"GGML_KLEIDIAI_SME": cap} and unit["variant_of"] == "kleidiai"
        assert unit["build_key"] == plan.build_keys["kleidiai"]
    # the launcher is the host's own emulator and QEMU's name of its model (sme2 is max)
    assert plan.guest()["launcher"] == ["/res/emulators/qemu-11/0123/qemu-aarch64", "-L",
                                        "/usr/aarch64-linux-gnu", "-cpu", "max"]
    # a guest without SME: KleidiAI never reads the cap, so no cap cells (the toggle stays)
    n2 = _emulated_plan(default_config, "neoverse-n2", ["asimddp", "i8mm", "sve", "sve2"],
                        [2, 4])
    assert n2.dispatch_rungs() == ["floor", "native_repack", "kleidiai", "sme_off"]


def test_emulator_models_are_checked_before_any_job(default_config):
    import copy

    from ladder.planning.config import start_up

    cfg = copy.deepcopy(default_config)
    cfg["hosts"] = [{"name": "local"}, {"name": "e", "kind": "emulated-aarch64", "cpu": "x"}]
    cfg["emulation"]["cpu_models"]["x"] = {"march": "armv8-a", "emulator": "qemu-12"}
    with pytest.raises(LadderError, match=r"emulation.cpu_models.x.emulator: 'qemu-12' is not"):
        start_up(cfg, Path(__file__).resolve().parents[1] / "workflow" / "schemas" /
                 "config.schema.yaml")


def test_an_emulated_host_runs_only_the_models_it_is_given(default_config):
    """emulation.models picks the models an emulated host runs (a cut model keeps the lane's
    minutes down); real hosts keep every model."""
    import copy

    cfg = copy.deepcopy(default_config)
    base = cfg["models"]["gemma3-270m"]
    cfg["models"]["small"] = {"kind": "cut", "from": "gemma3-270m", "vocab": 16384,
                              "sha256": "0" * 64, "quant": base["quant"], "derive": ["Q4_0"]}
    cfg["emulation"]["models"] = ["small"]
    plan = _emulated_plan(cfg, "sme2", ["asimddp", "i8mm", "sve", "sme", "sme2"], [])
    assert {m for m, _ in plan.model_quants()} == {"small"}
    assert plan.config["emulation"]["models"] == ["small"]
    assert emulation.effective_settings(plan.config, emulated=False)["models"] is None
