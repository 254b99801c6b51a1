"""The runner reports signals and timeouts, leaves nothing behind, and names the faulting symbol."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from ladder.core.run import diagnose_crash, run

CRASHER = r"""
#include <stdio.h>
__attribute__((noinline)) void ladder_test_faulting_kernel(void) { __builtin_trap(); }
int main(void) { fputs("about to fault\n", stderr); ladder_test_faulting_kernel(); return 0; }
"""


@pytest.fixture(scope="module")
def crasher(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("crasher")
    (d / "c.c").write_text(CRASHER)
    subprocess.run([cc, "-O1", "-g", "-o", str(d / "crasher"), str(d / "c.c")], check=True)
    return str(d / "crasher")


def test_signal_is_named(crasher):
    res = run([crasher])
    assert res.signal_name == "SIGILL"
    assert res.failure() == "killed by SIGILL"
    assert "about to fault" in res.stderr


def test_exit_code_and_last_line():
    res = run([sys.executable, "-c", "import sys; print('bad model', file=sys.stderr); sys.exit(3)"])
    assert res.failure() == "exit code 3: bad model"
    assert res.peak_rss_kib > 0


def test_timeout_kills_the_whole_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    t0 = time.monotonic()
    res = run([sys.executable, "-c", code], timeout_s=1.5)
    assert res.timed_out and res.failure().startswith("timed out")
    assert time.monotonic() - t0 < 10
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert not _alive(child)  # the grandchild went with its group


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie awaits only its reaper
    except FileNotFoundError:
        return False


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb not installed")
def test_gdb_names_the_faulting_symbol(crasher):
    diag = diagnose_crash([crasher], timeout_s=60)
    assert diag["signal"] == "SIGILL"
    assert diag["symbol"] == "ladder_test_faulting_kernel"
    assert "ud2" in (diag["instruction"] or "")


def test_no_gdb_is_said_plainly(monkeypatch, crasher):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    diag = diagnose_crash([crasher])
    assert diag["symbol"] is None and "gdb not installed" in diag["note"]


def test_frame_symbols_from_real_gdb_frames(fixture_text):
    """Frame #0 as gdb 13 printed it for the AMX rung's SIGILL on this VM (Q4_0 and Q8_0)."""
    from ladder.core.run import FRAME0, frame_symbol

    def frame0(name: str) -> str:
        bt = json.loads(fixture_text(f"x86_64/evidence-amx-{name}.crash.json"))["crash"]["backtrace"]
        return FRAME0.search(bt).group("frame")

    assert frame_symbol(frame0("q8_0")) == (
        "(anonymous namespace)::tinygemm_kernel_amx<block_q8_0, block_q8_0, float, 32, 0>")
    assert frame_symbol(frame0("q4_0")) == "ggml_backend_amx_mul_mat::{lambda}"
    assert frame_symbol("ladder_test_faulting_kernel () at c.c:2") == "ladder_test_faulting_kernel"
