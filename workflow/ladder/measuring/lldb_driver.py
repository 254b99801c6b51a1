"""Run one command under lldb's Python API and report which probed addresses executed.

This file runs under the *system* Python that matches lldb's extension module (Debian:
``/usr/bin/python3`` for python3-lldb-16), not under the workflow's venv, so it imports only
the standard library and ``lldb`` (made importable by ``ladder.measuring.debugger.make_shim``).

    python3 lldb_driver.py SPEC.json OUT.json

SPEC: {"argv": [...], "env": {...}, "cwd": str|null, "timeout_s": float,
       "probes": [{"id": str, "module": "/abs/lib.so", "file_addr": int, "mode": "count"|"first"}]}

mode "count" counts every hit (every thread stops: exact, but ~1-2 ms per hit); mode "first"
records the first hit and disables the breakpoint (presence only, cheap at any thread count).
Breakpoints are set by *file address inside the named module*, never by name, so a PLT stub
of the same name is never hit. Hits are counted per thread stop reason, not with lldb's one-shot
or auto-continue options: those drop hits when several threads stop at once.

The inferior is always killed before this driver exits (normal end, timeout, error): a crashed
driver must not leave a ptrace-stopped process behind.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any


def main(spec_path: str, out_path: str) -> int:
    # this file's directory is the ladder package: keep it off the path so `lldb` is lldb's
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import lldb  # noqa: PLC0415 - only importable under the system python with the shim

    spec = json.load(open(spec_path))
    result: dict[str, Any] = {"format": "ladder-lldb/1", "lldb": None, "hits": {},
                              "unresolved": [], "exit": None, "signal": None, "crash": None,
                              "timed_out": False, "error": None, "wall_s": None}
    dbg = lldb.SBDebugger.Create()
    dbg.SetAsync(False)
    result["lldb"] = dbg.GetVersionString().splitlines()[0]
    process = None
    watchdog = None
    start = time.monotonic()
    deadline = start + float(spec.get("timeout_s", 600))
    try:
        target, process, main_bp = _launch(dbg, spec)
        result["pid"] = pid = process.GetProcessID()
        # The watchdog: a run that never stops again (no more hits) still ends at the deadline.
        def expire() -> None:
            result["timed_out"] = True
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
        watchdog.daemon = True
        watchdog.start()
        if process.GetState() == lldb.eStateStopped and _stopped_at(process, main_bp.GetID()):
            target.BreakpointDelete(main_bp.GetID())
        else:
            raise RuntimeError(f"the process did not stop at main (state {process.GetState()})")
        _run(process, _place_probes(target, spec, result), result, deadline, spec)
    except Exception as exc:  # reported, never raised: the caller still gets a result file
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if process is not None and process.IsValid() and process.GetState() not in (
                lldb.eStateExited, lldb.eStateInvalid):
            process.Kill()
        result["wall_s"] = round(time.monotonic() - start, 3)
        lldb.SBDebugger.Destroy(dbg)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, out_path)
    return 0


def _launch(dbg: Any, spec: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The target launched under lldb, stopping at ``main``."""
    import lldb  # noqa: PLC0415

    argv = spec["argv"]
    target = dbg.CreateTarget(argv[0])
    if not target.IsValid():
        raise RuntimeError(f"lldb cannot load {argv[0]}")
    main_bp = target.BreakpointCreateByName("main", target.GetExecutable().GetFilename())
    info = lldb.SBLaunchInfo(argv[1:])
    env = lldb.SBEnvironment()
    for k, v in {**os.environ, **spec.get("env", {})}.items():
        env.Set(k, v, True)
    info.SetEnvironment(env, False)
    if spec.get("cwd"):
        info.SetWorkingDirectory(spec["cwd"])
    for fd, path in ((0, "/dev/null"), (1, spec.get("stdout", "/dev/null")),
                     (2, spec.get("stderr", "/dev/null"))):
        info.AddOpenFileAction(fd, path, fd == 0, fd != 0)
    error = lldb.SBError()
    process = target.Launch(info, error)
    if not error.Success() or not process.IsValid():
        raise RuntimeError(f"lldb launch failed: {error.GetCString()}")
    return target, process, main_bp


def _place_probes(target: Any, spec: dict[str, Any],
                  result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Shared libraries linked at build time are mapped now: place breakpoints by address."""
    loaded = {os.path.realpath(m.GetFileSpec().fullpath): m for m in target.module_iter()
              if m.GetFileSpec().fullpath}
    by_bp: dict[int, dict[str, Any]] = {}
    for p in spec["probes"]:
        module = loaded.get(os.path.realpath(p["module"]))
        if module is None:
            result["unresolved"].append({"id": p["id"], "why": f"{p['module']} not loaded"})
            continue
        addr = module.ResolveFileAddress(int(p["file_addr"]))
        bp = target.BreakpointCreateBySBAddress(addr)
        if not bp.IsValid() or bp.GetNumLocations() == 0:
            result["unresolved"].append({"id": p["id"], "why": "no breakpoint location"})
            continue
        by_bp[bp.GetID()] = {**p, "bp": bp}
        result["hits"][p["id"]] = 0
    return by_bp


def _run(process: Any, by_bp: dict[int, dict[str, Any]], result: dict[str, Any],
         deadline: float, spec: dict[str, Any]) -> None:
    """Continue the process from stop to stop, counting hits, until it exits, crashes, or
    the deadline passes."""
    import lldb  # noqa: PLC0415

    while True:
        if time.monotonic() > deadline:
            result["timed_out"] = True
            result["error"] = f"timed out after {spec.get('timeout_s', 600)} s"
            return
        state = process.GetState()
        if state == lldb.eStateExited:
            result["exit"] = process.GetExitStatus()
            if result["timed_out"]:
                result["error"] = f"timed out after {spec.get('timeout_s', 600)} s"
            return
        if state in (lldb.eStateCrashed, lldb.eStateDetached, lldb.eStateInvalid):
            result["error"] = f"process state {state}"
            return
        if state == lldb.eStateStopped:
            signo = _handle_stop(process, by_bp, result)
            if signo is not None:
                return
        process.Continue()


def _stopped_at(process: Any, bp_id: int) -> bool:
    import lldb  # noqa: PLC0415

    for thread in process:
        if (thread.GetStopReason() == lldb.eStopReasonBreakpoint
                and thread.GetStopReasonDataAtIndex(0) == bp_id):
            return True
    return False


def _handle_stop(process: Any, by_bp: dict[int, dict[str, Any]], result: dict[str, Any]) -> int | None:
    """Count every thread stopped on one of our breakpoints; return a signal number on a crash."""
    import lldb  # noqa: PLC0415

    for thread in process:
        reason = thread.GetStopReason()
        if reason == lldb.eStopReasonBreakpoint:
            probe = by_bp.get(thread.GetStopReasonDataAtIndex(0))
            if probe is None:
                continue
            result["hits"][probe["id"]] += 1
            if probe["mode"] == "first" and probe["bp"].IsEnabled():
                probe["bp"].SetEnabled(False)
        elif reason in (lldb.eStopReasonSignal, lldb.eStopReasonException):
            signo = thread.GetStopReasonDataAtIndex(0) if reason == lldb.eStopReasonSignal else 0
            name = _signal_name(signo) if signo else None
            if signo and not process.GetUnixSignals().GetShouldStop(signo):
                continue
            frame = thread.GetFrameAtIndex(0)
            result["signal"] = name
            result["crash"] = {
                "signal": name, "description": thread.GetStopDescription(256),
                "symbol": frame.GetFunctionName() or frame.GetSymbol().GetName(),
                "module": frame.GetModule().GetFileSpec().GetFilename(),
                "pc": hex(frame.GetPC()),
            }
            return signo or -1
    return None


def _signal_name(signo: int) -> str:
    try:
        return signal.Signals(signo).name
    except ValueError:
        return f"signal {signo}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
