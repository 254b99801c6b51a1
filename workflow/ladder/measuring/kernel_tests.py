"""Each rung's kernels alone: ggml's own test-quantize-fns and test-quantize-perf.

Both are built as extra targets of every rung (build.targets, LLAMA_BUILD_TESTS=ON) and test
what the rung compiled for ggml's type traits: quantize/dequantize of a row, the activations'
quantization and the per-row ``vec_dot`` of each quant type (the generic path's kernels, with
the rung's SIMD). They do not exercise the repack, AMX or KleidiAI matmul kernels: the dispatch
ledger and the hotspots say whether those ran.

- ``test-quantize-fns -v``: each type's quantization error, its error against the reference
  implementation and its dot-product error, each against ggml's own limit (ok / FAILED). A
  rung with a FAILED line is flagged beside its speedup, like a drift flag.
- ``test-quantize-perf``: per type and operation, cycles per 32 values (rdtsc on x86; 0 on
  other arches, where ggml reads no cycle counter) and GB/s, best and mean of its iterations.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.machine import host_brief
from ladder.core.run import run

log = logging.getLogger("ladder.kernel_tests")
FORMAT = "ladder-kernel-tests/1"
FNS, PERF = "test-quantize-fns", "test-quantize-perf"
# "q4_0 absolute quantization error:    ok (0.001234)"; " f32 vec_dot n=   1:   ok (ref=…)"
_FNS_ROW = re.compile(r"^\s*(\S+) (absolute quantization error|reference implementation error|"
                      r"dot product error(?: \(nrc=2\))?):\s+(ok|FAILED) \(([^)]*)\)")
_F32_ROW = re.compile(r"^\s*f32 vec_dot n=\s*(\d+):\s+(ok|FAILED) \(ref=\S+ got=\S+ err=(\S+)\)")
_FAILED_TOTAL = re.compile(r"^(\d+) tests failed")
_PERF_TYPE = re.compile(r"^(\w+)$")
_PERF_OP = re.compile(r"^  (\w+)$")
_PERF_SIZE = re.compile(r"^    (\d+) values \(")
_PERF_VAL = re.compile(r"^      (min cycles|avg cycles)/(\d+) vals\s*:\s*(\S+)"
                       r"|^      (float32|quantized) throughput\s*:\s*(\S+) GB/s")


def ggml_type(quant: str) -> str:
    """A model quant (Q4_K_M, Q4_0, Q8_0, F16) as ggml names its type (q4_K, q4_0, q8_0, f16):
    the file type's size suffix (_S/_M/_L) is not part of the tensor type."""
    q = quant.upper()
    m = re.match(r"^(I?Q\d)_K(?:_[SML])?$", q)
    if m:
        return f"{m.group(1).lower()}_K"
    return q.lower()


def parse_fns(text: str, source: str = FNS) -> dict[str, Any]:
    """test-quantize-fns -v: every check with its error and verdict."""
    checks = []
    failed_total = None
    for line in text.splitlines():
        m = _FNS_ROW.match(line)
        if m:
            typ, test, verdict, err = m.groups()
            checks.append({"type": typ, "test": test, "ok": verdict == "ok",
                           "error": float(err)})
            continue
        m = _F32_ROW.match(line)
        if m:
            checks.append({"type": "f32", "test": f"vec_dot n={m.group(1)}",
                           "ok": m.group(2) == "ok", "error": float(m.group(3))})
            continue
        m = _FAILED_TOTAL.match(line)
        if m:
            failed_total = int(m.group(1))
    if not checks:
        raise LadderError(f"{source}: no check lines (was it run with -v?)")
    failed = [c for c in checks if not c["ok"]]
    if failed_total is not None and failed_total != len(failed):
        raise LadderError(f"{source}: says {failed_total} tests failed, {len(failed)} FAILED "
                          "lines read")
    return {"checks": checks, "failed": len(failed), "passed": len(checks) - len(failed)}


def parse_perf(text: str, source: str = PERF) -> list[dict[str, Any]]:
    """test-quantize-perf: one row per type x operation x size."""
    rows: list[dict[str, Any]] = []
    typ = op = None
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        if _PERF_TYPE.match(line):
            typ, op = line.strip(), None
            continue
        m = _PERF_OP.match(line)
        if m:
            op = m.group(1)
            continue
        m = _PERF_SIZE.match(line)
        if m and typ and op:
            cur = {"type": typ, "op": op, "values": int(m.group(1))}
            rows.append(cur)
            continue
        m = _PERF_VAL.match(line)
        if m and cur is not None:
            if m.group(1):
                cur["per_values"] = int(m.group(2))
                cur["min_cycles" if m.group(1) == "min cycles" else "avg_cycles"] = float(m.group(3))
            else:
                key = "f32_gbps" if m.group(4) == "float32" else "quantized_gbps"
                cur[key] = float(m.group(5))
    if not rows:
        raise LadderError(f"{source}: no benchmark rows (type / operation / size lines)")
    return rows


def run_tests(*, rung: Mapping[str, Any], provenance: str, quants: Sequence[str],
              settings: Mapping[str, Any], out_json: str, raw_dir: str) -> dict[str, Any]:
    """Both tests of one rung's build; a missing binary or a crash is recorded with its reason."""
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    build = read_json(provenance)
    types = sorted({ggml_type(q) for q in quants})
    doc: dict[str, Any] = {"format": FORMAT, "ran_on": host_brief(None), "rung": rung["name"],
                           "build_key": rung["build_key"], "types": types,
                           "raw_dir": raw_dir, "fns": None, "perf": None}
    timeout = float(settings["timeout_s"])
    for name in (FNS, PERF):
        key = "fns" if name == FNS else "perf"
        if build.get("status") != "ok":
            doc[key] = {"status": "unavailable",
                        "reason": f"build {build.get('status')}: {build.get('reason')}"}
            continue
        exe = Path(build["bin_dir"]) / name
        if not exe.exists():
            doc[key] = {"status": "unavailable", "reason": f"{name} is not in the build (add it "
                        "to build.targets, with LLAMA_BUILD_TESTS ON)"}
            continue
        argv = [str(exe), "-v"] if name == FNS else [
            str(exe), "-i", str(int(settings["iterations"])),
            *[a for t in types for a in ("--type", t)]]
        res = run(argv, env=rung.get("env") or {}, timeout_s=timeout)
        log_name = f"{name}.log"
        atomic_write_text(raw / log_name, f"$ {' '.join(argv)}\n{res.stdout}\n{res.stderr}")
        entry: dict[str, Any] = {"argv": argv, "raw": log_name, "wall_s": round(res.wall_s, 2)}
        if res.timed_out or res.signal_name:
            doc[key] = {**entry, "status": "failed", "reason": res.failure()}
            continue
        try:
            if name == FNS:
                # exit code 1 is the test's own "some check failed", read from its lines
                doc[key] = {**entry, "status": "ok" if res.returncode in (0, 1) else "failed",
                            "reason": None if res.returncode in (0, 1) else res.failure(),
                            **parse_fns(res.stdout, str(raw / log_name))}
            else:
                if not res.ok:
                    doc[key] = {**entry, "status": "failed", "reason": res.failure()}
                    continue
                doc[key] = {**entry, "status": "ok", "reason": None,
                            "rows": parse_perf(res.stdout, str(raw / log_name))}
        except LadderError as exc:
            doc[key] = {**entry, "status": "failed", "reason": str(exc)}
        log.info("%s: %s", name, doc[key].get("reason") or "ok")
    atomic_write_json(out_json, doc)
    return doc
