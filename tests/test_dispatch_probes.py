"""The dispatch ledger's instruments, on a tiny real program (tests/data/tiny_*.c).

Each trap from ../shared/FACTS.md that the ledger handles has a test here: VEX-encoded first
instructions, PLT stubs, hits from several threads at once, Debian's python3-lldb packaging,
orphaned inferiors, stripped binaries, a family regex that matches nothing, and missing
debugger / uprobe permission. Counting tests need root (uprobes) or lldb; they skip otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ladder.measuring import debugger
from ladder.measuring.dispatch import choose_method, judge_cell
from ladder.core.errors import LadderError
from ladder.core.kernels import (
    Probe,
    SymbolsError,
    choose_probe_insn,
    file_offset,
    load_families,
    parse_objdump,
    plan_probes,
    read_symbols,
)

DATA = Path(__file__).resolve().parent / "data"
X86 = os.uname().machine == "x86_64"
pytestmark = pytest.mark.skipif(not X86 or shutil.which("gcc") is None,
                                reason="the tiny program uses x86 VEX code and gcc")

FAMILIES = """\
x86_64:
  library: libtiny.so
  families:
    vex: {kernels: '^vexfirst$'}
    plain: {dispatch: '^plain$'}
    ghost: {kernels: '^no_such_kernel_'}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tiny")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", d / "libtiny.so",
                    DATA / "tiny_kernels.c"], check=True)
    subprocess.run(["gcc", "-O1", "-pthread", "-o", d / "tiny_prog", DATA / "tiny_prog.c",
                    f"-L{d}", "-ltiny", "-Wl,-rpath,$ORIGIN"], check=True)
    (d / "families.yaml").write_text(FAMILIES)
    return {"dir": d, "lib": d / "libtiny.so", "prog": d / "tiny_prog",
            "families": d / "families.yaml"}


@pytest.fixture(scope="module")
def planned(tiny):
    fset = load_families("x86_64", tiny["families"])
    probes, summary = plan_probes(fset, tiny["lib"])
    return fset, {p.symbol: p for p in probes}, summary


def uprobes_usable() -> str | None:
    from ladder.measuring.uprobes import UprobeUnavailable, find_tracefs

    try:
        find_tracefs()
    except UprobeUnavailable as exc:
        return str(exc)
    return None


def lldb_usable() -> str | None:
    try:
        debugger.find_lldb()
    except debugger.LldbUnavailable as exc:
        return str(exc)
    return None


# --- placement (no privileges) ------------------------------------------------------------
OBJDUMP_GEMV = """\
0000000000139aa0 <ggml_gemv_q4_0_8x8_q8_0>:
  139aa0:\tc5 fa 6f 05 98 2e 03 00 \tvmovdqu 0x32e98(%rip),%xmm0        # 16c940 <iq2xxs_grid+0xb60>
  139aa8:\t41 55                \tpush   %r13
  139aaa:\t48 89 ca             \tmov    %rcx,%rdx
"""


def test_vex_first_instruction_is_skipped_on_real_objdump_text():
    # the entry of ggml_gemv_q4_0_8x8_q8_0 in the native x86 build (objdump -d -w, binutils 2.40)
    pl = choose_probe_insn(parse_objdump(OBJDUMP_GEMV))
    assert pl is not None and pl.addr == 0x139AA8 and pl.skipped == 1
    assert pl.instruction.startswith("push")


def test_no_probe_when_only_vex_before_the_first_branch():
    text = "  10:\tc5 f8 77             \tvzeroupper\n  13:\tc5 f8 77 \tvzeroupper\n" \
           "  16:\tc4 e2 7d 18 c0 \tvbroadcastss %xmm0,%ymm0\n"
    assert choose_probe_insn(parse_objdump(text)) is None


def test_tiny_library_placement(planned):
    _, probes, summary = planned
    vex = probes["vexfirst"]
    assert vex.skipped_vex == 1 and vex.addr == vex.entry + 4  # past `vpxor` (c5 f1 ef c9)
    assert probes["plain"].skipped_vex == 0 and probes["plain"].addr == probes["plain"].entry
    assert summary["families"]["ghost"]["kernels"]["matched"] == 0


def test_file_offsets_follow_load_segments():
    segs = [(0x0, 0x1000, 0x0), (0x13000, 0x2000, 0x12000)]
    assert file_offset(segs, 0x13010) == 0x12010
    with pytest.raises(SymbolsError, match="no LOAD segment"):
        file_offset(segs, 0x99999)


def test_plt_stubs_are_never_symbols(tiny):
    # the program calls plain() through its PLT; only the library's own definition is probed
    syms, _ = read_symbols(tiny["prog"])
    names = {s.name for s in syms}
    assert "plain" not in names and not any("@plt" in n for n in names)


def test_stripped_binary_is_a_clear_error(tiny, tmp_path):
    stripped = tmp_path / "tiny_prog.stripped"
    subprocess.run(["strip", "-o", stripped, tiny["prog"]], check=True)
    with pytest.raises(SymbolsError, match="stripped"):
        read_symbols(stripped)


def test_family_matching_nothing_is_no_symbols_not_not_executed(planned):
    fset, _, summary = planned
    v = judge_cell(expected=fset["ghost"], families=fset, resolution=summary["families"],
                   totals={"plain": {"dispatch": 10, "kernels": 0}}, advertised=True)
    assert v["verdict"] == "NO_SYMBOLS" and "cannot be told" in v["detail"]


def test_bad_family_regex_names_the_key(tmp_path):
    f = tmp_path / "fam.yaml"
    f.write_text("x86_64:\n  families:\n    broken: {dispatch: '^ggml_(('}\n")
    with pytest.raises(LadderError, match=r"x86_64\.families\.broken\.dispatch: bad regex"):
        load_families("x86_64", f)
    with pytest.raises(LadderError, match="no entry for arch 'riscv64'"):
        load_families("riscv64", f)


def test_shipped_families_load_for_both_arches():
    for arch, must in (("x86_64", {"generic", "repack", "amx", "llamafile", "tiled"}),
                       ("aarch64", {"generic", "repack", "kleidiai"})):
        fset = load_families(arch)
        assert must <= set(fset.families)
    assert set(load_families("aarch64")["kleidiai"].variants) == {
        "SME2", "SME", "SVE", "I8MM", "DOTPROD"}


# --- method availability -----------------------------------------------------------------
def test_no_debugger_installed_is_named(monkeypatch):
    with pytest.raises(debugger.LldbUnavailable, match="apt-get install -y lldb-16"):
        debugger.find_lldb(candidates=("no-such-lldb-binary",))
    monkeypatch.setenv("PATH", "/nonexistent")
    method, _, why = choose_method("lldb")
    assert method is None and "lldb unavailable" in why


def test_no_uprobe_access_is_named(tmp_path):
    from ladder.measuring.uprobes import UprobeUnavailable, find_tracefs

    with pytest.raises(UprobeUnavailable, match="tracefs not mounted"):
        find_tracefs([str(tmp_path)])


# --- counting on the real program ---------------------------------------------------------
def _spec_probes(probes, mode):
    return [{"id": p.id, "module": p.module, "file_addr": p.entry, "mode": mode}
            for p in probes.values()]


@pytest.mark.skipif(uprobes_usable() is not None, reason=f"uprobes: {uprobes_usable()}")
def test_uprobe_counts_are_exact_past_a_vex_entry(tiny, planned):
    from ladder.measuring.uprobes import UprobeSession

    _, probes, _ = planned
    naive = Probe("naive", "vex", "kernels", "vexfirst@entry", probes["vexfirst"].module,
                  probes["vexfirst"].entry, probes["vexfirst"].entry, probes["vexfirst"].offset - 4)
    with UprobeSession([*probes.values(), naive]) as s:
        before = s.snapshot()
        subprocess.run([tiny["prog"], "1000", "2"], check=True)
        hits = s.delta(before)
    by_sym = {p.symbol: hits[p.id] for p in probes.values() if p.id in hits}
    assert by_sym["vexfirst"] == 2000 and by_sym["plain"] == 2000  # no PLT double count
    # on this kernel a probe on the VEX instruction itself registers and never fires
    print(f"naive probe on the VEX entry instruction: {hits['naive']} hits of 2000")


@pytest.mark.skipif(lldb_usable() is not None, reason=f"lldb: {lldb_usable()}")
def test_debian_lldb_package_imports_through_the_shim(tmp_path):
    setup = debugger.find_lldb()
    shim = debugger.make_shim(setup, tmp_path / "shim")
    assert debugger.check_import(setup, shim).startswith("lldb version")


@pytest.mark.skipif(lldb_usable() is not None, reason=f"lldb: {lldb_usable()}")
def test_lldb_counts_every_hit_from_two_threads(tiny, planned):
    _, probes, _ = planned
    res = debugger.run_under_lldb(debugger.find_lldb(), [str(tiny["prog"]), "300", "2"],
                                  _spec_probes(probes, "count"), timeout_s=120)
    assert res["error"] is None and res["exit"] == 0, res
    hits = {p.symbol: res["hits"][p.id] for p in probes.values()}
    assert hits == {"vexfirst": 600, "plain": 600}


@pytest.mark.skipif(lldb_usable() is not None, reason=f"lldb: {lldb_usable()}")
def test_lldb_first_hit_presence_at_two_threads_runs_to_the_end(tiny, planned):
    _, probes, _ = planned
    res = debugger.run_under_lldb(debugger.find_lldb(), [str(tiny["prog"]), "5000", "2"],
                                  _spec_probes(probes, "first"), timeout_s=120)
    # several threads stop on one breakpoint at once: each counts, none is lost, the run ends
    assert res["exit"] == 0 and res["error"] is None
    assert all(n >= 1 for n in res["hits"].values())


@pytest.mark.skipif(uprobes_usable() is not None or lldb_usable() is not None,
                    reason="needs both uprobes and lldb")
def test_uprobe_and_lldb_counts_agree(tiny, planned):
    from ladder.measuring.uprobes import UprobeSession

    _, probes, _ = planned
    with UprobeSession(list(probes.values())) as s:
        before = s.snapshot()
        subprocess.run([tiny["prog"], "250", "2"], check=True)
        up = s.delta(before)
    res = debugger.run_under_lldb(debugger.find_lldb(), [str(tiny["prog"]), "250", "2"],
                                  _spec_probes(probes, "count"), timeout_s=120)
    assert {k: up[k] for k in res["hits"]} == res["hits"]


@pytest.mark.skipif(lldb_usable() is not None, reason=f"lldb: {lldb_usable()}")
def test_lldb_timeout_leaves_no_process(tiny, planned):
    _, probes, _ = planned
    start = time.monotonic()
    res = debugger.run_under_lldb(debugger.find_lldb(), [str(tiny["prog"]), "1", "1", "300"],
                                  _spec_probes(probes, "first"), timeout_s=3, grace_s=20)
    assert time.monotonic() - start < 25
    assert res["timed_out"] and "timed out" in (res["error"] or "")
    assert debugger.processes_with_token(res.get("token", "")) == []


@pytest.mark.skipif(lldb_usable() is not None, reason=f"lldb: {lldb_usable()}")
def test_inferior_of_a_killed_driver_is_reaped(tiny, planned, tmp_path):
    """A driver killed mid-run (SIGKILL) leaves its inferior behind; reap() finds and kills it."""
    _, probes, _ = planned
    setup = debugger.find_lldb()
    shim = debugger.make_shim(setup, tmp_path / "shim")
    token = "test" + os.urandom(6).hex()
    spec = {"argv": [str(tiny["prog"]), "1", "1", "300"], "timeout_s": 300,
            "env": {debugger.TOKEN_VAR: token}, "probes": _spec_probes(probes, "first")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(shim)}
    if setup.debugserver:
        env["LLDB_DEBUGSERVER_PATH"] = setup.debugserver
    drv = subprocess.Popen([setup.python, str(debugger.DRIVER), str(tmp_path / "spec.json"),
                            str(tmp_path / "out.json")], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not debugger.processes_with_token(token) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert debugger.processes_with_token(token), "the inferior never started"
        time.sleep(1.0)  # past main: running (sleeping) under the debugger
    finally:
        os.killpg(drv.pid, signal.SIGKILL)
        drv.wait()
    killed = debugger.reap(token)
    assert killed
    deadline = time.monotonic() + 10
    while debugger.processes_with_token(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert debugger.processes_with_token(token) == []


def test_driver_does_not_import_the_ladder_package():
    # the driver runs under the system python, beside a module that would shadow `lldb`
    src = (Path(debugger.DRIVER)).read_text()
    assert "from ladder" not in src and "import ladder" not in src
    assert sys.version_info >= (3, 11)
