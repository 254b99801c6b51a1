"""How the statistics are said: every sentence of a verdict, a control check, a cell's A/A
figures and rounds plan, the run's dependence, its multiplicity step and its pooled checks. Pure
functions of the numbers ``ladder.analysis.stats`` computes (asv keeps ``statistics.py`` free of
English the same way); the report, the terminal and the fleet print these sentences.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

METHOD = ("geometric mean of per-round ratios; paired t-test and Student t-interval on the mean "
          "log ratio")
UNPAIRED_METHOD = "ratio of geometric means; Welch t-test and interval on the difference of mean logs"
RULE = ("faster/slower: paired test significant after Benjamini-Hochberg across the run's "
        "comparisons and the estimate at least the phase's threshold; equivalent: the 90 % "
        "interval inside the threshold (TOST); otherwise inconclusive")
NO_THRESHOLD = ("not judged: no threshold (a cell it is compared with has no noise figures)")
NO_CONTROL = "no control check (control or twin not measured)"


SEQUENTIAL_METHOD = ("geometric mean of per-round ratios; repeated confidence interval and "
                     "p-value of a group-sequential design looking after every round up to "
                     "{max} (Kim-DeMets power-family spending, ρ = 2), valid whenever the cell "
                     "stopped")


def method(factor: float, design_max: int | None = None) -> str:
    """A paired estimate's method, with the dependence factor its standard error took."""
    base = SEQUENTIAL_METHOD.format(max=design_max) if design_max else METHOD
    return base + (f"; standard error x{math.sqrt(factor):.2f} for dependent rounds"
                   if factor > 1 else "")


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def fmt_p(p: float) -> str:
    return "p < 0.0001" if p < 1e-4 else f"p {p:.4f}" if p < 0.01 else f"p {p:.3f}"


def pct(x: float) -> str:
    """A threshold or target as a percentage, e.g. ±5 %."""
    return f"{x * 100:.3g} %"


# --- a comparison's verdict (stats.verdict, stats.judge) --------------------------------------
def stop(why: str, rounds: int, decision: str | None, budget_s: float | None,
         max_rounds: int, need: int | None = None, per_round_s: float | None = None) -> str:
    """Why a comparison of the anytime-valid design stopped being measured (issue 56), and for
    an open one what would decide it (``need`` rounds at the measured noise and effect; its
    minutes at the cell's pace ``per_round_s``)."""
    if why == "decided":
        return f"decided ({decision}) after {rounds} rounds"
    if why == "calls decided":
        return f"measured over the {rounds} rounds the cell's calls rest on"
    if need is None:
        more = "; its effect sits on the threshold: no number of rounds decides it"
    else:
        mins = f", ~{need * per_round_s / 60:.1f} min at this cell's pace" if per_round_s else ""
        more = f"; at the noise and effect measured, ~{need} rounds would decide it{mins}"
    if why == "futile":
        return (f"open after {rounds} rounds: out of the design's reach, stopped for futility"
                f"{more}")
    if why == "budget":
        spent = f" ({budget_s / 60:.1f} min)" if budget_s else ""
        return f"open after {rounds} rounds: the cell's budget{spent} was spent{more}"
    if why == "rung failed":
        return f"open after {rounds} rounds: a rung it compares stopped (failed or crashed)"
    return f"open after {rounds} rounds: the design's maximum ({max_rounds} rounds){more}"


def comparison_name(quant: str, workload: str, threads: int, rung: str, base: str) -> str:
    return f"{quant} {workload} t{threads}: {rung} over {base}"


def budget_summary(counts: Mapping[str, int], open_: Sequence[Mapping[str, Any]],
                   extra_min: float, unreachable: int) -> str:
    """One sentence of how the run's comparisons ended (the anytime-valid design)."""
    total = sum(counts.values())
    parts = ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
    text = f"Measured until decided: {total} comparisons ({parts})."
    if open_:
        names = "; ".join(o["comparison"] for o in open_[:6]) + ("; ..." if len(open_) > 6 else "")
        text += (f" Left open by the budget, the design's maximum or futility: {names}. At the "
                 "noise and "
                 f"effects measured, about {extra_min:.1f} more minutes of measuring would "
                 "decide them"
                 + (f" (and {unreachable} cell(s) hold an effect on ±δ that no number of "
                    "rounds decides)" if unreachable else "") + ".")
    return text


def with_stop(text: str, stop_text: str) -> str:
    return f"{text}; {stop_text}"


def cell_stop(seq: Mapping[str, Any] | None, aa_rounds: int) -> str:
    """How a cell of the anytime-valid design ended ("" for another design)."""
    if not seq:
        return ""
    futile = any(d.get("decision") == "futile" for d in (seq.get("decided") or {}).values())
    why = {"decided": "every comparison decided" + (" or out of reach" if futile else ""),
           "budget": "its budget spent",
           "cap": f"the design's maximum of {seq['max']} rounds"}.get(
        str(seq.get("stopped")), str(seq.get("stopped")))
    budget = seq.get("budget_s")
    return (f"; measured until {why} ({seq.get('measured_rounds')} rounds, "
            f"{float(seq.get('spent_s') or 0) / 60:.1f} min"
            + (f" of an allowance of {budget / 60:.1f} min" if budget else "")
            + f"; the A/A pair over {aa_rounds} of them)")


def insufficient(n: int) -> str:
    return f"insufficient data ({n} paired rounds; at least 3 needed)"


def interval(conf: float, lo: float, hi: float, adjusted: bool, widened: float,
             why: str | None) -> str:
    """The printed interval: its level, whether it is adjusted for selection, and what
    widened it (a failed control check's bias, a search's resolution; log scale)."""
    return (f"{round(conf * 100, 1):g}% CI {fmt_ratio(lo)}-{fmt_ratio(hi)}"
            + (", adjusted for selection" if adjusted else "")
            + (f", widened ±{math.expm1(widened) * 100:.1f} % by "
               f"{why or 'the failed control check'}" if widened else ""))


def called(estimate: float, call: str, beyond: bool, ci: str, p: float,
           threshold: float) -> str:
    hedge = "" if beyond else f", by less than {pct(threshold)} not ruled out"
    return f"{fmt_ratio(estimate)} {call}{hedge} ({ci}; {fmt_p(p)}; threshold ±{pct(threshold)})"


def equivalent(threshold: float, level: float, lo: float, hi: float) -> str:
    return (f"equivalent within ±{pct(threshold)} ({round(level * 100):g}% CI "
            f"{fmt_ratio(lo)}-{fmt_ratio(hi)} inside it)")


def power(mde: float | None, power_level: float) -> str:
    return (f"this comparison calls effects of ±{mde * 100:.1f} % with "
            f"{power_level * 100:.0f} % power" if mde is not None else "")


def inconclusive(reason: str, p: float, threshold: float, ci: str, power_text: str) -> str:
    """``reason``: under_threshold (significant, smaller than δ), after_adjustment (its own
    test passes, the run's multiplicity step does not), not_significant."""
    why = {"under_threshold": f"significant ({fmt_p(p)}) but under the ±{pct(threshold)} "
                              "threshold",
           "after_adjustment": f"{fmt_p(p)}, not significant after the multiplicity adjustment",
           "not_significant": f"not significant, {fmt_p(p)}"}[reason]
    return f"inconclusive ({why}: {ci}; {power_text})"


def not_equivalent(why_not: str, text: str) -> str:
    return f"inconclusive, not equivalent: {why_not} ({text})"


def disturbed(unresolved: Sequence[int], n: int) -> str:
    return (f"disturbed: round(s) {', '.join(map(str, unresolved))} stayed disturbed after "
            f"re-measuring ({n} clean rounds); not judged")


def unjudged(interim_alpha: float, text: str) -> str:
    return (f"unjudged: this cell's control check failed, so it judges only gross steps "
            f"(called at p ≤ {interim_alpha:g} after widening by the bias it measured); as "
            f"measured: {text}")


# --- a cell's A/A pair -----------------------------------------------------------------------
def control_check(passed: bool, estimate: float, conf: float, lo: float, hi: float,
                  bias: float) -> str:
    level = f"{round(conf * 100, 1):g}% CI {fmt_ratio(lo)}-{fmt_ratio(hi)}"
    if not passed:
        return (f"control check failed: the same build measured {fmt_ratio(estimate)} against "
                f"itself ({level} excludes 1); this cell's intervals are widened by "
                f"±{math.expm1(bias) * 100:.1f} % and it judges only gross steps (the rest: "
                "unjudged)")
    return f"control/twin {fmt_ratio(estimate)} ({level}) includes 1"


def plan_text(plan: Mapping[str, Any] | None) -> str:
    """How a cell's rounds were chosen (``protocol.plan_rounds``), or "" for fixed rounds."""
    if not plan:
        return ""
    if plan.get("sd") is None:
        return f"; rounds: {plan['why']}"
    upper = plan.get("planning_sd")
    return (f"; rounds chosen after a {plan['pilot']}-round pilot (per-round SD "
            f"{plan['sd'] * 100:.1f} %"
            + (f", {upper * 100:.1f} % at its upper {plan['assurance'] * 100:g} % limit"
               if upper and upper != plan["sd"] else "")
            + f"): {plan['rounds']} to call ±{plan['target'] * 100:g} %"
            + (f", capped at {plan['max']} (more were needed)" if plan.get("capped") else ""))


def aa_text(aa: Mapping[str, Any] | None, control: str | None, twin: str | None,
            plan: Mapping[str, Any] | None = None, power_level: float = 0.80) -> str:
    """One line of a cell's A/A figures (the same in the report, the terminal and the fleet),
    with how its rounds were chosen when they were (``plan``)."""
    if not aa:
        return "no A/A pair measured: no noise figures for this cell" + plan_text(plan)
    conf = round(aa["confidence"] * 100, 1)
    ci = aa["ci"]
    sd, se, mde = aa["sd_per_round"], aa["se"], aa["smallest_callable"]
    return (f"A/A ({control} vs {twin}): |control/twin - 1| = {aa['point'] * 100:.1f} %"
            + (f" ({conf:g}% CI {fmt_ratio(ci[0])}-{fmt_ratio(ci[1])})" if ci[0] else "")
            + (f"; per-round SD {sd * 100:.1f} %, SE {se * 100:.1f} %" if sd is not None else "")
            + (f"; calls effects of ±{mde * 100:.1f} % with {power_level * 100:.0f} % power at "
               f"{aa['rounds']} rounds (threshold ±{aa['threshold'] * 100:g} %)"
               if mde is not None else "")
            + plan_text(plan))


NOISE_FLOOR_DEFINITION = ("smallest effect called with 80 % power at this cell's rounds, from "
                          "the control/twin per-round spread and the phase's threshold")


# --- the run ---------------------------------------------------------------------------------
def dependence_method(lags: int) -> str:
    return (f"autocorrelations at lags 1-{lags} of the A/A log ratios, pooled over the run's "
            f"cells; variance factor (1 + 2·Σr) / (1 - {2 * lags}/n)")


def dependence_assumed(pairs: int, min_pairs: int, rho: float, factor: float) -> str:
    return (f"Dependence between rounds: {pairs} A/A round pairs are too few to measure it (at "
            f"least {min_pairs}); standard errors allow for a lag-1 correlation of {rho:g} "
            f"(the bound measured on real runs): x{math.sqrt(factor):.2f}.")


def dependence_measured(rho: Sequence[float], ci: Sequence[float], confidence: float,
                        pairs: int, cells: int, factor: float) -> str:
    return (f"Dependence between rounds: the A/A pairs' autocorrelation (about each cell's "
            f"mean, so about -1/n when rounds are independent) is {rho[0]:+.2f} at lag 1 "
            f"({round(confidence * 100):g}% CI {ci[0]:+.2f} to {ci[1]:+.2f}), "
            + ", ".join(f"{r:+.2f}" for r in rho[1:])
            + f" at lags 2-{len(rho)} ({pairs} pairs of consecutive rounds in {cells} cells)"
            + (f"; every standard error is widened x{math.sqrt(factor):.2f} for it."
               if factor > 1 else
               "; none to allow for: standard errors as for independent rounds."))


def aa_family(checks: int, failed: int, q: float) -> str:
    return (f"The {checks} cells' A/A checks are one Benjamini-Hochberg family at "
            f"{q * 100:g} % (each alone at {q * 100:g} % would fail one of {checks} honest "
            f"checks in {(1 - (1 - q) ** checks) * 100:.0f} % of runs): {failed} failed."
            if checks else "No A/A check in this run.")


def dependence_by_phase(texts: Mapping[str, str], factor: float) -> str:
    out = " ".join(f"{ph.capitalize()}: {t}" for ph, t in texts.items())
    if len(texts) > 1:
        out += (f" A summary without a phase (the serving sections) takes the larger: "
                f"x{math.sqrt(factor):.2f}.")
    return out


def _family(f: Mapping[str, Any]) -> str:
    shown = f["interval_confidence_selected"]
    return (f"{f['rejected']} of {f['comparisons']} passed the test" + (
        f" (intervals shown at the false-coverage-adjusted level of {shown * 100:.1f} %)"
        if shown else ""))


def multiplicity(did: Sequence[Mapping[str, Any]], q: float, floor: str | None) -> str:
    if floor is None:
        return (f"Multiplicity: the {did[0]['comparisons']} comparisons of this run form one "
                f"Benjamini-Hochberg family at a false-discovery rate of {q * 100:g} %; "
                f"{_family(did[0])}.")
    return (f"Multiplicity: two Benjamini-Hochberg families at a false-discovery rate of "
            f"{q * 100:g} % each, declared before measuring, so that the gross steps never "
            f"lower the bar for the moderate ones: the comparisons with the floor "
            f"`{floor}`, {_family(did[0])}; those between rungs above it, {_family(did[1])}.")


def label_check(cells: int, estimate: float, lo: float, hi: float, confidence: float,
                failed: bool) -> str:
    return (f"control/twin over {cells} cells: {fmt_ratio(estimate)} "
            f"({round(confidence * 100):g}% CI {fmt_ratio(lo)}-{fmt_ratio(hi)})"
            + (": a label bias, the run's ratios carry it" if failed else ", no label bias"))


def label_needs(cells: int) -> str:
    return f"pooled label check needs 3 cells with a control ({cells})"


def position_check(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "no position data"
    flagged = [r for r in rows if r["flag"]]
    return ("position in the round's order: " + ", ".join(
        f"{r['position'] + 1}. {r['effect'] * 100:+.1f} %" for r in rows)
        + ("; runs at " + ", ".join(str(r["position"] + 1) for r in flagged)
           + " differ beyond chance (the shuffled orders spread it as noise)"
           if flagged else "; no position effect beyond chance"))


# --- thread reconciliation (analysis.reconcile) ----------------------------------------------
RECONCILE_EMULATED = ("timing under emulation is not measured (QEMU's speed says nothing of a "
                      "real CPU's): no best thread count is named here; the dispatch ledger shows "
                      "which kernels ran at each thread count instead")


def _counts(ts: Sequence[int]) -> str:
    return " or ".join(f"{t}" for t in ts) + (" thread" if ts == [1] else " threads")


def best_count(rung: str, best: Mapping[str, Any], ledger: Mapping[int, str]) -> str:
    """A rung's best thread count, or its tied set, with the ledger's verdict there."""
    ts = list(best.get("threads") or [])
    if not ts:
        return f"{rung}: not measured"
    ran = [f"{_counts([t])}: {ledger[t]}" for t in ts if t in ledger]
    speeds = "; ".join(f"{_counts([t])} {v:.1f} tok/s" for t, v in
                       sorted((best.get("speeds") or {}).items()) if v)
    where = f" ({speeds})" + (f" (dispatch ledger at {'; '.join(ran)})" if ran else "")
    if best.get("decided"):
        return (f"{rung} is fastest at {_counts(ts)}" + (
            ", every other count called slower" if best.get("pairs") else "") + where)
    return (f"{rung}: best count not decided, tied at {_counts(ts)} (no other count called "
            f"slower than the fastest, {best['fastest']})" + where)


def reconcile_sentence(lower: str, higher: str, same: Sequence[Mapping[str, Any]],
                       bvb: Mapping[str, Any]) -> str | None:
    """What the step means once each rung runs at its own best count, when that differs from
    the step at equal threads (None when they agree and both rungs are best at one count)."""
    main = bvb.get("main")
    call = bvb.get("call")
    if not main or main.get("estimate") is None:
        return None
    tl, th = main["base_threads"], main["threads"]
    est = float(main["estimate"])
    same_calls = {p["threads"]: p["call"] for p in same}
    if call == "depends on the best count":
        return (f"{higher} over {lower} each at its best count depends on which tied count is "
                f"best: " + "; ".join(f"{p['threads']} over {p['base_threads']} threads "
                                      f"{p['verdict']['text']}" for p in bvb["pairings"]))
    if call == "faster" and th < tl:
        return (f"{higher} at {th} threads beats {lower} at its best ({tl} threads) by "
                f"{fmt_ratio(est)}: the higher rung needs fewer threads for more throughput")
    if call == "slower":
        gains = [t for t, c in same_calls.items() if c == "faster"]
        text = (f"{lower} at {tl} threads beats {higher} at its best ({th} threads) by "
                f"{fmt_ratio(1 / est)}")
        if gains:
            text += (f", though {higher} is faster at equal threads ("
                     + ", ".join(f"{t} threads" for t in gains) + ")")
        if th < tl:
            text += (f": {higher} stops gaining from threads beyond {th} (a thread cap or its "
                     f"kernels' scaling), which costs it throughput against {lower}'s {tl}")
        return text
    if call in ("equivalent", "inconclusive") and any(c in ("faster", "slower")
                                                     for c in same_calls.values()):
        return (f"{higher} over {lower} is a call at equal threads (" + ", ".join(
            f"{c} at {t}" for t, c in same_calls.items() if c in ("faster", "slower"))
            + f") but {call} with each at its best count ({th} over {tl} threads: "
            f"{main['verdict']['text']})")
    if any(c != call for c in same_calls.values()) and call in ("faster", "slower"):
        return (f"{higher} over {lower} at each one's best count ({th} over {tl} threads): "
                f"{main['verdict']['text']}; at equal threads: " + ", ".join(
                    f"{c} at {t}" for t, c in same_calls.items()))
    return None
