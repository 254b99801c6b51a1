"""Parsers for what llama.cpp prints. Pure functions over text; fed real captured output in tests."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from ladder.core.errors import LadderError

BUFFER = re.compile(
    r"^load_tensors:\s+(?P<name>\S+) model buffer size =\s*(?P<mib>[0-9.]+) MiB", re.M
)
SYSTEM_INFO = re.compile(r"^system_info:.*$", re.M)
VENDOR = re.compile(r"^(?P<line>(?:kleidiai|amx|AMX)[: ].*)$", re.M)
KLEIDIAI_PRIMARY = re.compile(r"^kleidiai: primary (?P<kind>\w+) kernel feature (?P<feat>\w+)", re.M)
REPACK_TENSOR = re.compile(r"^repack: repack tensor (?P<tensor>\S+) with (?P<layout>\S+)", re.M)
AMX_REPACK = re.compile(r"amx repack tensor (?P<tensor>\S+) of type (?P<type>\S+)", re.M)
NO_KERNEL = re.compile(r"^kleidiai: no kernel for tensor type (?P<type>[^\s,]+)", re.M)
CANNOT_USE = re.compile(
    r"tensor '(?P<tensor>[^']+)' \((?P<type>[^)]+)\) \(and (?P<others>\d+) others\) cannot be used "
    r"with preferred buffer type (?P<buft>\S+), using (?P<fallback>\S+) instead"
)


# Tools built on `common` prefix lines with "<elapsed> <level> " (e.g. "0.01.961.432 I "), and
# progress dots can precede that; llama-bench prints bare lines. Strip both before matching.
LINE_PREFIX = re.compile(r"^\.*(?:\d+\.\d+\.\d+\.\d+ [A-Z] )?", re.M)


def clean(log: str) -> str:
    return LINE_PREFIX.sub("", log)


LOAD_START = re.compile(r"^llama_model_loader: loaded meta data", re.M)


def load_segments(log: str) -> list[str]:
    """The log split at each model load (llama-completion's no-alloc "fit" pass is one)."""
    text = clean(log)
    starts = [m.start() for m in LOAD_START.finditer(text)]
    if len(starts) <= 1:
        return [text]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def buffer_loads(log: str) -> list[dict[str, float]]:
    """Every model load's weight buffers (within a segment, a repeated name starts a new load)."""
    loads: list[dict[str, float]] = []
    for segment in load_segments(log):
        current: dict[str, float] = {}
        for m in BUFFER.finditer(segment):
            name, mib = m.group("name"), float(m.group("mib"))
            if name in current:
                loads.append(current)
                current = {}
            current[name] = mib
        if current:
            loads.append(current)
    return loads


def weight_buffers(log: str) -> dict[str, float]:
    """Weight buffer types and sizes (MiB) of the first real model load in a log.

    llama-completion first runs a no-alloc "fit" load that prints 0.00 MiB for its buffers;
    llama-bench reloads per parameter set. The first load with a non-zero size is the one.
    """
    loads = buffer_loads(log)
    for load in loads:
        if any(v > 0 for v in load.values()):
            return load
    return loads[0] if loads else {}


def system_info_features(log: str) -> dict[str, str]:
    """Compile-time features from the 'system_info:' line (e.g. {'AVX2': '1', 'REPACK': '1'})."""
    m = SYSTEM_INFO.search(clean(log))
    if not m:
        return {}
    feats: dict[str, str] = {}
    in_backend = False
    for part in m.group(0).split("|"):
        key, eq, value = part.partition("=")
        if ":" in key:  # "CPU : SSE3" starts a backend's features; "system_info: n_threads" not
            prefix, _, key = key.rpartition(":")
            in_backend = not prefix.strip().startswith("system_info")
        key = key.strip()
        if in_backend and eq and key:
            feats[key] = value.strip()
    return feats


def system_info_line(log: str) -> str | None:
    m = SYSTEM_INFO.search(clean(log))
    return m.group(0).strip() if m else None


def vendor_lines(log: str) -> list[str]:
    """Vendor-library init and warning lines (KleidiAI, AMX), deduplicated in order."""
    seen: dict[str, None] = {}
    for m in VENDOR.finditer(clean(log)):
        seen.setdefault(m.group("line").strip(), None)
    return list(seen)


def kleidiai_primary(log: str) -> dict[str, str]:
    return {m.group("kind"): m.group("feat") for m in KLEIDIAI_PRIMARY.finditer(clean(log))}


KLEIDIAI_SME_CAP = re.compile(r"^kleidiai: SME enabled \((?P<how>[^)]*?)(?:thread cap=|"
                              r"GGML_KLEIDIAI_SME=)(?P<cap>\d+)", re.M)
KLEIDIAI_SME_OFF = re.compile(r"^kleidiai: SME disabled", re.M)


def kleidiai_sme(log: str) -> dict[str, Any] | None:
    """KleidiAI's SME state from its init lines: enabled with a thread cap (and how the cap was
    set: runtime-detected, conservative default, or a GGML_KLEIDIAI_SME override), disabled,
    or None when the log has neither line."""
    text = clean(log)
    m = KLEIDIAI_SME_CAP.search(text)
    if m:
        how = m.group("how")
        source = ("override" if "override" in how or "GGML_KLEIDIAI_SME" in m.group(0) else
                  "conservative" if "conservative" in how else "runtime-detected")
        end = text.find("\n", m.start())
        return {"state": "enabled", "thread_cap": int(m.group("cap")), "cap_source": source,
                "line": text[m.start():end if end >= 0 else None].strip()}
    if KLEIDIAI_SME_OFF.search(text):
        return {"state": "disabled", "thread_cap": 0, "cap_source": None,
                "line": "kleidiai: SME disabled"}
    return None


def kleidiai_unaccelerated_types(log: str) -> list[str]:
    return sorted({m.group("type") for m in NO_KERNEL.finditer(clean(log))})


def repacked_layouts(log: str) -> dict[str, int]:
    """At DEBUG verbosity: how many tensors were repacked into each layout (q4_0_8x8 …)."""
    return dict(Counter(m.group("layout") for m in REPACK_TENSOR.finditer(clean(log))))


def amx_repacked_types(log: str) -> dict[str, int]:
    """At DEBUG verbosity: how many tensors of each type the AMX buffer repacked."""
    return dict(Counter(m.group("type") for m in AMX_REPACK.finditer(clean(log))))


def buffer_fallbacks(log: str) -> list[dict[str, Any]]:
    return [
        {"tensor": m.group("tensor"), "type": m.group("type"), "others": int(m.group("others")),
         "preferred": m.group("buft"), "used": m.group("fallback")}
        for m in CANNOT_USE.finditer(clean(log))
    ]


BENCH_REQUIRED = ("build_commit", "n_threads", "n_prompt", "n_gen", "avg_ts", "samples_ts",
                  "samples_ns", "model_type", "model_size")


def bench_records(text: str, source: str = "llama-bench output") -> list[dict[str, Any]]:
    """llama-bench '-o json' output: a list of test records, each with raw samples."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LadderError(f"{source}: not llama-bench JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, list) or not data:
        raise LadderError(f"{source}: expected a non-empty JSON list of llama-bench records")
    for i, rec in enumerate(data):
        missing = [k for k in BENCH_REQUIRED if k not in rec]
        if missing:
            raise LadderError(f"{source}: record {i} lacks {', '.join(missing)}")
        if len(rec["samples_ts"]) != len(rec["samples_ns"]):
            raise LadderError(f"{source}: record {i} has mismatched samples_ts/samples_ns")
    return data


# --- llama-perplexity ------------------------------------------------------------------------
PPL_FINAL = re.compile(r"Final estimate: PPL = (?P<ppl>[0-9.]+) \+/- (?P<err>[0-9.]+)")
PPL_CHUNK = re.compile(r"\[(?P<i>\d+)\](?P<ppl>[0-9.]+|nan|inf),")
KLD_ROW = re.compile(
    r"^\s*(?P<chunk>\d+)\s+(?P<ppl>[0-9.]+) ±\s+(?P<ppl_err>[0-9.]+)\s+(?P<lnr>-?[0-9.]+) ±\s+"
    r"[0-9.]+\s+(?P<kld>[0-9.]+) ±\s+[0-9.]+\s+(?P<rms>[0-9.]+) ±\s+[0-9.]+ %\s+"
    r"(?P<same>[0-9.]+) ±\s+[0-9.]+ %", re.M)
TOO_SHORT = re.compile(r"you need at least (?P<need>\d+) tokens to evaluate perplexity with a "
                       r"context of (?P<ctx>\d+)")
KLD_STATS = {
    "mean_ppl_q": r"Mean PPL\(Q\)\s+:\s+(?P<v>[0-9.]+) ±\s+(?P<e>[0-9.]+)",
    "mean_ppl_base": r"Mean PPL\(base\)\s+:\s+(?P<v>[0-9.]+) ±\s+(?P<e>[0-9.]+)",
    "ppl_ratio": r"Mean PPL\(Q\)/PPL\(base\)\s+:\s+(?P<v>[0-9.]+) ±\s+(?P<e>[0-9.]+)",
    "kld_mean": r"Mean\s+KLD:\s+(?P<v>-?[0-9.]+) ±\s+(?P<e>[0-9.]+)",
    "kld_max": r"Maximum KLD:\s+(?P<v>-?[0-9.]+)",
    "kld_p999": r"99\.9%\s+KLD:\s+(?P<v>-?[0-9.]+)",
    "kld_p99": r"99\.0%\s+KLD:\s+(?P<v>-?[0-9.]+)",
    "kld_median": r"Median\s+KLD:\s+(?P<v>-?[0-9.]+)",
    "same_top_p": r"Same top p:\s+(?P<v>[0-9.]+) ±\s+(?P<e>[0-9.]+) %",
    "rms_dp": r"RMS Δp\s+:\s+(?P<v>[0-9.]+) ±\s+(?P<e>[0-9.]+) %",
}


def perplexity_final(text: str) -> tuple[float, float] | None:
    """'Final estimate: PPL = X +/- Y' (stderr; may share a line with the ETA print)."""
    m = PPL_FINAL.search(text)
    return (float(m.group("ppl")), float(m.group("err"))) if m else None


def perplexity_chunks(text: str) -> list[float]:
    """The running estimate after each chunk: '[1]16.5510,[2]13.6586,…' (stdout)."""
    return [float(m.group("ppl")) for m in PPL_CHUNK.finditer(text)]


def kld_statistics(text: str) -> dict[str, float]:
    """KL-divergence mode summary; '_err' keys hold the ± where llama.cpp prints one."""
    out: dict[str, float] = {}
    for key, pat in KLD_STATS.items():
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group("v"))
            if "e" in m.groupdict() and m.group("e") is not None:
                out[f"{key}_err"] = float(m.group("e"))
    return out


def kld_chunk_rows(text: str) -> list[dict[str, float]]:
    return [{"chunk": int(m.group("chunk")), "ppl": float(m.group("ppl")),
             "kld": float(m.group("kld")), "same_top_p": float(m.group("same"))}
            for m in KLD_ROW.finditer(text)]


def corpus_too_short(text: str) -> str | None:
    m = TOO_SHORT.search(text)
    if not m:
        return None
    return (f"corpus too short: llama-perplexity needs at least {m.group('need')} tokens for a "
            f"context of {m.group('ctx')}")
