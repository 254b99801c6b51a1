"""One llama-bench process for many emulated dispatch cells: the test order, the exec log cut
at each test's context, the gdbstub's per-test counts, and the fallback to one process per cell.

The exec-log lines here follow QEMU's real `-d exec` format (tests/fixtures/qemu-exec); the
emulated e2e module runs the whole path under QEMU."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from workflow_runner import requires

from ladder.measuring import counting
from ladder.preparing import emulation
from ladder.measuring.dispatch import one_process_groups
from ladder.core.kernels import Probe
from ladder.core.run import RunResult

DATA = Path(__file__).parent / "data"
MARKER, MUL, GEMV = 0x5500100000, 0x5500200000, 0x5500300000


def trace(cpu: int, pc: int, name: str = "sym") -> str:
    return f"Trace {cpu}: 0x7fd63835fdc0 [0000000001009b31/{pc:016x}/00000001/00080200] {name}\n"


def test_bench_order_is_llama_benchs():
    # tools/llama-bench: threads outside, prompt tests, then generation tests; 0 runs none
    assert emulation.bench_order([16], [2], [1, 2]) == [(16, 0, 1), (0, 2, 1), (16, 0, 2),
                                                         (0, 2, 2)]
    assert emulation.bench_order([0], [2, 4], [1]) == [(0, 2, 1), (0, 4, 1)]


def test_ran_order_reads_llama_benchs_json(fixture_text):
    text = fixture_text("aarch64-qemu/aarch64-kleidiai-qemu_max-q4_0-t1.json")
    assert emulation.ran_order(text) == [(16, 0, 1), (0, 2, 1)]
    assert emulation.ran_order("") is None and emulation.ran_order("[{}]") is None


def test_the_log_is_cut_at_each_test_and_the_load_dropped():
    log = ("start_code  0x0000005500000000\n" + trace(0, MUL)  # before any test: the load
           + trace(0, MARKER) + trace(0, MUL) + trace(0, GEMV) * 3
           + trace(0, MARKER) + trace(0, MUL) * 2 + trace(1, MUL) * 2)
    pieces = emulation.split_at_marker(log, MARKER)
    assert len(pieces) == 2
    entries = {MUL: "p0", GEMV: "p1"}
    assert emulation.count_entries(pieces[0], entries) == ({"p0": 1, "p1": 3},
                                                          {"p0": [0], "p1": [0]})
    assert emulation.thread_counts(pieces[1], entries) == {"p0": {0: 2, 1: 2}}
    assert emulation.split_at_marker(trace(0, MUL), MARKER) == []


GDB_TABLE = """Num     Type           Disp Enb Address            What
1       breakpoint     keep y   0x{mul:016x} <ggml_compute_forward_mul_mat>
{mul_hit}	Will ignore next 1999999990 crossings of breakpoint.
2       breakpoint     keep y   0x{marker:016x} <llama_init_from_model>
	breakpoint already hit {tests} time
        silent
        echo ladder-segment\\n
        info breakpoints
        continue
"""


def table(mul_hits: int, tests: int) -> str:
    hit = f"\tbreakpoint already hit {mul_hits} times\n" if mul_hits else ""
    return GDB_TABLE.format(mul=MUL, marker=MARKER, mul_hit=hit, tests=tests)


def test_gdb_counts_per_test_between_marker_stops():
    out = ("ladder-segment\n" + table(0, 1) + "ladder-segment\n" + table(127, 2)
           + "[Inferior 1 (process 9) exited normally]\nladder-end\n" + table(381, 2))
    assert emulation.segment_counts(out, {MUL: "p0"}) == [{"p0": 127}, {"p0": 254}]
    assert emulation.segment_counts("ladder-end\n" + table(3, 0), {MUL: "p0"}) == []


def test_the_gdb_script_prints_counts_at_each_test(tmp_path):
    text = emulation.gdb_script("/b/llama-bench", tmp_path / "s", [MUL], MARKER, "/sys")
    lines = text.splitlines()
    assert lines[lines.index(f"break *{MARKER:#x}") + 1:][:6] == [
        "commands", "silent", "echo ladder-segment\\n", "info breakpoints", "continue", "end"]
    assert lines[-3:] == ["continue", "echo ladder-end\\n", "info breakpoints"]
    assert "commands" not in emulation.gdb_script("/b/x", tmp_path / "s", [MUL], None, "/sys")


def cells(workloads: dict, threads=(1, 2), quant="q4_0", rung=None):
    r = rung or {"name": "kleidiai", "env": {}}
    return [(quant, w, spec, t, r) for w, spec in workloads.items() for t in threads]


def test_single_phase_workloads_share_one_process():
    rung = {"name": "kleidiai", "env": {}}
    spec = cells({"decode_short": {"n_gen": 2}, "prefill_short": {"n_prompt": 16}}, rung=rung)
    [g] = one_process_groups(spec, rung, Path("/b"), {"q4_0": "/m.gguf"}, verbose=True)
    assert list(g.tests.values()) == [(16, 0, 1), (0, 2, 1), (16, 0, 2), (0, 2, 2)]
    assert list(g.tests)[1] == ("kleidiai", "q4_0", "decode_short", 1)
    assert g.argv[g.argv.index("-p") + 1] == "16" and g.argv[g.argv.index("-t") + 1] == "1,2"
    assert "-v" in g.argv
    assert g.checked == [("kleidiai", "q4_0", "prefill_short", 1),
                         ("kleidiai", "q4_0", "decode_short", 1)]
    assert g.check_argv[g.check_argv.index("-t") + 1] == "1"
    # a toggle of the same binary: its own process, its env, no gdbstub check
    off = {"name": "sme_off", "env": {"GGML_KLEIDIAI_SME": "0"}, "variant_of": "kleidiai"}
    [g2] = one_process_groups(cells({"d": {"n_gen": 2}, "p": {"n_prompt": 16}}, rung=off),
                              rung, Path("/b"), {"q4_0": "/m"}, verbose=False)
    assert g2.env == {"GGML_KLEIDIAI_SME": "0"} and g2.checked == []
    assert g2.stem == "sme_off.q4_0.one-process"


@pytest.mark.parametrize("workloads", [
    {"mixed": {"n_prompt": 16, "n_gen": 2}, "decode": {"n_gen": 2}},  # a mixed workload
    {"a": {"n_gen": 2}, "b": {"n_gen": 2}},  # two workloads of one length
])
def test_cells_that_cannot_share_run_alone(workloads):
    rung = {"name": "floor", "env": {}}
    assert one_process_groups(cells(workloads, rung=rung), rung, Path("/b"), {"q4_0": "/m"},
                              False) == []
    assert one_process_groups(cells({"d": {"n_gen": 2}}, threads=(1,), rung=rung), rung,
                              Path("/b"), {"q4_0": "/m"}, False) == []  # one cell


class FakeQemu(counting.QemuExecMethod):
    """The method with its runs replaced: the exec log is written as QEMU would."""

    def __init__(self, log: str, stdout: str, returncode: int = 0):
        self.probes = [Probe("p0", "generic", "dispatch", "ggml_compute_forward_mul_mat", "/b",
                             MUL, MUL, None),
                       Probe("p1", "repack", "kernels", "ggml_gemv_q4_0_4x8_q8_0", "/b", GEMV,
                             GEMV, None)]
        self.launcher, self.bias, self.start_code = ["qemu"], 0, 0x5500000000
        self.entries = {MUL: "p0", GEMV: "p1"}
        self.marker, self.crosscheck, self.work_dir = MARKER, False, Path("/nonexistent")
        self.translated = {("kleidiai", "q4_0"): {"p0": 1, "p1": 1}}
        self.session_info = {}
        self.log, self.stdout, self.returncode = log, stdout, returncode


@pytest.fixture
def fake_run(monkeypatch):
    def install(method: FakeQemu):
        def run(argv, env, timeout_s):
            Path(argv[argv.index("-D") + 1]).write_text(method.log)
            assert f"{MARKER:#x}+4" in argv[argv.index("-dfilter") + 1]
            return RunResult(argv=list(argv), returncode=method.returncode,
                             stdout=method.stdout, stderr="", wall_s=10.0, peak_rss_kib=0)
        monkeypatch.setattr(counting, "run", run)
    return install


def bench_json(order) -> str:
    return json.dumps([{"n_prompt": p, "n_gen": n, "n_threads": t} for p, n, t in order])


def test_one_exec_run_gives_each_cell_its_own_counts(tmp_path, fake_run):
    order = [(16, 0, 1), (0, 2, 1)]
    log = ("start_code  0x0000005500000000\n" + trace(0, MARKER) + trace(0, MUL) * 5
           + trace(0, GEMV) * 4 + trace(0, MARKER) + trace(0, MUL) * 2 + trace(0, GEMV))
    m = FakeQemu(log, bench_json(order))
    fake_run(m)
    tests = {("kleidiai", "q4_0", "prefill", 1): order[0], ("kleidiai", "q4_0", "decode", 1): order[1]}
    out = m.count_tests(["llama-bench"], {}, tmp_path / "s", ("kleidiai", "q4_0"), tests, 60)
    pre, dec = out[("kleidiai", "q4_0", "prefill", 1)], out[("kleidiai", "q4_0", "decode", 1)]
    assert pre.hits == {"p0": 5, "p1": 4} and dec.hits == {"p0": 2, "p1": 1}
    assert dec.l3["one_process"]["test"] == 2 and dec.l3["one_process"]["tests"] == 2
    assert dec.l3["qemu_exec_log"] == f"{tmp_path / 's'}.qemu-exec.log.gz"
    assert dec.l3["exec_filter"] == {"symbols": 2, "of": 2}  # the marker is no probe


@pytest.mark.parametrize("returncode,stdout_order,pieces", [
    (-4, [(16, 0, 1), (0, 2, 1)], 2),  # the guest died (SIGILL)
    (0, [(0, 2, 1), (16, 0, 1)], 2),  # another order than planned
    (0, [(16, 0, 1), (0, 2, 1)], 1),  # one test's context never logged
])
def test_a_shared_run_that_cannot_be_cut_returns_none(tmp_path, fake_run, returncode,
                                                      stdout_order, pieces):
    log = "start_code  0x0000005500000000\n" + (trace(0, MARKER) + trace(0, MUL)) * pieces
    m = FakeQemu(log, bench_json(stdout_order), returncode)
    fake_run(m)
    tests = {"a": (16, 0, 1), "b": (0, 2, 1)}
    assert m.count_tests(["llama-bench"], {}, tmp_path / "s", ("kleidiai", "q4_0"), tests,
                         60) is None


@requires("LADDER_REQUIRE_EMULATION",
          [t for t in ("qemu-aarch64-static", "aarch64-linux-gnu-gcc", "gdb-multiarch")
           if not shutil.which(t)], "the real-guest counting test")
def test_both_methods_cut_a_real_guest_at_each_test(tmp_path):
    """A real aarch64 guest under QEMU: the exec log and the gdbstub give each test's calls."""
    from ladder.core.kernels import read_symbols

    prog = tmp_path / "guest"
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", "-static", "-o", str(prog),
                    str(DATA / "guest_tests.c")], check=True)
    prefix = emulation.launcher({}, "max")
    bias = emulation.guest_load_bias(prefix, str(prog), str(tmp_path))
    marker = counting.test_marker(str(prog), bias)
    kernel = next(s.addr for s in read_symbols(prog)[0] if "kernel" in (s.name, *s.aliases))
    kernel += bias
    log = tmp_path / "exec.log"
    subprocess.run(emulation.exec_log_argv(prefix, [marker, kernel], str(log)) + [str(prog)],
                   check=True)
    pieces = emulation.split_at_marker(log.read_text(), marker)
    assert [emulation.count_entries(p, {kernel: "k"})[0] for p in pieces] == [{"k": 3}, {"k": 5}]
    gdb = emulation.gdbstub_counts(prefix, [str(prog)], {kernel: "k"}, str(tmp_path), {}, 60,
                                   marker=marker)
    assert gdb["exited_normally"], gdb
    assert gdb["segments"] == [{"k": 3}, {"k": 5}] and gdb["counts"] == {"k": 8}


def test_a_real_one_process_log_cuts_into_its_four_cells():
    """The floor rung's exec log from the emulated lane (fixtures/qemu-exec/README.md): four
    tests in llama-bench's order, each with its own generic mul_mat count."""
    import gzip

    fix = Path(__file__).parent / "fixtures" / "qemu-exec"
    text = gzip.decompress((fix / "floor-max-q4_0-one-process.exec.log.gz").read_bytes()).decode()
    names = {}
    for line in text.splitlines():
        if line.startswith("Trace"):
            m = emulation.TRACE.match(line)
            names[line.rsplit(" ", 1)[-1]] = int(m.group("pc"), 16)
    marker, mul = names["llama_init_from_model"], names["ggml_compute_forward_mul_mat"]
    assert emulation.start_code(text) == 0x5500000000
    pieces = emulation.split_at_marker(text, marker)
    order = emulation.ran_order((fix / "floor-max-q4_0-one-process.bench.json").read_text())
    assert order == emulation.bench_order([16], [2], [1, 2])
    counts = [emulation.count_entries(p, {mul: "mul_mat"})[0]["mul_mat"] for p in pieces]
    # prefill 16 at 1 thread: 18 layers x 7 matmuls + the output head = 127 calls per thread;
    # decode 2 tokens: twice that; at 2 threads every call is entered by both threads
    assert counts == [127, 254, 254, 508]
    threads = [sorted(emulation.count_entries(p, {mul: "m"})[1]["m"]) for p in pieces]
    assert threads == [[0], [0], [0, 1], [0, 1]]
