"""Two ladder runs side by side, and a regression gate between them.

    ladder compare BASE.json NEW.json [--out DIR] [--fail-on slower,lost-dispatch,new-drift]

BASE and NEW are report JSONs (``ladder-report/1``) of two runs: two llama.cpp sources, two
compilers, two config changes, or two hosts. For every rung x quant x workload x threads they
share, NEW/BASE is the ratio of the two runs' geometric-mean round throughputs with a Welch
t-interval on the log scale (the rounds of two runs pair nothing), judged against the larger of
the two runs' noise floors by the ladder's rule (``stats.verdict``: called when Welch's test is
significant and the estimate lies beyond that floor; equivalent when the 90 % interval lies inside
it; otherwise inconclusive). Beside
it: any change of the rung's dispatch verdict, evidence claims and drift flag. Cells whose
model file, workload or thread count differ are listed as not comparable, never compared.

Writes compare.json, compare.md and compare.html (standalone) to --out (default: the current
directory) and prints the Markdown. ``--fail-on`` makes it exit 3 when a selected kind of
change is found, naming the cells: ``slower`` (a called slowdown), ``lost-dispatch`` (a cell
DISPATCHED/HYBRID in BASE that is not in NEW), ``new-drift`` (a drift flag NEW has and BASE
had not), ``lost-claim`` (an evidence claim credited in BASE, not in NEW).

Serving under load is compared the same way where both runs measured it with the same load
spec: per level, judged metric (p50/p99 TTFT and TPOT, as rates: "slower" means a higher
latency) and rung, NEW/BASE of the runs' per-round values (a failed round at the request
timeout, as in each run's own judgement), against the larger of the two runs' noise floors. A
called slowdown there is a ``slower`` finding too, so a serving regression fails the gate.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.analysis import stats
from ladder.measuring.dispatch import CREDITED
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.analysis.load_view import censored_words, grid_sd, grid_step

FORMAT = "ladder-compare/1"
REPORT_FORMAT = "ladder-report/1"
GATES = ("slower", "lost-dispatch", "new-drift", "lost-claim")
METHOD = ("NEW/BASE: ratio of the runs' geometric-mean round throughputs, Welch t-interval on the "
          "log scale; called when Welch's test is significant and the estimate lies beyond the "
          "larger of the two runs' noise floors, equivalent when the 90 % interval lies inside "
          "it. Two runs on one machine also differ by run-to-run drift, which "
          "neither run's interleaved floor sees: read a call near the floor with that in mind.")


def load_report(path: str) -> dict[str, Any]:
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("format") != REPORT_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise LadderError(f"{path}: not a ladder report (format {got!r}, expected "
                          f"{REPORT_FORMAT!r})")
    if doc.get("emulated"):
        raise LadderError(f"{path}: an emulated host's report has no throughput to compare")
    return doc


def _key(cell: Mapping[str, Any]) -> tuple[str, str, str, int]:
    return (cell["model"]["model"], cell["quant"], cell["workload"], int(cell["threads"]))


def _dispatch(doc: Mapping[str, Any]) -> dict[tuple[str, str, str, int], str]:
    cells = (doc.get("ledger") or {}).get("cells") or []
    return {(c["rung"], c["quant"], c["phase"], int(c["threads"])): c["verdict"] for c in cells}


def _claims(doc: Mapping[str, Any], quant: str, rung: str) -> dict[str, bool]:
    ev = (doc.get("evidence") or {}).get(quant, {}).get(rung) or {}
    return {c["mechanism"]: bool(c["credited"]) for c in ev.get("claims") or []}


def _drift(doc: Mapping[str, Any], quant: str, rung: str) -> bool | None:
    q = (doc.get("quality") or {}).get(quant, {}).get(rung) or {}
    return (q.get("drift") or {}).get("flag")


def _status(doc: Mapping[str, Any], cell: Mapping[str, Any], rung: str) -> str:
    """Why a rung has no rounds in a cell: its status there, else the run's (not applicable,
    build failed, crashed), with the reason."""
    st: Mapping[str, Any] = (cell.get("rung_status") or {}).get(rung) or next(
        (r for r in doc.get("rungs") or [] if r.get("name") == rung), {})
    status = st.get("status") or "no rounds"
    return status + (f", {st['reason']}" if st.get("reason") and status != "measured" else "")


def _phase(cell: Mapping[str, Any]) -> str | None:
    spec = cell.get("workload_spec") or {}
    if bool(spec.get("n_prompt")) == bool(spec.get("n_gen")):
        return None
    return "prefill" if spec.get("n_prompt") else "decode"


def _not_comparable(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    why = []
    if a["model"].get("sha256") != b["model"].get("sha256"):
        why.append("model file")
    if (a.get("workload_spec") or {}) != (b.get("workload_spec") or {}):
        why.append("workload spec")
    if a.get("round_statistic", "mean") != b.get("round_statistic", "mean") or \
            a.get("repetitions", 1) != b.get("repetitions", 1):
        why.append("round statistic (llama-bench repetitions and how a round is taken)")
    return why


def _judged_row(where: str, rung: str, rb: Mapping[str, Any], rn: Mapping[str, Any],
                floor: float | None, confidence: float) -> dict[str, Any]:
    """One rung of one cell in both runs: NEW/BASE of their per-round values, Welch."""
    r = stats.unpaired_ratio_ci(rb["round_means"], rn["round_means"], confidence)
    v = stats.verdict(r, floor)
    return {"cell": where, "rung": rung, "base_median": rb.get("median"),
            "new_median": rn.get("median"), "ratio": asdict(r), "floor": floor,
            "call": v.call, "text": v.text.replace("paired rounds", "rounds"), "changes": []}


def _floor(b: Mapping[str, Any], n: Mapping[str, Any]) -> float | None:
    floors = [b["noise_floor"].get("floor"), n["noise_floor"].get("floor")]
    return None if None in floors else max(floors)


LOAD_SPEC = ("n_prompt", "n_gen", "requests", "request_timeout_s", "limits", "rates",
             "concurrency", "burstiness", "server_args")


def _load(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return (doc.get("serving") or {}).get("load") or None


def compare_load(base: Mapping[str, Any], new: Mapping[str, Any], confidence: float,
                 names: tuple[str, str]) -> dict[str, Any]:
    """The serving-under-load cells of two runs (``compare``'s rows for them, and what is not
    comparable or measured in one run only)."""
    lb, ln = _load(base), _load(new)
    out: dict[str, Any] = {"rows": [], "not_comparable": [], "only_in": {}, "slower": []}
    if lb is None or ln is None:
        for name, ld in zip(names, (lb, ln)):
            if ld is not None:
                out["only_in"][name] = ["serving under load"]
        return out
    why = [k for k in LOAD_SPEC if (lb["spec"] or {}).get(k) != (ln["spec"] or {}).get(k)]
    why += [k for k in ("quant", "threads", "slots") if lb.get(k) != ln.get(k)]
    if why:
        out["not_comparable"].append({"cell": "serving under load", "differ": why})
        return out
    cb = {(c["level"], c["label"]): c["cell"] for c in lb.get("cells") or []}
    cn = {(c["level"], c["label"]): c["cell"] for c in ln.get("cells") or []}
    for key in [k for k in cb if k in cn]:
        b, n = cb[key], cn[key]
        where = f"load {key[0]} {key[1]}"
        for rung in [r for r in b["rungs"] if r in n["rungs"]]:
            rb, rn = b["rungs"][rung], n["rungs"][rung]
            if not rb.get("round_means") or not rn.get("round_means"):
                out["rows"].append({"cell": where, "rung": rung, "ratio": None,
                                    "call": "not measured",
                                    "text": "not measured in both runs"})
                continue
            row = _judged_row(where, rung, rb, rn, _floor(b, n), confidence)
            out["rows"].append(row)
            if row["call"] == "slower":
                out["slower"].append(f"{where} {rung}: {row['text']}")
    for which in ("capacity", "concurrency_capacity"):
        _compare_capacity(lb.get(which), ln.get(which), confidence, names, out)
    return out


CAPACITY_SPEC = ("target", "limits", "requests_per_probe", "search")
# where a later round's search starts does not change its grid, its ends or its resolution
PATH_ONLY = ("warm_start",)


def _capacity_spec(cap: Mapping[str, Any], key: str) -> Any:
    if key != "search":
        return cap.get(key)
    return {k: v for k, v in (cap.get(key) or {}).items() if k not in PATH_ONLY}


def _compare_capacity(cb: Mapping[str, Any] | None, cn: Mapping[str, Any] | None,
                      confidence: float, names: tuple[str, str], out: dict[str, Any]) -> None:
    """Each rung's serving capacity (by rate, or by concurrent streams), NEW/BASE of the runs'
    per-round capacities (Welch), the search's resolution carried as in the run
    (``load_view.capacity``): a capacity that fell is a "slower" finding."""
    streams = (cb or cn or {}).get("dimension") == "concurrency"
    what = "serving capacity (streams)" if streams else "serving capacity"
    where = "load capacity (streams)" if streams else "load capacity"
    if cb is None or cn is None:
        for name, cap in zip(names, (cb, cn)):
            if cap is not None:
                out["only_in"].setdefault(name, []).append(what)
        return
    why = [k for k in CAPACITY_SPEC if _capacity_spec(cb, k) != _capacity_spec(cn, k)]
    if why:
        out["not_comparable"].append({"cell": what, "differ": why})
        return
    floor = _floor(cb["cell"], cn["cell"])
    key = cn["value_key"]  # the round's value: capacity_rps or capacity_streams
    rb = {r["rung"]: r for r in cb["rungs"]}
    for r in cn["rungs"]:
        if r["rung"] not in rb:
            continue
        vb = [x[key] for x in rb[r["rung"]]["rounds"] if x[key]]
        vn = [x[key] for x in r["rounds"] if x[key]]
        if not vb or not vn:
            out["rows"].append({"cell": where, "rung": r["rung"], "ratio": None,
                                "call": "not measured", "text": "not measured in both runs"})
            continue
        # the grid the capacities were read off (a rate's resolution, a stream's one step)
        step = max(grid_step(vb, cb["resolution"]), grid_step(vn, cn["resolution"]))
        bias = step if step > 0 else None
        est = stats.unpaired_ratio_ci(vb, vn, confidence, grid_sd(step, 1))
        censored = "; ".join(f"{run}: {words}" for run, words in
                             ((names[0], censored_words(rb[r["rung"]])),
                              (names[1], censored_words(r))) if words)
        v = stats.judge({"ratio": asdict(est), "threshold": floor, "bias": bias,
                         "bias_why": "the search's resolution" if bias else None,
                         "no_equivalence": (f"{censored}: values outside the search only hide "
                                            "differences") if censored else None})
        row = {"cell": where, "rung": r["rung"],
               "base_median": rb[r["rung"]]["estimate"], "new_median": r["estimate"],
               "ratio": asdict(est), "floor": floor, "call": v["call"],
               "text": v["text"].replace("paired rounds", "rounds"), "changes": []}
        out["rows"].append(row)
        if v["call"] == "slower":
            out["slower"].append(f"{where} {r['rung']}: {v['text']}")


def compare(base: Mapping[str, Any], new: Mapping[str, Any], confidence: float = 0.95,
            base_name: str = "BASE", new_name: str = "NEW") -> dict[str, Any]:
    """Pure: two report documents in, the comparison out."""
    bcells = {_key(c): c for c in base["cells"]}
    ncells = {_key(c): c for c in new["cells"]}
    shared = sorted(set(bcells) & set(ncells))
    if not shared:
        raise LadderError(
            f"{base_name} and {new_name} share no model x quant x workload x threads cell "
            f"({base_name}: {sorted(bcells)[:4]}…; {new_name}: {sorted(ncells)[:4]}…)")
    bdisp, ndisp = _dispatch(base), _dispatch(new)
    rows: list[dict[str, Any]] = []
    not_comparable: list[dict[str, Any]] = []
    findings: dict[str, list[str]] = {g: [] for g in GATES}
    for key in shared:
        b, n = bcells[key], ncells[key]
        where = f"{key[1]} {key[2]} t{key[3]}"
        why = _not_comparable(b, n)
        if why:
            not_comparable.append({"cell": where, "differ": why})
            continue
        floor = _floor(b, n)
        phase = _phase(b)
        for rung in [r for r in b["rungs"] if r in n["rungs"]]:
            rb, rn = b["rungs"][rung], n["rungs"][rung]
            a_means, n_means = rb.get("round_means") or [], rn.get("round_means") or []
            if not a_means or not n_means:
                why = [f"{name}: {_status(doc, cell, rung)}" for name, doc, cell, means in
                       ((base_name, base, b, a_means), (new_name, new, n, n_means)) if not means]
                rows.append({"cell": where, "rung": rung, "ratio": None, "call": "not measured",
                             "text": "not measured in both runs (" + "; ".join(why) + ")"})
                continue
            row = _judged_row(where, rung, rb, rn, floor, confidence)
            if row["call"] == "slower":
                findings["slower"].append(f"{where} {rung}: {row['text']}")
            if phase:
                dk = (rung, key[1], phase, key[3])
                before, after = bdisp.get(dk), ndisp.get(dk)
                if before != after and (before or after):
                    row["changes"].append(f"dispatch {before or '-'} -> {after or '-'}")
                    if before in CREDITED and after not in CREDITED:
                        findings["lost-dispatch"].append(
                            f"{where} {rung}: dispatch {before} -> {after or 'not measured'}")
            cb, cn = _claims(base, key[1], rung), _claims(new, key[1], rung)
            for mech in sorted(set(cb) | set(cn)):
                if cb.get(mech) != cn.get(mech):
                    row["changes"].append(f"claim {mech}: {cb.get(mech)} -> {cn.get(mech)}")
                    if cb.get(mech) and not cn.get(mech):
                        findings["lost-claim"].append(f"{where} {rung}: {mech} no longer "
                                                      "credited")
            db, dn = _drift(base, key[1], rung), _drift(new, key[1], rung)
            if db != dn:
                row["changes"].append(f"drift flag {db} -> {dn}")
                if dn and not db:
                    findings["new-drift"].append(f"{where} {rung}: drift flagged in {new_name}")
            rows.append(row)
    load = compare_load(base, new, confidence, (base_name, new_name))
    findings["slower"] += load["slower"]
    only = {base_name: [" ".join(map(str, k)) for k in sorted(set(bcells) - set(ncells))],
            new_name: [" ".join(map(str, k)) for k in sorted(set(ncells) - set(bcells))]}
    for name, what in load["only_in"].items():
        only[name] += what
    return {
        "format": FORMAT,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "base": _run_summary(base, base_name), "new": _run_summary(new, new_name),
        "method": METHOD, "rows": rows, "load_rows": load["rows"],
        "not_comparable": not_comparable + load["not_comparable"],
        "only_in": only, "findings": {g: f for g, f in findings.items() if f},
    }


def _run_summary(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    src = doc["provenance"]["source"]
    host = doc["provenance"]["host"]
    return {"name": name, "generated_at": doc.get("generated_at"),
            "source": src.get("label") or src.get("upstream_commit"),
            "cpu": host.get("cpu_model"), "host": host.get("host") or host.get("hostname"),
            "compiler": (host.get("compiler") or {}).get("version")
            if isinstance(host.get("compiler"), dict) else host.get("compiler")}


def gate(result: Mapping[str, Any], fail_on: Sequence[str]) -> list[str]:
    """The findings that fail the gate (empty: it passes)."""
    unknown = [g for g in fail_on if g not in GATES]
    if unknown:
        raise LadderError(f"--fail-on: {', '.join(unknown)} unknown (known: {', '.join(GATES)})")
    return [f"{g}: {line}" for g in fail_on for line in result["findings"].get(g, [])]


def render(result: Mapping[str, Any]) -> tuple[str, str]:
    from ladder.reporting.render import environment

    env = environment("")
    return (env.get_template("compare.md.j2").render(doc=result),
            env.get_template("compare.html.j2").render(doc=result))
