"""A stale Snakemake lock is cleared; a lock a live run holds never is (ladder/core/locks.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from ladder.commands.unlock_command import main
from ladder.core.locks import clear_stale_lock, workdir_of


def test_workdir_from_the_command_line(tmp_path):
    assert workdir_of(["-n"], tmp_path) == tmp_path
    assert workdir_of(["-d", "w", "-n"], tmp_path) == tmp_path / "w"
    assert workdir_of(["--directory=w"], tmp_path) == tmp_path / "w"


def test_a_stale_lock_is_removed_and_said(tmp_path, capsys):
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("x")
    assert main(["-d", str(tmp_path)]) == 0
    assert not list(locks.glob("*.lock"))
    assert "stale lock (0.input.lock) was removed" in capsys.readouterr().err
    assert clear_stale_lock(tmp_path) == ("none", [], [])


def test_a_live_runs_lock_is_kept(tmp_path, capsys):
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("x")
    # a process named snakemake working in that directory stands for a live run
    fake = tmp_path / "bin" / "snakemake"
    fake.parent.mkdir()
    # one process, no child: a shell script's forked `sleep` kept the script's command line for
    # a moment after kill() under load, and looked like a live run
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    fake.chmod(0o755)
    proc = subprocess.Popen([str(fake)], cwd=tmp_path)
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    for _ in range(1000):  # until it has exec'd (the forked child is still python at first)
        if b"snakemake" in cmdline.read_bytes():
            break
        time.sleep(0.01)
    try:
        assert main(["--directory", str(tmp_path)]) == 1
        assert (locks / "0.output.lock").exists()
        assert f"pid {proc.pid}" in capsys.readouterr().err
    finally:
        proc.kill()
        proc.wait()
    assert main(["-d", str(tmp_path)]) == 0 and not (locks / "0.output.lock").exists()


def test_every_verb_of_the_script_is_a_command_module():
    """Issue 60, item 3: the ``ladder`` script's verbs (but run/test/setup/system/snakemake,
    the shell's own) each run ``ladder.commands.<verb>_command``, and every command module is
    one a verb runs."""
    import importlib
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = (root / "ladder").read_text()
    ran = set(re.findall(r"python -m ladder\.commands\.(\w+)", script))
    assert ran == {p.stem for p in (root / "workflow" / "ladder" / "commands").glob("*_command.py")}
    assert not re.findall(r"python -m ladder\.(?!commands\.)", script)
    for mod in ran:
        assert callable(importlib.import_module(f"ladder.commands.{mod}").main), mod
