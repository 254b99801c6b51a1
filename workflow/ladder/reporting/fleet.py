"""The fleet report: the same rung x quant x workload across hosts, from their own reports.

    ladder fleet [results/hosts/*/report/ladder.json ...] [--out DIR]

Each host keeps its own noise floor (its control rung, measured interleaved on that host). A
cross-host ratio pairs nothing (rounds on two machines are independent), so it is the ratio of
the two hosts' geometric-mean round throughputs with a Welch t-interval on the log scale, judged
by the ladder's rule (``stats.verdict``) against the larger of the two hosts' noise floors: faster
or slower when Welch's test is significant and the estimate lies beyond it, equivalent when the
90 % interval lies inside it.
Cells are compared only when their metadata agree (same model file, source, workload spec).
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ladder.analysis import stats
from ladder.core import paths
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json

FORMAT = "ladder-fleet/1"


# --- run-time checks and failure messages (called from the Snakefile) --------------------------
def check_executor(hosts: Iterable[Any], workflow: Any) -> None:
    """A slurm host needs the SLURM executor; a local host must not be sent to SLURM."""
    plugin = getattr(workflow, "executor_plugin", None)
    name = getattr(plugin, "name", None) or "local"
    if name in ("dryrun", "touch"):
        return
    for h in hosts:
        if h.remote and name == "local":
            raise LadderError(f"host {h.name} is a slurm host ({h.where()}), but this run uses "
                              "the local executor: run with --profile profiles/slurm")
        if not h.remote and name == "slurm":
            raise LadderError(f"host {h.name} is this machine (executor: local), but this run "
                              "submits every job to SLURM: give it executor: slurm and a "
                              "partition/constraint, or run it with the default profile")


_ERROR = re.compile(r"^Error in rule (\w+):")
_FIELD = re.compile(r"^\s+(wildcards|output|log): (.*)$")
_END = re.compile(r"^(Error in rule|Exiting|Logfile|Complete log|Shutting down|\[\w{3} )")
_HOST_PATH = re.compile(r"(?:results/hosts|logs)/([a-z][a-z0-9_]*)/")
_BUILD_PATH = re.compile(r"(?:^|[/\s])builds/([0-9a-f]{16})/")


def failed_jobs(log_text: str) -> list[dict[str, Any]]:
    """Failed jobs from Snakemake's own log: rule, host (from its wildcards or its paths),
    build key, log file. A SLURM submission error prints no wildcards; its paths name the host."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in log_text.splitlines():
        m = _ERROR.match(line)
        if m:
            cur = {"rule": m.group(1), "host": None, "build_key": None, "log": None}
            out.append(cur)
            continue
        if cur is None:
            continue
        if _END.match(line) or not line.strip():
            cur = None
            continue
        m = _FIELD.match(line)
        if not m:
            continue
        field, value = m.groups()
        if field == "wildcards":
            wc = dict(p.partition("=")[::2] for p in value.split(", "))
            cur["host"] = cur["host"] or wc.get("host")
            cur["build_key"] = cur["build_key"] or wc.get("build_key")
        else:
            h = _HOST_PATH.search(value)
            b = _BUILD_PATH.search(value)
            cur["host"] = cur["host"] or (h.group(1) if h else None)
            cur["build_key"] = cur["build_key"] or (b.group(1) if b else None)
            if field == "log" and not cur["log"]:
                cur["log"] = value.split(" (check")[0].split(",")[0].strip()
    return out


def explain_failures(log: Any, hosts: Iterable[str]) -> list[str]:
    """One line per failed job naming its host and rule; the other hosts' results stay.

    ``log`` is what Snakemake's onerror gets: its log file(s)."""
    text = ""
    for path in ([log] if isinstance(log, (str, Path)) else list(log or [])):
        try:
            text += Path(path).read_text(errors="replace")
        except OSError:
            pass
    names = list(hosts)
    lines = []
    for job in failed_jobs(text):
        h = job["host"]
        if not h and job["build_key"]:
            h = f"building {job['build_key']}"
        where = f"host {h}" if h else "no host (a shared step)"
        lines.append(f"ladder: {where}: rule {job['rule']} failed"
                     + (f" (log: {job['log']})" if job["log"] else ""))
    if lines:
        done = [h for h in names if Path(paths.result("report_json", host=h)).exists()]
        lines.append("ladder: results of the other hosts are kept; hosts with a report: "
                     + (", ".join(done) or "none")
                     + (". Partial fleet report: results/report/fleet-partial.html" if done
                        else ""))
        if done:
            try:
                write_fleet([paths.result("report_json", host=h) for h in done],
                            Path("results/report"), stem="fleet-partial",
                            absent={h: [ln for ln in lines if f"host {h}:" in ln]
                                    for h in names if h not in done})
            except (LadderError, OSError) as exc:
                lines.append(f"ladder: partial fleet report not written: {exc}")
    for ln in lines:
        print(ln, file=sys.stderr)
    return lines


# --- the comparison -----------------------------------------------------------------------------
def _cell_key(cell: Mapping[str, Any]) -> tuple[str, str, str]:
    return (cell["model"]["model"], cell["quant"], cell["workload"])


def _metadata(doc: Mapping[str, Any], cell: Mapping[str, Any]) -> dict[str, Any]:
    """What must agree before two hosts' cells are compared."""
    return {"model_sha256": cell["model"].get("sha256"), "workload_spec": cell["workload_spec"],
            "source_id": doc["provenance"]["source"].get("source_id"),
            "rounds": cell.get("rounds"),
            "round_statistic": [cell.get("repetitions", 1), cell.get("round_statistic", "mean")]}


def _host_entry(path: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    prov = doc["provenance"]
    facts = prov.get("host") or {}
    cfg = prov.get("host_config") or (doc.get("plan") or {}).get("host") or {}
    ran_on = prov.get("ran_on") or []
    return {
        "name": cfg.get("name") or facts.get("host") or facts.get("hostname"),
        "status": "reported", "report": path, "where": cfg.get("where"),
        "executor": cfg.get("executor"), "instance": cfg.get("instance"),
        "hostname": facts.get("hostname"), "arch": facts.get("arch"),
        "cpu_model": facts.get("cpu_model"), "cores": facts.get("cores"),
        "identity": facts.get("identity"), "ladder": doc.get("ladder"),
        "nodes": sorted({r["hostname"] for r in ran_on if r.get("hostname")}),
        "slurm_jobs": sorted({r["slurm_job_id"] for r in ran_on if r.get("slurm_job_id")},
                             key=lambda j: int(j) if str(j).isdigit() else 0),
        "price": (doc.get("cost") or {}).get("price"),
        "emulated": doc.get("emulated"),
    }


def evidence_only(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An emulated host's rows: per rung and quant, where the weights went, what the init lines
    said, which kernels the ledger saw execute, and the drift. Never a throughput."""
    ledger = (doc.get("ledger") or {}).get("cells") or []
    rows = []
    for quant, by_rung in (doc.get("evidence") or {}).items():
        for rung, ev in by_rung.items():
            q = ((doc.get("quality") or {}).get(quant) or {}).get(rung) or {}
            cells = [c for c in ledger if c.get("rung") == rung and c.get("quant") == quant]
            rows.append({
                "rung": rung, "quant": quant, "status": ev.get("status"),
                "reason": ev.get("reason"),
                "buffers": ev.get("weight_buffers_mib") or {},
                "init_lines": [ln for ln in ev.get("vendor_lines") or []][:6],
                "claims": [f"{c['mechanism']}: {c['verdict']}" for c in ev.get("claims") or []],
                "dispatch": [f"{c['workload']} t{c['threads']}: {c['verdict']}" for c in cells],
                "drift": (q.get("drift") or {}).get("text") if q else None,
                "ppl": q.get("ppl"),
            })
    return rows


TIER_FLAGS = ("asimddp", "i8mm", "sve", "sve2", "sme", "sme2")


def _ran_variants(cell: Mapping[str, Any]) -> dict[str, int]:
    """``operand shape variant`` -> calls of the vendor kernels a ledger cell saw execute."""
    out: dict[str, int] = {}
    for k in ((cell.get("L3") or {}).get("vendor") or {}).get("kernels") or []:
        if k.get("shape") and k.get("calls"):
            key = f"{k['operand']} {k['shape']} {k['variant']}"
            out[key] = out.get(key, 0) + int(k["calls"])
    return out


def kernel_tiers(hosts: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One ladder across Arm generations: per emulated host and quant, the guest's features,
    the kernel set each vendor rung's init lines chose per operand, and which kernels the
    ledger saw run per phase and thread count (the rung itself and its runtime variants:
    SME off, SME caps). Rows only for rungs with a vendor kernel choice (KleidiAI)."""
    rows = []
    for name, doc in hosts:
        flags = set(((doc.get("provenance") or {}).get("host") or {}).get("cpu_flags") or [])
        ledger = (doc.get("ledger") or {}).get("cells") or []
        for quant, by_rung in (doc.get("evidence") or {}).items():
            for rung, ev in by_rung.items():
                chosen = ev.get("kleidiai_primary")
                if not chosen and ev.get("status") == "ok":
                    continue
                ran = [{"rung": c["rung"], "workload": c["workload"], "threads": c["threads"],
                        "verdict": c.get("verdict"), "ran": _ran_variants(c),
                        "sme_cap": (((c.get("L3") or {}).get("vendor") or {}).get("sme")
                                    or {}).get("thread_cap")}
                       for c in ledger if c.get("quant") == quant
                       and (c.get("rung") == rung or c.get("variant_of") == rung)]
                rows.append({"host": name, "cpu": (doc.get("emulated") or {}).get("cpu"),
                             "class": (doc.get("emulated") or {}).get("class"),
                             "qemu": (doc.get("emulated") or {}).get("qemu_version"),
                             "features": [f for f in TIER_FLAGS if f in flags],
                             "rung": rung, "quant": quant, "status": ev.get("status"),
                             "reason": ev.get("reason"), "chosen": dict(chosen or {}),
                             "sme": ev.get("kleidiai_sme"), "cells": ran})
    return rows


def _gain(cell: Mapping[str, Any], rung: str) -> dict[str, Any] | None:
    for s in cell.get("vs_floor") or []:
        if s["rung"] == rung:
            return {"estimate": s["ratio"]["estimate"], "call": s["verdict"]["call"],
                    "text": s["verdict"]["text"]}
    return None


PerHost = dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]]


def cells_by_key(docs: Sequence[tuple[str, Mapping[str, Any]]], names: Sequence[str]
                 ) -> dict[tuple[str, str, str], PerHost]:
    """(model, quant, workload) -> host -> (its report, the cell at its largest thread count)."""
    by_key: dict[tuple[str, str, str], PerHost] = {}
    for (_, doc), name in zip(docs, names):
        best: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for cell in doc["cells"]:
            k = _cell_key(cell)
            if k not in best or cell["threads"] > best[k]["threads"]:
                best[k] = cell
        for k, cell in best.items():
            by_key.setdefault(k, {})[name] = (doc, cell)
    return by_key


def vs_ref(ref_cell: Mapping[str, Any], cell: Mapping[str, Any], rung: str,
           extra_floor: float | None, conf: float
           ) -> tuple[stats.RatioEstimate, list[float | None]]:
    """A rung's throughput on a host against the reference host (unpaired: Welch), and the
    floors the comparison must clear."""
    a = (ref_cell["rungs"].get(rung) or {}).get("round_means") or []
    b = (cell["rungs"].get(rung) or {}).get("round_means") or []
    floors = [ref_cell["noise_floor"].get("floor"), cell["noise_floor"].get("floor"),
              extra_floor]
    return stats.unpaired_ratio_ci(a, b, conf), floors


def aa_drift(by_key: Mapping[Any, PerHost], names: Sequence[str],
             identity: Mapping[str, Any], conf: float) -> tuple[float | None, set[str]]:
    """A/A first: hosts with the reference's CPU identity are the same hardware measured at
    another time (or under another label), so what separates them is drift between runs,
    which neither host's interleaved noise floor sees. Its largest deviation inside a CI is
    the drift floor that every cross-hardware comparison must also clear."""
    deviations: list[float] = []
    aa_pairs: set[str] = set()
    for per_host in by_key.values():
        present = [n for n in names if n in per_host]
        if not present:
            continue
        r0 = present[0]
        for n in present[1:]:
            if identity.get(n) and identity.get(n) == identity.get(r0):
                aa_pairs.add(f"{r0}/{n}")
                for rung in per_host[r0][0].get("ladder_order") or []:
                    r, _ = vs_ref(per_host[r0][1], per_host[n][1], rung, None, conf)
                    if r.lo is not None and r.hi is not None:
                        deviations.append(stats.interval_reach(r) or 0.0)
    return (max(deviations) if deviations else None), aa_pairs


def host_row(cell: Mapping[str, Any], rung: str) -> dict[str, Any]:
    summ = cell["rungs"].get(rung) or {"n": 0}
    return {
        "threads": cell["threads"], "n": summ.get("n", 0),
        "median": summ.get("median"), "ci": summ.get("ci"),
        "noise_floor": cell["noise_floor"].get("floor"),
        "gain_vs_floor": _gain(cell, rung),
        "usd_per_mtok": ((cell.get("cost") or {}).get(rung) or {}).get("usd_per_mtok"),
        "status": (cell.get("rung_status") or {}).get(rung, {}).get("status"),
    }


def judged_vs_ref(per_host: PerHost, ref_here: str, n: str, rung: str, same: bool,
                  drift: float | None, conf: float) -> dict[str, Any]:
    r, floors = vs_ref(per_host[ref_here][1], per_host[n][1], rung,
                       None if same else drift, conf)
    floor = None if None in floors[:2] else max(f for f in floors if f is not None)
    v = stats.verdict(r, floor)
    text = v.text.replace("paired rounds", "rounds")
    if same:
        text = f"A/A, same CPU identity (run-to-run drift, not hardware): {text}"
    elif drift is not None:
        text += f" (includes the A/A drift floor {drift * 100:.1f} %)"
    return {"ratio": asdict(r), "floor": floor, "call": v.call, "same_identity": same,
            "text": text}


def comparison(key: tuple[str, str, str], per_host: PerHost, names: Sequence[str],
               identity: Mapping[str, Any], drift: float | None, conf: float
               ) -> dict[str, Any]:
    """One (model, quant, workload) across the hosts that measured it."""
    present = [n for n in names if n in per_host]
    metas = {n: _metadata(per_host[n][0], per_host[n][1]) for n in present}
    base_meta = metas[present[0]]
    disagree = {n: sorted(k for k in m if m[k] != base_meta[k])
                for n, m in metas.items() if m != base_meta}
    rung_names: list[str] = []
    for n in present:
        for r in per_host[n][0].get("ladder_order") or []:
            if r not in rung_names:
                rung_names.append(r)
    ref_here = present[0]
    rungs = []
    for rung in rung_names:
        row: dict[str, Any] = {"rung": rung, "vs_ref": {},
                               "hosts": {n: host_row(per_host[n][1], rung) for n in present}}
        for n in present[1:]:
            if n in disagree:
                row["vs_ref"][n] = {"call": "not compared",
                                    "text": f"not compared: {', '.join(disagree[n])} differ"}
                continue
            same = bool(identity.get(n)) and identity.get(n) == identity.get(ref_here)
            row["vs_ref"][n] = judged_vs_ref(per_host, ref_here, n, rung, same, drift, conf)
        rungs.append(row)
    return {"model": key[0], "quant": key[1], "workload": key[2], "reference": ref_here,
            "hosts": present, "metadata_disagree": disagree, "rungs": rungs}


def shared_builds(docs: Sequence[tuple[str, Mapping[str, Any]]], names: Sequence[str]
                  ) -> list[dict[str, Any]]:
    """Which hosts shared which build: the floor once per arch, native builds per CPU
    identity."""
    builds: dict[str, dict[str, Any]] = {}
    for (_, doc), name in zip(docs, names):
        for r in doc.get("rungs") or []:
            if r.get("twin_of"):
                continue
            b = builds.setdefault(f"{r['name']}:{r['build_key']}",
                                  {"rung": r["name"], "build_key": r["build_key"], "hosts": []})
            b["hosts"].append(name)
    return sorted(builds.values(), key=lambda b: (b["rung"], b["build_key"]))


def reconcile_rows(hosts: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per host, quant and workload of its reconciliation cells (its report's ``reconcile``
    section): each rung's best thread count (or tied set) and each step best against best,
    beside the steps at equal threads, with the sentence where they disagree."""
    rows = []
    for host, doc in hosts:
        for c in (doc.get("reconcile") or {}).get("cells") or []:
            best = {r["rung"]: r["best"]["threads"] for r in c["rungs"]}
            steps = []
            for s in c["steps"]:
                main = s["best_vs_best"]["main"] or {}
                steps.append({"base": s["base"], "rung": s["rung"],
                              "call": s["best_vs_best"]["call"],
                              "estimate": main.get("estimate"),
                              "threads": main.get("threads"),
                              "base_threads": main.get("base_threads"),
                              "same": {str(p["threads"]): p["call"] for p in s["same_threads"]},
                              "sentence": s["sentence"]})
            rows.append({"host": host, "quant": c["quant"], "workload": c["workload"],
                         "phase": c["phase"], "counts": c["counts"], "best": best,
                         "steps": steps})
    return rows


def build_fleet(reports: Sequence[str], stats_cfg: Mapping[str, Any] | None = None,
                absent: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    stats_cfg = stats_cfg or {}
    conf = float(stats_cfg.get("confidence", 0.95))
    docs = [(p, read_json(p)) for p in reports]
    hosts = [_host_entry(p, d) for p, d in docs]
    names = [h["name"] for h in hosts]
    if len(set(names)) != len(names):
        raise LadderError(f"fleet: two reports are for the same host ({names})")
    for name, why in (absent or {}).items():
        hosts.append({"name": name, "status": "missing", "reason": list(why)})
    emulated = {h["name"] for h in hosts if h.get("emulated")}
    # the reference is the first real host: an emulated one has no throughput
    ref = next((n for n in names if n not in emulated), None)
    # real hosts first, in config order: a comparison's reference is its first present host
    ordered = sorted(zip(docs, names), key=lambda dn: dn[1] in emulated)
    names = [n for _, n in ordered]
    docs = [d for d, _ in ordered]
    by_key = cells_by_key(docs, names)
    identity = {h["name"]: h.get("identity") for h in hosts}
    drift, aa_pairs = aa_drift(by_key, names, identity, conf)
    return {
        "format": FORMAT,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "hosts": hosts, "reference": ref,
        "comparisons": [comparison(k, by_key[k], names, identity, drift, conf)
                        for k in sorted(by_key)],
        "evidence_only": [{"host": n, "emulated": doc.get("emulated"), "rows": evidence_only(doc)}
                          for (_, doc), n in zip(docs, names) if n in emulated],
        "kernel_tiers": kernel_tiers([(n, doc) for (_, doc), n in zip(docs, names)
                                      if n in emulated]),
        "reconcile": reconcile_rows([(n, doc) for (_, doc), n in zip(docs, names)]),
        "drift": {"pairs": sorted(aa_pairs), "floor": drift,
                  "definition": "largest reach (log scale, as for a noise floor) of the CI of any "
                                "rung's ratio between the reference and a host with its CPU "
                                "identity (an A/A pair)"},
        "builds": shared_builds(docs, names),
        "method": ("each host's largest thread count per cell; within a host, its own noise floor "
                   "(control vs twin); across hosts, ratio of geometric-mean round throughputs "
                   "with a Welch t-interval on the log scale, called when Welch's test is "
                   "significant and the estimate lies beyond the larger of the two hosts' noise "
                   "floors and of the A/A drift floor (hosts of one CPU identity, when the fleet "
                   "has them); equivalent when the 90 % interval lies inside it"),
    }


def write_fleet(reports: Sequence[str], out_dir: Path, stem: str = "fleet",
                stats_cfg: Mapping[str, Any] | None = None,
                absent: Mapping[str, Sequence[str]] | None = None) -> dict[str, str]:
    from ladder.reporting.render import environment

    doc = build_fleet(reports, stats_cfg, absent)
    out_dir = Path(out_dir)
    env = environment("")
    paths = {"json": str(out_dir / f"{stem}.json"), "md": str(out_dir / f"{stem}.md"),
             "html": str(out_dir / f"{stem}.html")}
    atomic_write_json(paths["json"], doc)
    for kind in ("md", "html"):
        atomic_write_text(paths[kind], env.get_template(f"fleet.{kind}.j2").render(
            doc=doc, partial=stem != "fleet"))
    return paths
