"""Assemble the ladder report: one JSON document (versioned) and Markdown rendered from it."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from ladder.reporting import sections
from ladder.analysis import stats, wording
from ladder.core import outcome
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, load_each, load_first, read_json
from ladder.measuring.dispatch import CREDITED, workload_phase
from ladder.core.cost import cost_table, host_price
from ladder.measuring.quality import judge_drift, sme_scope

FORMAT = "ladder-report/1"


def rung_status(plan_rung: Mapping[str, Any], build: Mapping[str, Any] | None,
                evidence: Sequence[Mapping[str, Any]], cells: Sequence[Mapping[str, Any]],
                ) -> dict[str, Any]:
    """Overall status of a rung (not_applicable, build_failed, crashed, failed or ok), with
    the cells in which it was measured: a rung can crash in one phase and run in another."""
    name = plan_rung["name"]
    measured = [f"{c['quant']}/{c['workload']}/t{c['threads']}" for c in cells
                if c.get("rung_status", {}).get(name, {}).get("status") == "measured"]
    if plan_rung.get("not_applicable"):
        return {"status": "not_applicable", "reason": plan_rung["not_applicable"], "log": None,
                "measured_in": []}
    if build is None:
        return {"status": "unknown", "reason": "no build provenance found", "log": None,
                "measured_in": []}
    if build.get("status") == "not_applicable":  # its vendor_source job found no usable source
        return {"status": "not_applicable", "reason": build.get("reason"), "log": None,
                "measured_in": [], **failure_note(build, name)}
    if build.get("status") != "ok":
        return {"status": "build_failed", "reason": build.get("reason"), "log": build.get("log"),
                "measured_in": [], **failure_note(build, name)}
    problems = []  # each with the phase of the cells it happened in (None: the evidence run)
    for ev in evidence:
        if ev.get("rung") == name and ev.get("status") in {"crashed", "failed"}:
            problems.append({"status": ev["status"], "reason": f"{ev.get('reason')} (evidence "
                             f"run, {ev.get('quant')})", "log": ev.get("raw_log"),
                             "phase": None, "quant": ev.get("quant")})
    for cell in cells:
        st = cell.get("rung_status", {}).get(name, {})
        if st.get("status") in {"crashed", "failed"}:
            problems.append({"status": st["status"], "reason": f"{st.get('reason')} (llama-bench,"
                             f" {cell['quant']}/{cell['workload']}/t{cell['threads']})",
                             "log": st.get("raw"),
                             "phase": workload_phase(cell.get("workload_spec") or {}),
                             "quant": cell["quant"]})
    if problems:
        more = f"; {len(problems) - 1} more" if len(problems) > 1 else ""
        first = {"status": problems[0]["status"], "reason": problems[0]["reason"] + more,
                 "log": problems[0]["log"], "measured_in": measured,
                 "crashed_in": sorted({p["phase"] for p in problems if p["phase"]}),
                 "problems": problems}
        if outcome.of_reason(problems[0]["reason"]):  # killed from outside, timed out
            return {**first, "outcome": "moment",
                    "kept": "a failure of the moment: measured again on the next run"}
        # the binary's own crash or failure is a finding, kept
        retry = f"./ladder run --forcerun $(./ladder paths measure {name})"
        return {**first, "outcome": "fact", "retry": retry,
                "kept": f"the binary's own failure, kept: not re-tried; to re-try: `{retry}`"}
    return {"status": "ok", "reason": None, "log": build.get("log"), "measured_in": measured}


def failure_note(build: Mapping[str, Any], rung: str) -> dict[str, Any]:
    """Whether a build's failure is checked again next run (a failure of the moment: an input
    not there, the build killed) or kept as a fact of its recipe, not re-tried, with the one
    command that forces a re-try (ladder.core.outcome)."""
    if build.get("outcome") == "moment":
        return {"outcome": "moment", "kept": "a failure of the moment: checked again on the "
                                              "next run"}
    retry = f"./ladder run --forcerun $(./ladder paths build {rung})"
    seen = build.get("checked_at")
    return {"outcome": "fact", "retry": retry,
            "kept": (f"kept from {seen}" if seen else "kept from an earlier run")
            + f" (a fact of this recipe and source), not re-tried; to re-try: `{retry}`"}


def phase_credit(ev: Mapping[str, Any] | None, rung: Mapping[str, Any] | None,
                 phase: str | None, quant: str | None = None) -> dict[str, Any] | None:
    """A rung that crashes in one phase and runs in another is judged per phase: in a phase
    none of whose llama-bench cells crashed, while cells of another phase did, its evidence
    run's crash is that other phase's (the evidence run loads, then runs a prompt and a few
    tokens), and its markers, seen in the load log before the crash, count here. Returns the
    crash to flag beside the credit (the phases it crashes in, and the first crash of this
    quant when it has one), or None (judged as a whole)."""
    if not rung or rung.get("status") not in ("crashed", "failed") or phase is None:
        return None
    problems = rung.get("problems") or []
    here = [p for p in problems if p.get("phase") == phase]
    other = [p for p in problems if p.get("phase") and p["phase"] != phase]
    claims = (ev or {}).get("claims") or []
    if here or not other or not claims or any(c.get("missing") for c in claims):
        return None
    first = next((p for p in other if p.get("quant") == quant), other[0])
    return {"status": rung["status"], "reason": first["reason"], "log": first.get("log"),
            "phases": sorted({p["phase"] for p in other})}


def own_source(build: Mapping[str, Any] | None, src: Mapping[str, Any]
               ) -> dict[str, Any] | None:
    """A rung's source when it is not the ladder's (another version, or patched): its id,
    label and what it was patched from, from its build's record."""
    own = (build or {}).get("source") or {}
    if not own.get("source_id") or own.get("source_id") == src.get("source_id"):
        return None
    return {k: own.get(k) for k in ("source_id", "label", "upstream_commit",
                                    "patched_from_commit")}


def thread_reconciliation(cells: Sequence[Mapping[str, Any]], ladder: Sequence[str],
                          confidence: float = 0.95) -> list[dict[str, Any]]:
    """Each rung at its own best thread count against the floor at the floor's best, beside the
    same-thread comparison ("the vendor kernels at 2 threads vs NEON at its best", not only
    "at equal threads"). Different cells: the rounds do not pair, so the interval is Welch's on
    the round means, judged against the larger of the two cells' noise floors."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["model"]["model"], c["quant"], c["workload"]), []).append(c)
    out = []
    for (model, quant, workload), cs in groups.items():
        if len({c["threads"] for c in cs}) < 2 or not ladder:
            continue
        best: dict[str, Mapping[str, Any]] = {}
        for name in ladder:
            have = [c for c in cs if (c["rungs"].get(name) or {}).get("n")]
            if have:
                best[name] = max(have, key=lambda c: c["rungs"][name]["median"])
        base = ladder[0]
        if base not in best:
            continue
        bc = best[base]
        rows = []
        for name in ladder[1:]:
            if name not in best:
                continue
            rc = best[name]
            r = stats.unpaired_ratio_ci(bc["rungs"][base]["round_means"],
                                        rc["rungs"][name]["round_means"], confidence)
            # different cells: Welch's interval carries both cells' round noise; a failed
            # control check in either widens it by that cell's bias
            bias = max((c["noise_floor"]["control_check"].get("bias") or 0.0) for c in (bc, rc))
            v = stats.verdict(r, bc["noise_floor"].get("threshold"), bias=bias)
            same = next((x for x in rc.get("vs_floor") or [] if x["rung"] == name), None)
            rows.append({"rung": name, "threads": rc["threads"], "base_threads": bc["threads"],
                         "ratio": asdict(r), "verdict": asdict(v),
                         "same_threads": {"threads": rc["threads"],
                                          "verdict": same["verdict"]["text"]} if same else None})
        out.append({"model": model, "quant": quant, "workload": workload, "base": base,
                    "base_threads": bc["threads"], "rows": rows})
    return out


def negative_controls(rungs: Sequence[Mapping[str, Any]],
                      evidence: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A rung's negative-control quants (its mechanism has no kernel for them): whether its
    weight buffer still took some of their weights, as the evidence run shows. A pure opt-out
    puts nothing there; Q4_K_M under KleidiAI puts the tied Q8_0 embedding there."""
    out = []
    for r in rungs:
        buffers = [m["buffer"] for m in r.get("markers") or []
                   if m.get("buffer") and not m.get("absent")]
        for quant in r.get("negative_controls") or []:
            ev = (evidence.get(quant) or {}).get(r["name"])
            if not ev:
                continue
            held = {b: mib for b in buffers
                    if (mib := (ev.get("weight_buffers_mib") or {}).get(b, 0.0)) > 0}
            skipped = ev.get("kleidiai_unaccelerated_types") or []
            if ev.get("status") != "ok":
                text = f"no evidence run ({ev.get('status')}: {ev.get('reason')})"
                pure = None
            elif held:
                text = ("not a pure opt-out: " + ", ".join(f"{b} holds {mib:.2f} MiB" for b, mib
                                                          in held.items()) +
                        " of this quant's weights (tensors of a type the library has kernels "
                        "for, e.g. a Q8_0 tied embedding)")
                pure = False
            else:
                text = f"a pure opt-out: no weights in {', '.join(buffers) or 'its buffer'}"
                pure = True
            if skipped:
                text += f"; the library named types it does not accelerate: {', '.join(skipped)}"
            out.append({"rung": r["name"], "quant": quant, "pure": pure, "held_mib": held,
                        "text": text})
    return out


def credit_line(ev: Mapping[str, Any] | None) -> str:
    """What the rung's own evidence lets us credit: "no marker, no claim"."""
    if not ev:
        return "no evidence run: nothing credited"
    claims = ev.get("claims") or []
    if not claims:
        return "no markers declared: nothing credited"
    return "; ".join(f"{c['mechanism']} {'credited' if c['credited'] else c['verdict']}"
                     for c in claims)


EXTRA_BUFFERS = ("CPU_REPACK", "CPU_KLEIDIAI", "AMX")


def weight_share(ev: Mapping[str, Any] | None, model_bytes: int | None) -> dict[str, Any] | None:
    """How much of the model's weights the rung's extra buffer types hold (the work a repack or
    vendor kernel can take), from the load log's buffer sizes: a share of calls is not a share
    of work (one output head call can outweigh a hundred layer calls)."""
    bufs = (ev or {}).get("weight_buffers_mib") or {}
    extra = {k: v for k, v in bufs.items() if k.upper().startswith(EXTRA_BUFFERS)}
    if not extra or not model_bytes:
        return None
    total = model_bytes / 2 ** 20
    held = sum(extra.values())
    names = ", ".join(f"{k} {v:.1f}" for k, v in extra.items())
    if held > total:  # a converted layout can outgrow the file (AMX): all weights, not >100 %
        return {"buffers_mib": extra, "model_mib": round(total, 2), "share": 1.0,
                "text": f"{names} MiB, more than the {total:.0f} MiB of weights (a larger "
                        "converted layout): all of them"}
    return {"buffers_mib": extra, "model_mib": round(total, 2), "share": held / total,
            "text": f"{names} of {total:.0f} MiB of weights ({held / total * 100:.0f} %)"}


def attribution(call: str, ev: Mapping[str, Any] | None, dispatch: Mapping[str, Any] | None,
                rung: Mapping[str, Any] | None, model_bytes: int | None = None,
                phase: str | None = None) -> dict[str, Any]:
    """Whether a step's gain is credited, and to which mechanisms: only when the evidence (the
    run ok, markers present), the ledger (the rung's kernel family dispatched) and the runs (no
    crash in any phase) agree. A rung that bundles several mechanisms (native ISA + repack +
    llamafile) credits the ones that engaged and names each one that did not, with its reason
    (no marker for this quant; the ledger saw its kernels fall back), instead of crediting
    nothing. Names the kernel path that ran, and every crash beside the gain. A rung that
    crashes in another phase only is credited in this one and flagged (``phase_credit``)."""
    elsewhere = phase_credit(ev, rung, phase, (ev or {}).get("quant"))
    claims = (ev or {}).get("claims") or []
    if elsewhere:  # every marker seen at load; the run's crash belongs to the other phase
        claims = [{**c, "credited": True, "verdict": "credited"} for c in claims]
    # "no_*" claims say a mechanism is absent: they prove what a rung is not, credit nothing,
    # and a refused one (e.g. AMX compiled in) means the rung is not what it says
    own = [c for c in claims if not c["mechanism"].startswith("no_")]
    engaged = [c["mechanism"] for c in own if c["credited"]]
    idle = [(c["mechanism"], c["verdict"] + (f": no {', '.join(c['missing'])} for this quant"
                                             if c.get("missing") else ""))
            for c in own if not c["credited"]]
    family = (dispatch or {}).get("family")
    if dispatch is not None and not dispatch.get("credited") and family in engaged:
        engaged.remove(family)  # its buffer was there, but the ledger saw its kernels fall back
        idle.append((family, f"ledger {dispatch.get('text')}"))
    bundle = len({c["mechanism"] for c in own}) > 1
    why: list[str] = []
    if not ev:
        why.append("no evidence run")
    elif ev.get("status") != "ok" and not elsewhere:
        why.append(f"evidence run {ev.get('status')}")
    why += [f"evidence: {c['mechanism']} {c['verdict']}" for c in claims
            if not c["credited"] and (c["mechanism"].startswith("no_") or not bundle)]
    if dispatch is not None and not dispatch.get("credited") and not bundle:
        why.append(f"ledger: {dispatch.get('text')}")
    crashes = elsewhere
    if not elsewhere and rung and rung.get("status") in ("crashed", "failed"):
        crashes = {"status": rung["status"], "reason": rung.get("reason"), "log": rung.get("log")}
        why.append(f"the rung {rung['status']} elsewhere: {rung.get('reason')}")
    if not engaged and not why:
        why.append("no mechanism of the rung engaged: " + "; ".join(f"{m} {r}" for m, r in idle))
    path = (dispatch or {}).get("ran")
    weights = weight_share(ev, model_bytes)
    credited = not why and bool(engaged)
    notes = [f"ran: {path}"] if path else []
    if elsewhere:
        notes.append(f"in {phase} only: it crashes in {' and '.join(elsewhere['phases'])} "
                     f"({elsewhere['reason']})")
    if weights:
        notes.append(f"extra buffers hold {weights['text']}")
    if len(engaged) > 1:
        notes.append(f"one rung bundles {', '.join(engaged)}; its toggle (serving) "
                     "separates them")
        seen = [f"{c['mechanism']}: {', '.join(c['seen'])}" for c in own
                if c["credited"] and c.get("seen") and c["mechanism"] in engaged]
        if seen:
            notes.append("evidence " + "; ".join(seen))
    not_engaged = "; ".join(f"{m} ({r})" for m, r in idle)
    tail = f" ({'; '.join(notes)})" if notes else ""
    if call not in ("faster", "slower"):
        text = "no gain called: nothing to credit" + tail
    elif credited:
        text = (f"credited to {', '.join(engaged)}{tail}"
                + (f"; not engaged: {not_engaged}" if not_engaged else ""))
    else:
        text = "not credited: " + "; ".join(why) + tail
    return {"credited": credited and call in ("faster", "slower"), "text": text,
            "crashes": crashes, "path": path, "weights": weights,
            "engaged": engaged if credited else [],
            "not_engaged": [{"mechanism": m, "reason": r} for m, r in idle]}


def dispatch_for(ledger_cells: Sequence[Mapping[str, Any]], rung: str, quant: str,
                 phase: str | None, threads: int, workload: str | None = None
                 ) -> dict[str, Any]:
    """The ledger cell behind a speedup: same rung, quant and phase; same thread count if the
    sweep has it, else the nearest (said so). Credit only on DISPATCHED or HYBRID."""
    if phase is None:
        return {"verdict": None, "credited": False,
                "text": "mixed workload: no single dispatch phase, not credited"}
    same = [c for c in ledger_cells if c["rung"] == rung and c["quant"] == quant
            and c["phase"] == phase]
    if not same:
        return {"verdict": None, "credited": False, "text": "no ledger cell: not credited"}
    cell = min(same, key=lambda c: (abs(c["threads"] - threads), c["threads"]))
    share = f", {cell['share'] * 100:.1f} % of matmul dispatches" if (
        cell.get("share") is not None and cell["verdict"] == "HYBRID") else ""
    where = ([] if cell["threads"] == threads else [f"{cell['threads']} threads"]) + (
        [f"its {phase} workload {cell['workload']}"] if workload and cell["workload"] != workload
        else [])
    note = f" (ledger at {', '.join(where)})" if where else ""
    credited = cell["verdict"] in CREDITED
    fam = ((cell.get("L3") or {}).get("families") or {}).get(cell.get("family") or "", {})
    ran = ", ".join(f"{v} {n}" for v, n in sorted((fam.get("variants") or {}).items(),
                                                  key=lambda kv: -kv[1]) if n) or None
    return {"verdict": cell["verdict"], "share": cell.get("share"), "credited": credited,
            "ran": ran, "family": cell.get("family"),
            "threads": cell["threads"], "workload": cell["workload"],
            "text": f"{cell['verdict']}{share}{note}"
                    + ("" if credited else
                       f": gain not credited to {cell.get('family') or 'its mechanism'}")}


LITTLE_TIME = 0.25  # a credited family holding less of the sampled time than this is said so


def time_share(hot: Mapping[str, Any] | None, ledger_cell: Mapping[str, Any]) -> dict[str, Any]:
    """The ledger family's share of the sampled time in the matching hotspot cell."""
    fam = ledger_cell.get("family")
    if hot is None:
        return {"share": None, "text": "hotspots off (hotspots.enabled)"}
    if hot.get("unavailable"):
        return {"share": None, "text": f"not sampled: {hot['unavailable']}"}
    same = [c for c in hot["cells"] if c["rung"] == ledger_cell["rung"]
            and c["quant"] == ledger_cell["quant"] and c["phase"] == ledger_cell.get("phase")]
    exact = [c for c in same if c["threads"] == ledger_cell["threads"]]
    if not exact:
        at = ", ".join(sorted({f"t{c['threads']}" for c in same}))
        return {"share": None, "text": f"not sampled at {ledger_cell['threads']} thread(s)"
                                       + (f" (sampled at {at})" if at else "")}
    c = exact[0]
    if c.get("status") != "ok":
        return {"share": None, "text": f"not sampled: {c.get('reason')}"}
    share = float((c.get("groups") or {}).get(fam or "", 0.0))
    text = f"{fam} {share * 100:.0f} % of the sampled time"
    if ledger_cell.get("verdict") in CREDITED and share < LITTLE_TIME:
        text += " (it ran, but most of the time went elsewhere)"
    return {"share": round(share, 4), "text": text}


def kernel_flag(kt: Mapping[str, Any] | None, rung: str) -> dict[str, Any] | None:
    """A rung whose kernels fail ggml's correctness test (or its vendor library's own tests),
    flagged beside its speedup."""
    v = next((x for x in (kt or {}).get("vendor") or [] if x["rung"] == rung), None)
    r = next((x for x in (kt or {}).get("rungs") or [] if x["rung"] == rung), None)
    if v is not None and (r is None or v.get("status") != "ok"):
        return {"flag": v.get("status") in ("failed", "crashed"),
                "text": f"KleidiAI's own tests: {v['summary']}"}
    if r is None:
        return None
    fns = r.get("fns") or {}
    if fns.get("status") != "ok":
        return {"flag": False, "text": f"kernel tests not run: {fns.get('reason')}"}
    if r["failed_checks"]:
        return {"flag": True, "text": f"kernels fail ggml's test-quantize-fns: "
                                      f"{', '.join(r['failed_checks'])}"}
    return {"flag": False, "text": f"kernels pass test-quantize-fns ({fns['passed']} checks)"}


def roofline(cell: Mapping[str, Any], bandwidth_gbps: float | None,
             peak_gflops: float | None) -> dict[str, Any]:
    """Decode: tokens/s as a share of bandwidth / model bytes (every weight read once per
    token). Prefill: FLOP/s (2 x parameters per token) as a share of a known peak, if given."""
    phase = workload_phase(cell.get("workload_spec") or {})
    out: dict[str, Any] = {"phase": phase, "model_bytes": cell.get("model_size"),
                           "n_params": cell.get("model_n_params"), "bound_tps": None,
                           "rungs": {}}
    if phase == "decode" and bandwidth_gbps and cell.get("model_size"):
        out["kind"] = "memory bandwidth"
        out["bound_tps"] = bandwidth_gbps * 1e9 / cell["model_size"]
    elif phase == "prefill" and peak_gflops and cell.get("model_n_params"):
        out["kind"] = "peak FLOP/s"
        out["bound_tps"] = peak_gflops * 1e9 / (2 * cell["model_n_params"])
    else:
        out["kind"] = None
        out["why_not"] = ("no bandwidth probe" if phase == "decode" else
                          "no peak FLOP/s given (report.peak_gflops)" if phase == "prefill"
                          else "mixed workload")
    for name, r in cell["rungs"].items():
        if out["bound_tps"] and r.get("median"):
            out["rungs"][name] = r["median"] / out["bound_tps"]
    return out


def bench_cells(bench_docs: Sequence[Mapping[str, Any]], plan: Mapping[str, Any],
                stats_cfg: Mapping[str, Any], missing: list[dict[str, str]]
                ) -> list[dict[str, Any]]:
    """Every bench cell summarized and judged (``stats.summarize``: with the run's dependence
    between rounds when ``stats_cfg`` carries it), sorted; an unreadable or uncombinable cell
    is listed as missing, never guessed."""
    cells = []
    for doc in bench_docs:
        try:
            summary = stats.summarize(doc, plan["ladder_order"], plan.get("control"),
                                      plan.get("twin"), stats_cfg)
        except LadderError as exc:
            missing.append({"file": f"bench {doc.get('quant')}/{doc.get('workload')}",
                            "problem": str(exc)})
            continue
        cells.append({**summary, **cell_metadata(doc)})
    cells.sort(key=lambda c: (c["model"]["model"], c["quant"], c["workload"], c["threads"]))
    return cells


def cell_metadata(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What a cell's samples file says about how it was measured, carried into the report."""
    out: dict[str, Any] = {
        "model": doc["model"], "rung_status": doc["rungs"], "rounds": doc["rounds"],
        "warmup_rounds": doc.get("warmup_rounds", 0), "repetitions": doc.get("repetitions", 1),
        "retired": (doc.get("retire") or {}).get("retired") or {}, "cpus": doc.get("cpus"),
        "seed": doc["seed"], "orders": doc["orders"], "workload_spec": doc["workload_spec"]}
    if doc.get("auto_repetitions"):  # calibrated per rung from the warmup round's speed
        out["repetitions_by_rung"] = doc.get("repetitions_by_rung")
        out["auto_repetitions"] = doc["auto_repetitions"]
    measured = [x for x in doc["samples"] if not x.get("warmup")] or doc["samples"]
    out["model_size"] = measured[0].get("model_size") if measured else None
    out["model_n_params"] = next((x["model_n_params"] for x in measured
                                  if x.get("model_n_params")), None)
    return out


def quality_section(plan: Mapping[str, Any], quality: Sequence[str],
                    missing: list[dict[str, str]],
                    evidence: Mapping[str, Mapping[str, Any]] | None = None
                    ) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """Quality records per quant and rung, each judged for drift against the reference (and,
    for a KleidiAI rung with SME, which of its kernel sets ran at the run's threads)."""
    by_quant: dict[str, dict[str, Any]] = {}
    tolerance = plan.get("quality_tolerance") or {"ppl_rel": 0.01, "kld_mean": 0.01}
    for q in load_each(quality, missing):
        by_quant.setdefault(str(q.get("quant", "?")).lower(), {})[q.get("rung", "?")] = q
    for quant, by_rung in by_quant.items():
        ref = by_rung.get(plan.get("reference") or "")
        for rec in by_rung.values():
            rec["drift"] = judge_drift(rec, ref, tolerance)
            scope = sme_scope(rec, ((evidence or {}).get(quant) or {}).get(rec.get("rung")))
            if scope:
                rec["drift"]["scope"] = scope
                rec["drift"]["text"] += f" ({scope})"
    return by_quant, tolerance


def annotate_steps(cells: Sequence[dict[str, Any]], *, plan: Mapping[str, Any],
                   evidence: Mapping[str, Mapping[str, Any]],
                   quality: Mapping[str, Mapping[str, Any]], ledger_doc: Any,
                   kt: Any, rungs: Sequence[Mapping[str, Any]], bw: float | None,
                   peak: float | None, price: Any) -> None:
    """Each cell's roofline and cost, and each step's credit, drift, dispatch, kernels and
    attribution: what the report says beside a ratio."""
    ledger_cells = ledger_doc["cells"] if ledger_doc else []
    rung_by_name = {r["name"]: r for r in rungs}
    for cell in cells:
        cell["roofline"] = roofline(cell, bw, peak)
        cell["cost"] = cost_table(cell, price)
        phase = workload_phase(cell.get("workload_spec") or {})
        for step in cell["steps"] + cell["vs_floor"]:
            ev = evidence.get(cell["quant"], {}).get(step["rung"])
            step["credit"] = credit_line(ev)
            q = quality.get(cell["quant"], {}).get(step["rung"])
            step["drift"] = q["drift"] if q else None
            step["dispatch"] = (dispatch_for(ledger_cells, plan_twin(plan, step["rung"]),
                                             cell["quant"], phase, cell["threads"],
                                             cell["workload"])
                                if ledger_doc else None)
            step["kernels"] = kernel_flag(kt, plan_twin(plan, step["rung"]))
            step["attribution"] = attribution(
                step["verdict"]["call"], ev, step["dispatch"], rung_by_name.get(step["rung"]),
                cell.get("model_size"), phase)


def provenance_section(*, src: Mapping[str, Any], host_doc: Mapping[str, Any],
                       plan: Mapping[str, Any], ran_on: Any, model_docs: Any,
                       stats_cfg: Mapping[str, Any], multiplicity: Any, pooled: Any,
                       dependence: Any = None) -> dict[str, Any]:
    return {
        "source": {k: src.get(k) for k in ("identity", "source_id", "upstream_commit",
                                           "upstream_commit_verified",
                                           "upstream_commit_claimed", "label", "tree")},
        "host": host_doc,
        "host_config": plan.get("host"),
        "ran_on": ran_on,
        "quantizer_build_key": plan.get("quantizer_build_key"),
        "models": model_docs,
        "stats": {**dict(stats_cfg), "method": wording.METHOD,
                  "unpaired_method": wording.UNPAIRED_METHOD, "rule": wording.RULE,
                  "multiplicity": multiplicity, "pooled_checks": pooled,
                  "dependence": dependence},
        "tools": tool_versions(),
    }


CORE_INPUTS = ("source", "host", "builds", "models", "evidence", "bench", "quality", "ledger",
               "bandwidth")
ORDER_ONLY_INPUTS = ("gate",)  # inputs the rule waits for, never read here


def check_inputs(inputs: Mapping[str, Any]) -> None:
    """Every named input is the core's or a registered section's: a name neither reads would be
    left out of the report without a word."""
    known = {*CORE_INPUTS, *ORDER_ONLY_INPUTS, *(n for s in sections.SECTIONS for n in s.inputs)}
    unknown = sorted(set(inputs) - known)
    if unknown:
        raise LadderError(f"report inputs {unknown}: neither the report's core nor a registered "
                          "section (ladder.sections) reads them")


def build_doc(*, plan: Mapping[str, Any], stats_cfg: Mapping[str, Any],
              inputs: Mapping[str, Sequence[str]], report_cfg: Mapping[str, Any] | None = None,
              cost: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report JSON from the host_report rule's named inputs (file lists): the core's
    (``CORE_INPUTS``; source and host are one file each) and each registered section's
    (``ladder.reporting.sections``); a name not given is an empty list."""
    def files(name: str) -> list[str]:
        got = inputs.get(name) or []
        return [got] if isinstance(got, str) else list(got)

    check_inputs(inputs)
    missing: list[dict[str, str]] = []
    src = load_first(files("source"), missing) or {}
    host_doc = load_first(files("host"), missing) or {}
    build_docs = {b.get("build_key"): b for b in load_each(files("builds"), missing)}
    ev_docs = load_each(files("evidence"), missing)
    bench_docs = load_each(files("bench"), missing)
    dependence = stats.run_dependence(bench_docs, plan.get("control"), plan.get("twin"),
                                      stats_cfg["confidence"])
    # every summary of the run (its sections' too) takes the dependence its A/A pairs measured
    run_stats = stats.with_dependence(stats_cfg, dependence)
    cells = bench_cells(bench_docs, plan, run_stats, missing)
    aa = stats.aa_family(cells, stats_cfg["confidence"])  # the A/A checks: one family
    multiplicity = stats.fdr_adjust(cells, stats_cfg["confidence"],
                                    floor=(plan.get("ladder_order") or [None])[0])
    multiplicity["aa_checks"] = aa
    multiplicity["text"] += " " + aa["text"]
    spent = stats.budget_summary(cells)  # how the anytime-valid design's comparisons ended
    if spent:
        multiplicity["budget"] = spent
        multiplicity["text"] += " " + spent["text"]
    pooled = stats.pooled_checks(cells, stats_cfg["confidence"])
    rungs = []
    for pr in plan["rungs"]:
        b = build_docs.get(pr["build_key"])
        rungs.append({**pr, **rung_status(pr, b, ev_docs, cells),
                      "source": own_source(b, src),
                      "build": {k: (b or {}).get(k) for k in
                                ("status", "reason", "log", "configure_wall_s", "build_wall_s",
                                 "ccache", "material")} if b else None})
    evidence_by_quant: dict[str, dict[str, Any]] = {}
    for ev in ev_docs:
        evidence_by_quant.setdefault(str(ev.get("quant", "?")).lower(), {})[ev.get("rung", "?")] = ev
    quality_by_quant, tolerance = quality_section(plan, files("quality"), missing,
                                                  evidence_by_quant)
    bw_doc = load_first(files("bandwidth"), missing)
    peak = (report_cfg or {}).get("peak_gflops")
    price, price_note = host_price(cost, (plan.get("host") or {}).get("instance"))
    ledger_doc = load_first(files("ledger"), missing)
    extra = {s.key: s.builder()(sections.SectionContext(
        plan=plan, stats_cfg=run_stats, files={n: files(n) for n in s.inputs},
        missing=missing, price=price))
        for s in sections.SECTIONS}
    hot, kt = extra.get("hotspots"), extra.get("kernel_tests")
    for lc in ledger_doc["cells"] if ledger_doc else []:
        lc["time"] = time_share(hot, lc)
    annotate_steps(cells, plan=plan, evidence=evidence_by_quant, quality=quality_by_quant,
                   ledger_doc=ledger_doc, kt=kt, rungs=rungs,
                   bw=(bw_doc or {}).get("bandwidth_gbps"), peak=peak, price=price)
    return {
        "format": FORMAT,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "ladder": plan["ladder"], "ladder_order": plan["ladder_order"],
        # an emulated host's report is evidence only: no throughput (README "Emulated lane")
        "emulated": plan.get("emulated"),
        "control": plan.get("control"), "twin": plan.get("twin"),
        "provenance": provenance_section(
            src=src, host_doc=host_doc, plan=plan,
            ran_on=check_ran_on(plan, host_doc, bench_docs),
            model_docs=load_each(files("models"), missing), stats_cfg=stats_cfg,
            multiplicity=multiplicity, pooled=pooled, dependence=dependence),
        "rungs": rungs,
        "evidence": evidence_by_quant,
        "negative_controls": negative_controls(rungs, evidence_by_quant),
        "quality": quality_by_quant,
        "reference": plan.get("reference"),
        "quality_tolerance": tolerance,
        "cells": cells,
        "reconciliation": thread_reconciliation(cells, plan["ladder_order"],
                                                stats_cfg["confidence"]),
        "ledger": ledger_doc,
        "bandwidth": bw_doc,
        "peak_gflops": peak,
        "cost": {"price": price, "note": price_note,
                 "prices": list((cost or {}).get("prices") or [])},
        **extra,
        "missing": missing,
    }


def check_ran_on(plan: Mapping[str, Any], host_doc: Mapping[str, Any],
                 bench_docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Where each measured cell ran (node, SLURM job); all on the CPU the host facts describe.

    A native build is keyed by the CPU its host's facts describe: a cell measured on another
    CPU (a mixed partition) is not that rung's result, and the report refuses it by name.
    """
    name = (plan.get("host") or {}).get("name", "?")
    out = []
    for doc in bench_docs:
        brief = doc.get("host") or {}
        cell = f"{doc.get('quant')}/{doc.get('workload')}/t{doc.get('threads')}"
        if host_doc.get("identity") and brief.get("identity") not in (None, host_doc["identity"]):
            raise LadderError(
                f"host {name}: bench cell {cell} ran on {brief.get('hostname')} "
                f"({brief.get('cpu_model')}, CPU identity {brief.get('identity')}), but the "
                f"host's facts were read on {host_doc.get('hostname')} "
                f"({host_doc.get('cpu_model')}, {host_doc.get('identity')}): its jobs reach "
                "more than one kind of CPU; pin the host to one instance type")
        out.append({"cell": cell, **{k: brief.get(k) for k in
                                     ("hostname", "identity", "slurm_job_id", "slurm_partition")}})
    return out


def tool_versions() -> dict[str, str | None]:
    """Versions of the Python tools the report was assembled with."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("snakemake", "numpy", "scipy", "pandas", "matplotlib", "jinja2", "jsonschema",
                 "gguf", "huggingface-hub"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def plan_twin(plan: Mapping[str, Any], rung: str) -> str:
    """The control is its twin's build: it has the twin's ledger cells."""
    twin = plan.get("twin")
    return str(twin) if rung == plan.get("control") and twin else rung


def write_report(*, plan: Mapping[str, Any], stats_cfg: Mapping[str, Any],
                 inputs: Mapping[str, Sequence[str]], out_json: str,
                 report_cfg: Mapping[str, Any] | None = None,
                 cost: Mapping[str, Any] | None = None) -> None:
    """The report JSON, checked against workflow/schemas/report.schema.yaml (and each section's
    fragment) before writing."""
    from ladder.reporting.render import validate

    doc = build_doc(plan=plan, stats_cfg=stats_cfg, inputs=inputs, report_cfg=report_cfg,
                    cost=cost)
    doc["plan"] = dict(plan)
    validate(doc, out_json)
    atomic_write_json(out_json, doc)


def write_rung_card(*, rung: Mapping[str, Any], inputs: Sequence[str], out_json: str) -> None:
    """A single rung's build and evidence, for `snakemake results/rungs/<rung>.json`."""
    docs = [read_json(p) for p in inputs]
    build = next((d for d in docs if d.get("format", "").startswith("ladder-build")), None)
    ev = [d for d in docs if d.get("format", "").startswith("ladder-evidence")]
    atomic_write_json(out_json, {
        "format": "ladder-rung/1", "rung": dict(rung),
        "build": {k: (build or {}).get(k) for k in ("status", "reason", "outcome", "log",
                                                    "build_key", "configure_wall_s",
                                                    "build_wall_s")},
        "evidence": [{k: e.get(k) for k in ("quant", "status", "reason", "weight_buffers_mib",
                                            "system_info", "vendor_lines", "claims")}
                     for e in ev],
    })
