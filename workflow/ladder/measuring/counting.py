"""How a dispatch cell's kernel calls are counted: one small interface, one class per method.

- ``uprobe``: Linux uprobes on every family symbol, registered once per sweep (exact counts of
  dispatch-level symbols and kernels, any thread count).
- ``lldb`` / ``lldb-presence``: breakpoints through lldb's Python API (dispatch-level symbols
  counted, kernels first hit only; or first hits only).
- ``qemu-exec``: a guest under qemu-user, counted by QEMU's own exec log (the dispatch-level
  symbols and kernels its plain run translated, per guest thread), 1-thread cells checked
  again through QEMU's gdbstub (on every dispatch-level symbol).

Each method runs the uninstrumented ``plain`` run of a cell (the baseline; under qemu it also
logs which symbols were translated) and the instrumented ``count`` run, and returns what it
saw as a :class:`Counted`. The cell logic (``ladder.measuring.dispatch``) only judges.
"""

from __future__ import annotations

import contextlib
import gzip
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ladder.core.io import atomic_write_text
from ladder.core.kernels import Probe
from ladder.core.run import RunResult, run


@dataclass
class Counted:
    """What one instrumented run saw."""

    hits: dict[str, int]
    wall_s: float
    failure: str | None
    crash: dict[str, Any] | None = None
    per_thread: dict[str, dict[int, int]] = field(default_factory=dict)
    l3: dict[str, Any] = field(default_factory=dict)  # method-specific evidence for L3


def read_and_compress(path: str) -> str:
    """A QEMU log's text; the raw log is kept, gzipped beside it ("" if qemu wrote none)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return ""
    with gzip.open(path + ".gz", "wb") as dst:
        dst.write(data)
    os.remove(path)
    return data.decode(errors="replace")


def _keep(stem: Path, res: RunResult, kind: str) -> None:
    atomic_write_text(f"{stem}.{kind}.stderr", res.stderr)
    atomic_write_text(f"{stem}.{kind}.json", res.stdout)


class Method:
    """The interface: a name, which kinds it counts exactly, a session around the sweep, the
    plain run and the counted run of one cell."""

    name = "?"
    exact_kinds: tuple[str, ...] = ()
    launcher: list[str] = []

    def __init__(self, probes: Sequence[Probe]):
        self.probes = list(probes)
        self.session_info: dict[str, Any] = {}

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        yield

    def plain(self, tool_argv: Sequence[str], env: Mapping[str, str], stem: Path,
              key: Any, timeout: float) -> RunResult:
        """The uninstrumented run. ``tool_argv`` is the tool's own command line: a method
        adds its launcher (qemu) itself, in plain and in counted runs alike."""
        res = run(self.launcher + list(tool_argv), env=dict(env), timeout_s=timeout)
        _keep(stem, res, "plain")
        return res

    def count(self, tool_argv: Sequence[str], env: Mapping[str, str], stem: Path, key: Any,
              timeout: float, crosscheck: bool) -> Counted:
        raise NotImplementedError


class UprobeMethod(Method):
    name = "uprobe"
    exact_kinds = ("dispatch", "kernels")

    def __init__(self, probes: Sequence[Probe], tracefs: Any):
        super().__init__(probes)
        self.tracefs = tracefs
        self._session: Any = None

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        from ladder.measuring.uprobes import UprobeSession

        # registered once: probes fire in every process mapping the library, so the plain runs
        # come before this session
        with UprobeSession(self.probes, self.tracefs) as s:
            self._session = s
            self.session_info.update(rejected=s.rejected, setup_s=round(s.setup_s, 3))
            yield
        self.session_info.update(teardown_s=round(s.teardown_s, 3),
                                 probes_registered=len(s.event_of))

    def count(self, tool_argv, env, stem, key, timeout, crosscheck):
        before = self._session.snapshot()
        inst = run(self.launcher + list(tool_argv), env=dict(env), timeout_s=timeout)
        hits = self._session.delta(before)
        _keep(stem, inst, "probed")
        return Counted(hits=hits, wall_s=inst.wall_s, failure=inst.failure(),
                       crash={"signal": inst.signal_name} if inst.signal_name else None)


class LldbMethod(Method):
    exact_kinds: tuple[str, ...] = ("dispatch",)

    def __init__(self, probes: Sequence[Probe], setup: Any, presence_only: bool = False):
        super().__init__(probes)
        self.setup = setup
        self.name = "lldb-presence" if presence_only else "lldb"
        if presence_only:
            self.exact_kinds = ()

    def count(self, tool_argv, env, stem, key, timeout, crosscheck):
        from ladder.measuring.debugger import run_under_lldb

        mode_of = {"dispatch": "count", "kernels": "first"} if self.name == "lldb" else {}
        spec = [{"id": p.id, "module": p.module, "file_addr": p.entry,
                 "mode": mode_of.get(p.kind, "first")} for p in self.probes]
        res = run_under_lldb(self.setup, self.launcher + list(tool_argv), spec, env=dict(env),
                             timeout_s=timeout,
                             stderr_path=f"{stem}.probed.stderr")
        failure = res.get("error") or (f"killed by {res['signal']}" if res.get("signal")
                                       else None)
        return Counted(hits={k: int(v) for k, v in (res.get("hits") or {}).items()},
                       wall_s=float(res.get("driver_wall_s") or 0.0), failure=failure,
                       crash=dict(res["crash"]) if res.get("crash") else None,
                       l3={"lldb": {k: res.get(k) for k in ("lldb", "unresolved",
                                                            "orphans_killed", "error")}})


class QemuExecMethod(Method):
    name = "qemu-exec"
    exact_kinds = ("dispatch", "kernels")

    def __init__(self, probes: Sequence[Probe], launcher: Sequence[str], tool: str,
                 work_dir: str, crosscheck: bool):
        from ladder.preparing.emulation import exec_segment_vaddr, guest_load_bias

        super().__init__(probes)
        self.launcher = list(launcher)
        self.bias = guest_load_bias(self.launcher, tool, work_dir)
        self.start_code = self.bias + exec_segment_vaddr(tool)
        self.crosscheck = crosscheck
        self.work_dir = Path(work_dir)
        self.entries = {p.entry + self.bias: p.id for p in self.probes}
        self.marker = test_marker(tool, self.bias)
        self.translated: dict[Any, dict[str, int]] = {}
        self.session_info = {
            "load_bias": hex(self.bias), "launcher": list(self.launcher),
            "note": "every symbol (dispatch-level and kernels) first seen translated (-d in_asm) "
                    "in the plain run; those entered are then counted by QEMU -d exec,nochain "
                    "-dfilter on their entries (exact calls per guest thread); a symbol never "
                    "translated never ran: 0 calls"}

    def plain(self, tool_argv, env, stem, key, timeout):
        from ladder.preparing.emulation import count_translations, translation_log_argv

        asm_log = f"{stem}.qemu-in_asm.log"
        res = run(translation_log_argv(self.launcher, self.entries, asm_log)
                  + list(tool_argv), env=dict(env), timeout_s=timeout)
        self.translated[key] = count_translations(read_and_compress(asm_log), self.entries)
        _keep(stem, res, "plain")
        return res

    def _exec_run(self, tool_argv: Sequence[str], env: Mapping[str, str], stem: Path,
                  entries: Mapping[int, str], timeout: float
                  ) -> tuple[RunResult, str, str | None]:
        """One exec-logged run: its result, its log's text, and why its counts cannot be used
        (a failed run, or a load address other than the probes assume)."""
        from ladder.preparing.emulation import exec_log_argv, start_code

        exec_log = f"{stem}.qemu-exec.log"
        inst = run(exec_log_argv(self.launcher, entries, exec_log) + list(tool_argv),
                   env=dict(env), timeout_s=timeout)
        text = read_and_compress(exec_log)
        failure = inst.failure()
        logged = start_code(text)
        if failure is None and logged != self.start_code:
            failure = (f"qemu logged start_code {logged and hex(logged)}, expected "
                       f"{self.start_code:#x}: the probe addresses would be wrong")
        _keep(stem, inst, "probed")
        return inst, text, failure

    def _filter(self, key: Any) -> dict[int, str]:
        # only the symbols the plain run translated (entered): exec logging slows with every
        # -dfilter range (KleidiAI's 20 dispatch symbols and 6 kernels: 130 s a cell, against
        # 28 s plain), and an entry QEMU never translated never ran. With no translation
        # record (a failed plain run), every dispatch-level symbol.
        return exec_filter(self.entries, self.translated.get(key),
                           {p.id for p in self.probes if p.kind == "dispatch"})

    def _seen(self, text: str, entries: Mapping[int, str], stem: Path) -> tuple[
            dict[str, int], dict[str, Any], dict[str, dict[int, int]]]:
        """Hits, the L3 record and the per-thread counts of one exec log (or one test's piece)."""
        from ladder.preparing.emulation import count_entries, thread_counts

        hits, cpus = count_entries(text, entries)
        # which guest threads (QEMU vCPU indexes) entered each family: a thread cap shows here
        fam_threads: dict[str, set[int]] = {}
        for p in self.probes:
            for cpu in cpus.get(p.id, []):
                fam_threads.setdefault(p.family, set()).add(cpu)
        l3: dict[str, Any] = {
            "guest_threads": {f: sorted(c) for f, c in sorted(fam_threads.items())},
            "qemu_exec_log": f"{stem}.qemu-exec.log.gz",
            "qemu_in_asm_log": f"{stem}.qemu-in_asm.log.gz",
            "exec_filter": {"symbols": len(entries), "of": len(self.entries)},
            "crosscheck": None}
        return hits, l3, thread_counts(text, entries)

    def count(self, tool_argv, env, stem, key, timeout, crosscheck):
        from ladder.preparing.emulation import guest_crash

        entries = self._filter(key)
        inst, text, failure = self._exec_run(tool_argv, env, stem, entries, timeout)
        hits, l3, per_thread = self._seen(text, entries, stem)
        crash = ({"signal": inst.signal_name, "symbol": None, "method": "qemu",
                  "note": guest_crash(inst.stderr)} if inst.signal_name else None)
        if self.crosscheck and crosscheck and failure is None:
            l3["crosscheck"] = self._crosscheck(tool_argv, hits, env, timeout)
        return Counted(hits=hits, wall_s=inst.wall_s, failure=failure, crash=crash,
                       per_thread=per_thread, l3=l3)

    def count_tests(self, tool_argv: Sequence[str], env: Mapping[str, str], stem: Path,
                    key: Any, tests: Mapping[Any, tuple[int, int, int]], timeout: float,
                    checked: Sequence[Any] = (), check_argv: Sequence[str] = ()
                    ) -> dict[Any, Counted] | None:
        """The cells of one many-test llama-bench process (``tests``: cell key -> its
        (n_prompt, n_gen, threads), in the order llama-bench runs them), counted by one
        exec-logged run cut at each test's context: a Counted per cell. The ``checked`` cells
        (1 guest thread) are counted again, per test, by one gdbstub run of ``check_argv``.
        None when the run failed or crashed, or did not show one piece per test in that order:
        its cells are then run one by one (the logs stay beside them)."""
        from ladder.preparing.emulation import ran_order, split_at_marker

        if self.marker is None:
            return None
        entries = {**self._filter(key), self.marker: "test-marker"}
        inst, text, failure = self._exec_run(tool_argv, env, stem, entries, timeout)
        pieces = split_at_marker(text, self.marker)
        if (failure or len(pieces) != len(tests)
                or ran_order(inst.stdout) != list(tests.values())):
            return None
        del entries[self.marker]
        out: dict[Any, Counted] = {}
        for i, (test, piece) in enumerate(zip(tests, pieces)):
            hits, l3, per_thread = self._seen(piece, entries, stem)
            l3["one_process"] = {"tests": len(tests), "test": i + 1,
                                 "argv": self.launcher + list(tool_argv),
                                 "note": f"one llama-bench process for {len(tests)} cells; "
                                         f"its exec log cut at each test's {TEST_MARKER_NOTE}"}
            out[test] = Counted(hits=hits, wall_s=inst.wall_s, failure=None, crash=None,
                                per_thread=per_thread, l3=l3)
        if self.crosscheck and checked:
            self._crosscheck_tests(check_argv, checked, out, env, timeout)
        return out

    def _crosscheck_tests(self, check_argv: Sequence[str], checked: Sequence[Any],
                          out: Mapping[Any, Counted], env: Mapping[str, str],
                          timeout: float) -> None:
        """The ``checked`` cells' dispatch-level counts again, per test, through one gdbstub
        run whose marker breakpoint prints the counts at each test's start."""
        from ladder.preparing.emulation import gdbstub_counts

        wanted = {p.entry + self.bias: p.id for p in self.probes if p.kind == "dispatch"}
        gdb = gdbstub_counts(self.launcher, list(check_argv), wanted, str(self.work_dir),
                             dict(env), timeout, marker=self.marker)
        segments = gdb.pop("segments", None) or []
        why = gdb.get("error") or (None if len(segments) == len(checked) else
                                   f"gdb saw {len(segments)} tests, expected {len(checked)}")
        for i, key in enumerate(checked):
            if why:
                out[key].l3["crosscheck"] = {**gdb, "error": why, "agree": None}
                continue
            counts = segments[i]
            out[key].l3["crosscheck"] = {
                **self._compare(out[key].hits, counts, wanted),
                "method": gdb.get("method"), "exited_normally": gdb.get("exited_normally"),
                "wall_s": gdb.get("wall_s"), "test": i + 1, "tests": len(checked)}

    def _compare(self, hits: Mapping[str, int], counts: Mapping[str, int],
                 wanted: Mapping[int, str]) -> dict[str, Any]:
        mine = {pid: hits[pid] for pid in wanted.values() if hits.get(pid)}
        names = {p.id: p.symbol for p in self.probes}
        diff = {names[k]: {"qemu_exec": mine.get(k, 0), "gdbstub": counts.get(k, 0)}
                for k in set(mine) | set(counts) if mine.get(k, 0) != counts.get(k, 0)}
        return {"agree": not diff, "disagree": diff,
                "counts": {names[k]: v for k, v in counts.items()}}

    def _crosscheck(self, tool_argv: Sequence[str], hits: Mapping[str, int],
                    env: Mapping[str, str], timeout: float) -> dict[str, Any]:
        """The dispatch-level counts again, through QEMU's gdbstub (one guest thread): the
        exec log's counts are trusted only where the two independent methods agree."""
        from ladder.preparing.emulation import gdbstub_counts

        wanted = {p.entry + self.bias: p.id for p in self.probes if p.kind == "dispatch"}
        gdb = gdbstub_counts(self.launcher, list(tool_argv), wanted, str(self.work_dir),
                             dict(env), timeout)
        if "counts" not in gdb or gdb.get("error"):
            return {**gdb, "agree": None}
        return {**gdb, **self._compare(hits, gdb["counts"], wanted)}


TEST_MARKER_NOTE = "context (llama_init_from_model)"


def test_marker(tool: str, bias: int) -> int | None:
    """The guest address where llama-bench starts each test (its context), or None when the
    tool has no such symbol (its cells then run one process each)."""
    from ladder.preparing.emulation import TEST_MARKER
    from ladder.core.kernels import SymbolsError, read_symbols

    try:
        symbols, _ = read_symbols(tool)
    except SymbolsError:
        return None
    # by name or alias: aarch64 mapping symbols ($x) can share a function's address
    addr = next((s.addr for s in symbols if TEST_MARKER in (s.name, *s.aliases)), None)
    return None if addr is None else addr + bias


def exec_filter(entries: Mapping[int, str], translated: Mapping[str, int] | None,
                dispatch_ids: set[str]) -> dict[int, str]:
    """The guest addresses an exec-logged run filters on: the probes its plain run translated
    (a symbol never translated never ran); with no translation record (a failed plain run),
    every dispatch-level symbol."""
    if translated:
        return {a: pid for a, pid in entries.items() if pid in translated}
    return {a: pid for a, pid in entries.items() if pid in dispatch_ids}


def choose_method(wanted: str, launcher: Sequence[str] = ()) -> tuple[str | None, Any, str | None]:
    """(method, handle, reason-if-none). auto = uprobes if permitted, else lldb. A guest under
    qemu-user is invisible to uprobes and ptrace: it is counted by QEMU's own exec log."""
    import shutil

    from ladder.measuring import debugger as lldb_mod
    from ladder.measuring import uprobes

    if launcher or wanted == "qemu-exec":
        if not launcher:
            return None, None, "method qemu-exec is for emulated hosts (no qemu launcher)"
        if shutil.which(launcher[0]) is None:
            return None, None, f"{launcher[0]} is not on PATH"
        return "qemu-exec", list(launcher), None
    reasons = []
    if wanted in ("auto", "uprobe"):
        try:
            return "uprobe", uprobes.find_tracefs(), None
        except uprobes.UprobeUnavailable as exc:
            reasons.append(str(exc))
            if wanted == "uprobe":
                return None, None, str(exc)
    if wanted in ("auto", "lldb", "lldb-presence"):
        try:
            setup = lldb_mod.find_lldb()
            return ("lldb" if wanted != "lldb-presence" else "lldb-presence"), setup, None
        except lldb_mod.LldbUnavailable as exc:
            reasons.append(str(exc))
    return None, None, "; ".join(reasons) or f"unknown method {wanted!r}"


def open_method(wanted: str, probes: Sequence[Probe], launcher: Sequence[str], tool: str,
                work_dir: str, crosscheck: bool) -> tuple[Method | None, str | None]:
    """The counting method of a sweep, ready to use, or None and why not."""
    name, handle, why = choose_method(wanted, launcher)
    if name is None:
        return None, why
    if name == "qemu-exec":
        return QemuExecMethod(probes, handle, tool, work_dir, crosscheck), None
    if name == "uprobe":
        return UprobeMethod(probes, handle), None
    return LldbMethod(probes, handle, presence_only=name == "lldb-presence"), None
