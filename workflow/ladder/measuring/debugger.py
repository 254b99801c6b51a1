"""Run a command under lldb (``ladder/lldb_driver.py``) from the workflow's own Python.

Debian's python3-lldb-16 ships a package directory whose ``_lldb`` extension link dangles
(``../../../liblldb.so``; only ``liblldb.so.1`` exists) and a second one without
``__init__.py``. ``make_shim`` builds a small package of symlinks that imports; the driver runs
under the system Python lldb was built for, with ``LLDB_DEBUGSERVER_PATH`` set. Every traced
process carries a unique token in its environment, so whatever happens to the driver (timeout,
crash, SIGKILL) the inferior is found and killed: no ptrace-stopped process is left behind.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core import outcome
from ladder.core.errors import LadderError
from ladder.core.run import run

DRIVER = Path(__file__).resolve().parent / "lldb_driver.py"
TOKEN_VAR = "LADDER_TRACE_TOKEN"


class LldbUnavailable(LadderError):
    pass


@dataclass(frozen=True)
class LldbSetup:
    lldb: str
    python: str
    package_dir: Path  # the directory holding lldb/__init__.py
    library: Path  # liblldb shared object the extension module must load
    debugserver: str | None


def find_lldb(candidates: Sequence[str] = ("lldb-16", "lldb", "lldb-15", "lldb-14")) -> LldbSetup:
    for name in candidates:
        exe = shutil.which(name)
        if exe is None:
            continue
        res = subprocess.run([exe, "-P"], capture_output=True, text=True, check=False)
        pkg_root = Path(res.stdout.strip()) if res.returncode == 0 else None
        if pkg_root is None or not (pkg_root / "lldb" / "__init__.py").is_file():
            continue
        real = Path(os.path.realpath(exe))
        prefix = real.parent.parent  # /usr/lib/llvm-16
        libs = sorted(glob.glob(str(prefix / "lib" / "liblldb.so*")) +
                      glob.glob(f"/usr/lib/*-linux-gnu/liblldb-{prefix.name.split('-')[-1]}.so*"))
        libs = [p for p in libs if os.path.exists(p)]
        if not libs:
            continue
        ver = pkg_root.parent.name  # python3.11: the Python lldb's extension was built for
        python = next((p for p in (f"/usr/bin/{ver}", shutil.which(ver) or "") if p and
                       os.path.exists(p)), "/usr/bin/python3")
        server = next((s for s in (str(prefix / "bin" / "lldb-server"),
                                   shutil.which("lldb-server") or "") if s and os.path.exists(s)),
                      None)
        return LldbSetup(exe, python, pkg_root / "lldb", Path(libs[-1]), server)
    raise LldbUnavailable(
        "lldb unavailable: no lldb with a Python package found (as root: apt-get install -y "
        "lldb-16 python3-lldb-16)")


def make_shim(setup: LldbSetup, into: Path) -> Path:
    """A package dir ``into/lldb`` of symlinks with a working ``_lldb`` extension module."""
    pkg = into / "lldb"
    pkg.mkdir(parents=True, exist_ok=True)
    for entry in setup.package_dir.iterdir():
        if entry.name.startswith("_lldb"):
            continue
        link = pkg / entry.name
        if not link.exists():
            link.symlink_to(entry)
    tag = setup.python.rsplit("python", 1)[-1].replace(".", "") or "3"
    ext = pkg / f"_lldb.cpython-{tag}-{os.uname().machine}-linux-gnu.so"
    if ext.is_symlink() or ext.exists():
        ext.unlink()
    ext.symlink_to(setup.library)
    return into


def check_import(setup: LldbSetup, shim_root: Path) -> str:
    res = subprocess.run([setup.python, "-c", "import lldb; print(lldb.SBDebugger.GetVersionString())"],
                         capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": str(shim_root)})
    if res.returncode != 0:
        raise LldbUnavailable(f"lldb's Python module does not import under {setup.python}: "
                              f"{res.stderr.strip().splitlines()[-1:]}")
    return res.stdout.strip().splitlines()[0]


def processes_with_token(token: str) -> list[int]:
    found = []
    needle = f"{TOKEN_VAR}={token}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def reap(token: str) -> list[int]:
    """SIGKILL every process carrying ``token`` (a traced inferior whose tracer died)."""
    pids = processes_with_token(token)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def run_under_lldb(setup: LldbSetup, argv: Sequence[str], probes: list[dict[str, Any]],
                   env: Mapping[str, str] | None = None, timeout_s: float = 600,
                   stderr_path: str | None = None, grace_s: float = 60) -> dict[str, Any]:
    """Run ``argv`` under the driver; the driver's JSON result plus ``orphans_killed``."""
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="ladder-lldb-") as tmp:
        shim = make_shim(setup, Path(tmp) / "shim")
        spec = {"argv": list(argv), "env": {**(env or {}), TOKEN_VAR: token},
                "timeout_s": timeout_s, "probes": probes,
                "stderr": stderr_path or "/dev/null"}
        spec_path = Path(tmp) / "spec.json"
        out_path = Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec))
        drv_env = {"PYTHONPATH": str(shim), "PYTHONNOUSERSITE": "1"}
        if setup.debugserver:
            drv_env["LLDB_DEBUGSERVER_PATH"] = setup.debugserver
        try:
            res = run([setup.python, str(DRIVER), str(spec_path), str(out_path)], env=drv_env,
                      timeout_s=timeout_s + grace_s)
        finally:
            orphans = reap(token)
        if out_path.exists():
            result = json.loads(out_path.read_text())
        else:
            result = {"error": f"lldb driver produced no result ({res.failure() or 'no output'}): "
                               f"{res.stderr.strip()[-500:]}", "hits": {}}
        if result.get("timed_out"):  # the inferior's time ran out: this job runs again next run
            outcome.note(f"{Path(argv[0]).name} under lldb: timed out after {timeout_s:g} s")
        result["driver_wall_s"] = round(res.wall_s, 3)
        result["token"] = token
        result["orphans_killed"] = orphans
        return result
