"""The report's first screen (issue 33): the ladder as one table per model and the cards it
points to.

Table: one row per quant x workload x threads; a column per rung with its tokens/s (median of
the rounds) and, between two rungs, the step's verdict mark with its ratio only when called.
Cards: what belongs to a rung x quant rather than to a workload (evidence and credit, dispatch
per phase, quality drift, the kernels alone), said once and referenced from the table.
Computed from the report JSON alone, so an older report re-renders with it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ladder.analysis.stats import phase_of
from ladder.analysis.wording import fmt_ratio

# the mark a step's verdict gets in the table: called steps carry their ratio beside it
MARKS = {"faster": "▲", "slower": "▼", "equivalent": "=", "inconclusive": "?",
         "disturbed": "!", "insufficient data": "·", "unjudged": "⊘"}
# a call whose interval reaches inside ±δ ("by less than δ not ruled out"): hollow
HEDGED = {"faster": "△", "slower": "▽"}


def phase(cell: Mapping[str, Any]) -> str:
    """A cell's phase (reports from before it was recorded: from its workload)."""
    return cell.get("phase") or phase_of(cell.get("workload_spec") or {})


def card_id(quant: str, rung: str) -> str:
    return f"card-{quant}-{rung}"


def step_mark(step: Mapping[str, Any]) -> dict[str, Any]:
    v = step["verdict"]
    call = v["call"]
    att = step.get("attribution") or {}
    cell = {"call": call, "mark": MARKS.get(call, "?"), "title": v["text"],
            "credited": bool(att.get("credited")),
            "flag": bool((step.get("drift") or {}).get("flag")) or bool(att.get("crashes"))}
    if call in ("faster", "slower"):
        if v.get("beyond_threshold") is False:
            cell["mark"] = HEDGED[call]
        ci = v.get("interval")
        cell["text"] = (f"{fmt_ratio(step['ratio']['estimate'])} {cell['mark']}"
                        + (f" [{fmt_ratio(ci[0])}-{fmt_ratio(ci[1])}]" if ci else ""))
    elif call == "equivalent":
        cell["text"] = f"= (±{v['threshold'] * 100:g} %)"
    elif call == "inconclusive" and v.get("resolving_power") is not None:
        cell["text"] = f"? (±{v['resolving_power'] * 100:.0f} %)"
    else:
        cell["text"] = cell["mark"]
    return cell


def ladder_table(cells: Sequence[Mapping[str, Any]], ladder: Sequence[str]
                 ) -> list[dict[str, Any]]:
    """One table per model: the rungs in ladder order, the steps between them, and a row per
    cell with each rung's tokens/s (or why it has none) and each step's mark."""
    out: dict[str, dict[str, Any]] = {}
    for c in cells:
        model = c["model"]["model"]
        t = out.setdefault(model, {"model": model, "rows": [], "rungs": [],
                                   "requantized": set()})
        if c["model"].get("requantized"):
            t["requantized"].add(c["quant"])
        speeds, status = {}, {}
        for name in ladder:
            med = (c["rungs"].get(name) or {}).get("median")
            st = (c.get("rung_status") or {}).get(name) or {}
            if med:
                speeds[name] = med
            elif st.get("status") and st["status"] != "measured":
                status[name] = st["status"]
            if (med or st) and name not in t["rungs"]:
                t["rungs"].append(name)
        steps = {(s["base"], s["rung"]): step_mark(s) for s in c.get("steps") or []}
        t["rows"].append({"quant": c["quant"], "workload": c["workload"],
                          "threads": c["threads"], "phase": phase(c),
                          "speeds": speeds, "status": status, "steps": steps,
                          "anchor": f"cell-{c['quant']}-{c['workload']}-t{c['threads']}"})
    tables = []
    for t in out.values():
        t["rungs"] = [n for n in ladder if n in t["rungs"]]
        t["steps"] = list(zip(t["rungs"], t["rungs"][1:]))
        for row in t["rows"]:  # keyed for templates: "base>rung"
            row["steps"] = {f"{b}>{r}": row["steps"].get((b, r)) for b, r in t["steps"]}
        t["requantized"] = sorted(t["requantized"])
        tables.append(t)
    return tables


def rung_cards(cells: Sequence[Mapping[str, Any]], ladder: Sequence[str]) -> list[dict[str, Any]]:
    """Per rung x quant (each rung above the floor): its evidence, which of its mechanisms
    engaged and which did not (with the reason), dispatch per phase, quality drift and the
    kernels alone; and the workloads whose step it stands behind."""
    cards: dict[tuple[str, str], dict[str, Any]] = {}
    for c in cells:
        for s in c.get("steps") or []:
            key = (c["quant"], s["rung"])
            card = cards.setdefault(key, {
                "id": card_id(*key), "quant": c["quant"], "rung": s["rung"], "base": s["base"],
                "evidence": s.get("credit"), "engaged": [], "not_engaged": [],
                "dispatch": {}, "drift": None, "kernels": None, "crash": None,
                "credit": None, "steps": []})
            att = s.get("attribution") or {}
            for m in att.get("engaged") or []:
                if m not in card["engaged"]:
                    card["engaged"].append(m)
            for ne in att.get("not_engaged") or []:
                if ne not in card["not_engaged"]:
                    card["not_engaged"].append(ne)
            if att.get("credited") or card["credit"] is None:
                card["credit"] = att.get("text")
            if att.get("crashes"):
                card["crash"] = att["crashes"]
            if s.get("dispatch"):
                card["dispatch"].setdefault(phase(c), s["dispatch"]["text"])
            if s.get("drift"):
                card["drift"] = s["drift"]
            if s.get("kernels"):
                card["kernels"] = s["kernels"]
            card["steps"].append(f"{c['workload']} t{c['threads']}: {s['verdict']['call']}")
    order = {n: i for i, n in enumerate(ladder)}
    return sorted(cards.values(), key=lambda k: (k["quant"], order.get(k["rung"], 99)))


def overview(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The first screen of a report (None-safe for an emulated host: it has no cells)."""
    cells = doc.get("cells") or []
    ladder = list(doc.get("ladder_order") or [])
    return {"tables": ladder_table(cells, ladder), "cards": rung_cards(cells, ladder),
            "marks": MARKS}
