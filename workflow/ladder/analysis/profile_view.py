"""The report's sections of the two profiling stages: where the time goes (perf hotspots) and
each rung's kernels alone (ggml's kernel tests). Registered in ``ladder.reporting.sections``."""

from __future__ import annotations

from typing import Any

from ladder.core.io import load_each
from ladder.analysis.context import SectionContext


def hotspots(ctx: SectionContext) -> dict[str, Any] | None:
    """Every sampled cell (rung x quant x phase x threads), with what perf sampled per group."""
    plan, files, missing = ctx.plan, ctx.files["hotspots"], ctx.missing
    reason = plan.get("hotspots_unavailable")
    if not files and not reason:
        return None
    docs = load_each(files, missing)
    groups: dict[str, str] = {}
    cells = []
    for d in docs:
        groups.update(d.get("groups") or {})
        for c in d.get("cells") or []:
            cells.append({"rung": d["rung"], "raw_dir": d.get("raw_dir"), **c})
    order = {n: i for i, n in enumerate(plan.get("ladder_order") or [])}
    cells.sort(key=lambda c: (c["quant"], c["phase"] != "prefill", c["threads"],
                              order.get(c["rung"], 99)))
    meta = docs[0] if docs else {}
    return {"unavailable": reason, "groups": groups, "cells": cells,
            "frequency_hz": meta.get("frequency_hz"), "min_seconds": meta.get("min_seconds")}


def kernel_tests(ctx: SectionContext) -> dict[str, Any] | None:
    """ggml's kernel tests per rung, with the failed checks named; and a vendor library's own
    tests of the kernels llama.cpp calls (KleidiAI's suite, ladder.vendor_tests)."""
    from ladder.measuring.vendor_tests import summary

    plan, files, missing = ctx.plan, ctx.files["kernel_tests"], ctx.missing
    reason = plan.get("kernel_tests_unavailable")
    vendor = [{**d, "summary": summary(d)}
              for d in load_each(ctx.files.get("vendor_tests") or [], missing)]
    if not files and not reason and not vendor:
        return None
    rungs = []
    for d in load_each(files, missing):
        fns = d.get("fns") or {}
        failed = [f"{c['type']} {c['test']} ({c['error']:g})" for c in fns.get("checks") or []
                  if not c["ok"]]
        rungs.append({**d, "failed_checks": failed})
    order = {n: i for i, n in enumerate(plan.get("ladder_order") or [])}
    rungs.sort(key=lambda r: order.get(r["rung"], 99))
    vendor.sort(key=lambda r: order.get(r["rung"], 99))
    return {"unavailable": reason, "rungs": rungs, "vendor": vendor}

