"""Where a CI run's minutes went: a table per part (set-up, lint, the fast tests, each measuring
test module), one per build (configure and compile seconds, compiler-cache hits), and the
compiler cache's hit rate, from the records .ci/run leaves:

- ``--times``: JSON lines, ``{"phase", "start", "stop"}`` written by .ci/run and the test
  records of tests/conftest.py (``LADDER_TEST_TIMES``: one line per test phase and session);
- ``--builds``: directories searched for ``provenance.json`` of builds (ladder.preparing.build writes one
  per build, with its wall times and ccache deltas);
- ``--ccache``: the compiler cache's home (``LADDER_CCACHE_DIR``), one cache dir per CPU
  identity below it, its counters zeroed when the run began.

Usage: python .ci/minutes.py --times FILE [--builds DIR ...] [--ccache DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterable

from ladder.preparing.build import ccache_counters, ccache_hits


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def module_spans(records: Iterable[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Each test module's first start and last stop, from the tests run one after another (a
    module-scoped fixture's run is in its first test's setup)."""
    spans: dict[str, list[float]] = {}
    for r in records:
        if "nodeid" not in r or r.get("xdist"):
            continue
        mod = r["nodeid"].split("::")[0]
        span = spans.setdefault(mod, [r["start"], r["stop"]])
        span[0], span[1] = min(span[0], r["start"]), max(span[1], r["stop"])
    return {m: (a, b) for m, (a, b) in spans.items()}


def parts(records: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """(part, seconds) in the order they ran: .ci/run's phases, the parallel fast tests as one
    part (their wall time), then each module of the tests run alone."""
    rows: list[tuple[float, str, float]] = []
    for r in records:
        if "phase" in r:
            rows.append((r["start"], r["phase"], r["stop"] - r["start"]))
        elif "session" in r and r.get("xdist"):
            rows.append((r["start"], f"fast tests in parallel ({r['session'] or 'all'})",
                         r["stop"] - r["start"]))
    for mod, (a, b) in module_spans(records).items():
        rows.append((a, mod, b - a))
    return [(name, secs) for _, name, secs in sorted(rows)]


def _module_at(when: float, spans: dict[str, tuple[float, float]]) -> str:
    return next((m for m, (a, b) in spans.items() if a <= when <= b), "-")


def builds(dirs: Iterable[Path], spans: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    """Every build's record under ``dirs``, with the test module running when it was written."""
    out = []
    for d in dirs:
        for prov in sorted(d.glob("**/provenance.json")):
            try:
                doc = json.loads(prov.read_text())
            except (OSError, ValueError):
                continue
            if not str(doc.get("format", "")).startswith("ladder-build/"):
                continue
            material = doc.get("material") or {}
            cmake = (material.get("recipe") or {}).get("cmake") or {}
            kind = "cross" if material.get("toolchain_file") else (
                "native" if cmake.get("GGML_NATIVE") == "ON" else "generic")
            vendor = ",".join(sorted((material.get("recipe") or {}).get("vendor") or {}))
            cc = doc.get("ccache") or {}
            hits, misses = ccache_hits(cc) if cc else (None, None)
            out.append({
                "key": str(doc.get("build_key", "?"))[:8], "arch": material.get("arch", "?"),
                "kind": kind + (f"+{vendor}" if vendor else ""), "status": doc.get("status"),
                "module": _module_at(prov.stat().st_mtime, spans),
                "configure_s": doc.get("configure_wall_s"), "build_s": doc.get("build_wall_s"),
                "hits": hits, "misses": misses,
            })
        # a vendor library's test suite built by a vendor_tests job (ladder.measuring.vendor_tests)
        for rec_path in sorted(d.glob("**/*.vendor.json")):
            try:
                doc = json.loads(rec_path.read_text())
            except (OSError, ValueError):
                continue
            b = doc.get("build") if str(doc.get("format", "")).startswith(
                "ladder-vendor-tests/") else None
            if not b:
                continue
            cc = b.get("ccache") or {}
            hits, misses = ccache_hits(cc) if cc else (None, None)
            out.append({
                "key": str(b.get("key", "?"))[:8], "arch": (doc.get("ran_on") or {}).get(
                    "emulated", {}).get("arch") or (doc.get("ran_on") or {}).get("arch", "?"),
                "kind": f"{doc.get('vendor')} tests", "status": b.get("status"),
                "module": _module_at(rec_path.stat().st_mtime, spans),
                "configure_s": b.get("configure_wall_s"), "build_s": b.get("build_wall_s"),
                "hits": hits, "misses": misses,
            })
    return sorted(out, key=lambda b: (b["module"], b["key"]))


def ccache_stats(home: Path) -> list[dict[str, Any]]:
    """This run's counters (zeroed at its start) and the size of each cache dir under ``home``."""
    rows = []
    for d in sorted(p for p in home.glob("*") if p.is_dir()):
        stats = ccache_counters({"CCACHE_DIR": str(d)})
        hits, misses = ccache_hits(stats)
        rows.append({"cache": d.name, "hits": hits, "misses": misses,
                     "rate": hits / (hits + misses) if hits + misses else None,
                     "size_mib": stats.get("cache_size_kibibyte", 0) / 1024})
    return rows


def _fmt(value: Any, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def render(records: list[dict[str, Any]], build_rows: list[dict[str, Any]],
           cache_rows: list[dict[str, Any]]) -> str:
    lines = ["ci: minutes per part", "| part | min |", "|---|---:|"]
    total = 0.0
    for name, secs in parts(records):
        lines.append(f"| {name} | {secs / 60:.1f} |")
        total += secs
    lines.append(f"| **all parts** | **{total / 60:.1f}** |")
    lines += ["", "ci: builds (configure + compile; compiler-cache hits / misses)",
              "| module | build | arch | kind | status | configure s | compile s | hits | misses |",
              "|---|---|---|---|---|---:|---:|---:|---:|"]
    for b in build_rows:
        lines.append(f"| {b['module']} | {b['key']} | {b['arch']} | {b['kind']} | {b['status']} "
                     f"| {_fmt(b['configure_s'], '.0f')} | {_fmt(b['build_s'], '.0f')} "
                     f"| {_fmt(b['hits'])} | {_fmt(b['misses'])} |")
    if build_rows:
        secs = sum((b["configure_s"] or 0) + (b["build_s"] or 0) for b in build_rows)
        lines.append(f"| **{len(build_rows)} builds** | | | | | | **{secs / 60:.1f} min** | | |")
    lines += ["", "ci: compiler cache (this run)", "| cache | hits | misses | hit rate | size MiB |",
              "|---|---:|---:|---:|---:|"]
    for c in cache_rows:
        rate = "-" if c["rate"] is None else f"{100 * c['rate']:.0f} %"
        lines.append(f"| {c['cache']} | {c['hits']} | {c['misses']} | {rate} "
                     f"| {c['size_mib']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--times", type=Path, required=True)
    ap.add_argument("--builds", type=Path, nargs="*", default=[])
    ap.add_argument("--ccache", type=Path)
    args = ap.parse_args()
    records = read_lines(args.times)
    build_rows = builds([d for d in args.builds if d.is_dir()], module_spans(records))
    cache_rows = ccache_stats(args.ccache) if args.ccache and args.ccache.is_dir() else []
    print(render(records, build_rows, cache_rows))


if __name__ == "__main__":
    main()
