"""Find the commit that moved one cell: ``ladder bisect`` (asv's ``find``, judged by ladder's rule).

    ladder bisect --repo URL --good SHA --bad SHA --rung NAME --quant Q --workload W --threads N
                  [-d DIR] [--configfile F ...] [--config KEY=VALUE ...]

Between two commits of one git history, for one cell (quant x workload x threads) and one rung's
recipe: the two ends are measured first, interleaved, as a ladder of their own (good, bad, and
the good build again under the control's label: the A/A check). When the ends differ (a call of
ladder's own rule: the paired test significant and the estimate beyond the phase's threshold),
each probe, the commit half way along the first-parent path between the current bracket's ends,
is built and measured interleaved with both ends (good, probe, bad), and placed by its own two
verdicts:

- **good side**: the probe differs from the bad end in the ends' direction, and not from the good
  end (the step is after it);
- **bad side**: the probe differs from the good end in that direction, and not from the bad end;
- **between**: it differs from both in that direction: the change is spread over more than one
  commit ("no single step");
- **unplaced**: neither difference is called (or they disagree in direction): the cell cannot
  place it at these rounds; the bisection stops there and says so.

It ends with the first commit on the far side of the step (its ratio over the good end and the
interval, from the cell that measured it) and a trace of every probe. Each step is a Snakemake
run of the ordinary workflow in its own folder (``DIR/bisect/<id>/<probe>``) on the shared
resources dir: every probe's source and build are content-addressed (a rerun or a second
bisection over the same commits builds nothing again; ccache compiles only the files that
differ between commits), and a finished step is not measured again. Each step's three
comparisons are one Benjamini-Hochberg family; the walk's decisions are sequential, so the
trace keeps every verdict it rests on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from ladder.core import paths
from ladder.analysis import stats
from ladder.core.errors import LadderError
from ladder.preparing.build import ccache_hits
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.machine import host_arch
from ladder.planning import protocol
from ladder.planning.targets import load_config

ROOT = Path(__file__).resolve().parents[3]
HOST = "local"
FORMAT = "ladder-bisect/1"


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    @property
    def name(self) -> str:  # a rung name (paths, wildcards): c_ + 10 hex
        return f"c_{self.sha[:10]}"


def _git(repo: Path | None, *args: str) -> str:
    argv = ["git", *(["-C", str(repo)] if repo else []), *args]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise LadderError(f"git {' '.join(args)}: {res.stderr.strip()[-400:]}")
    return res.stdout.strip()


def mirror(url: str, resources: Path, offline: bool = False) -> Path:
    """A bare mirror of ``url`` under the resources dir: fetched again once per bisection (the
    only time it touches the network; every probe's source is then fetched from the mirror),
    or, ``offline``, used as it is."""
    dest = resources / "bisect" / "repos" / (hashlib.sha256(url.encode()).hexdigest()[:16] + ".git")
    if offline:
        if not dest.is_dir():
            raise LadderError(f"--offline: no mirror of {url} yet (expected {dest}); run once "
                              "without --offline")
        return dest
    if dest.is_dir():
        _git(dest, "remote", "update", "--prune")
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _git(None, "clone", "-q", "--mirror", url, str(dest))
    return dest


def commits_between(repo: Path, good: str, bad: str) -> list[Commit]:
    """The good commit, then every commit on the first-parent path up to the bad one. The good
    commit must be on bad's first-parent path (a commit of a merged branch is not: its probes
    would not contain it); the merge that brought it in is named."""
    ends = []
    for flag, ref in (("--good", good), ("--bad", bad)):
        try:
            ends.append(_git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"))
        except LadderError:
            raise LadderError(f"{flag} {ref}: not a commit of the repository") from None
    g, b = ends
    if g == b:
        raise LadderError(f"--good and --bad are the same commit ({g[:12]})")
    res = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", g, b],
                         capture_output=True, check=False)
    if res.returncode != 0:
        raise LadderError(f"--good {good} is not an ancestor of --bad {bad}: nothing to bisect")
    chain = _git(repo, "rev-list", "--first-parent", b).split()
    if g not in chain:
        merge = next(c for c in reversed(chain) if _is_ancestor(repo, g, c))
        first, second = (_git(repo, "rev-parse", f"{merge}^{n}") for n in (1, 2))
        raise LadderError(
            f"--good {good} is an ancestor of --bad {bad} but not on its first-parent path: it "
            f"came in with the merge {merge[:12]} \"{_subject(repo, merge)}\"; give a --good "
            f"on the first-parent path (the merge's first parent is {first[:12]}), or bisect "
            f"the merged branch itself (--bad {second[:12]})")
    out = _git(repo, "log", "--first-parent", "--reverse", "--format=%H %s", f"{g}..{b}")
    path = [Commit(*line.split(" ", 1)) if " " in line else Commit(line, "")
            for line in out.splitlines()]
    return [Commit(g, _subject(repo, g)), *path]


def _is_ancestor(repo: Path, a: str, b: str) -> bool:
    return subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", a, b],
                          capture_output=True, check=False).returncode == 0


def _subject(repo: Path, sha: str) -> str:
    return _git(repo, "log", "-1", "--format=%s", sha)


def merged_branch(repo: Path, sha: str) -> dict[str, str] | None:
    """When ``sha`` is a merge commit: the branch it merged (its second parent, and where that
    branch left the first-parent line), to bisect inside it; else None."""
    parents = _git(repo, "log", "-1", "--format=%P", sha).split()
    if len(parents) < 2:
        return None
    base = _git(repo, "merge-base", parents[0], parents[1])
    return {"merge": sha, "second_parent": parents[1], "merge_base": base}


def next_probe(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The probe between ``lo`` and ``hi`` nearest the middle that was not skipped (as git
    bisect skip tries a neighbour), the lower one first on a tie; None when none is left."""
    mid = (lo + hi) // 2
    for d in range(hi - lo):
        for i in (mid - d, mid + d) if d else (mid,):
            if lo < i < hi and i not in skipped:
                return i
    return None


def probe_rung(template: Mapping[str, Any], commit: Commit, url: str,
               subdirectory: str) -> dict[str, Any]:
    """The template rung's recipe on ``commit``'s tree."""
    rung = {k: v for k, v in template.items() if k not in ("name", "label", "source", "patches")}
    source: dict[str, Any] = {"kind": "git", "url": url, "commit": commit.sha}
    if subdirectory:
        source["subdirectory"] = subdirectory
    return {**rung, "name": commit.name,
            "label": f"{template['name']} @ {commit.sha[:10]} {commit.subject[:50]}".strip(),
            "source": source}


def step_overlay(config: Mapping[str, Any], arch: str, rungs: Sequence[Mapping[str, Any]],
                 quant: str, workload: str, threads: int, resources: Path) -> dict[str, Any]:
    """The step's config, over the user's: its rungs (the first one's build again as the
    control), this host only, the one cell, nothing else switched on."""
    serving = {k: {"enabled": False} for k, v in (config.get("serving") or {}).items()
               if isinstance(v, dict) and "enabled" in v}
    workloads = {w: None for w in config["measure"]["workloads"] if w != workload}
    workloads[workload] = config["measure"]["workloads"][workload]
    return {
        "ladder": arch, "resources_dir": str(resources),
        "ladders": {arch: {"rungs": [dict(r) for r in rungs],
                           "control": {"name": "control", "twin": rungs[0]["name"]}}},
        "hosts": [{"name": HOST}],
        # a probe is measured until its placement is decided: its two steps (good -> probe,
        # probe -> bad), not the ends' step it also carries (issue 61)
        "measure": {"quants": [quant], "threads": [threads], "workloads": workloads,
                    "sequential": {"wait_for": ["step"]}},
        "serving": serving,
        "reconcile": {"enabled": False},
    }


def cell_path(config: Mapping[str, Any], quant: str, workload: str, threads: int) -> str:
    models = list(config["models"])
    return paths.result("bench", host=HOST, model=models[0], quant=quant.lower(),
                        workload=workload, threads=threads)


def judge(doc: Mapping[str, Any], order: Sequence[str], config: Mapping[str, Any]
          ) -> dict[str, Any]:
    """The step's cell summarized by ladder's rule (its comparisons one BH family; one cell's
    A/A rounds rarely measure the dependence between rounds: ``stats.run_dependence``)."""
    cfg = stats.with_dependence(config["stats"], stats.run_dependence(
        [doc], "control", order[0], config["stats"]["confidence"]))
    # the ends (two commits): the bad end over the good build's second label too, their check
    # (``disagreement``); a probe's cell is placed by its own two steps
    twin = [(TWIN, "control", order[-1])] if len(order) == 2 else []
    cell = stats.summarize(doc, list(order), "control", order[0], cfg, extra=twin)
    stats.fdr_adjust([cell], cfg["confidence"])
    return cell


# the kind of the bad end's comparison over the control (the good build measured again)
TWIN = "twin"


def twin_comparison(cell: Mapping[str, Any], rung: str) -> dict[str, Any] | None:
    """``rung`` over the control (the good build under its second label) in a judged cell,
    or None when the control was not measured."""
    for comp in cell.get("extra") or []:
        if comp["kind"] == TWIN and comp["rung"] == rung:
            return comp
    return None


def disagreement(step: Mapping[str, Any], twin: Mapping[str, Any] | None) -> str | None:
    """Why the ends' call cannot be taken, or None when it can: the good build was measured
    twice in the same rounds (its own label and the control's), and a step from it (or its
    absence: equivalent ends) must hold over both, an intersection-union test at the
    design's level. CI, 2026-12-07: a 5 us-a-node spin called 1.06x *faster* (p 0.002) over
    the good label, whose three rounds all ran slow (its twin 1.02-1.12x over it), while the
    bad end over the twin was 0.95-1.05x: one label's luck, not a step."""
    if twin is None or step["call"] not in (*stats.CALLS, "equivalent"):
        return None
    if twin["call"] == step["call"]:
        return None
    return (f"bad over good is {step['call']} ({step['text']}) but bad over the good build "
            f"measured again under the control's label is {twin['call']} ({twin['text']}): "
            "the good build's two labels disagree on the step")


def comparison(cell: Mapping[str, Any], base: str, rung: str) -> dict[str, Any]:
    for comp in [*cell["steps"], *cell["vs_floor"]]:
        if comp["base"] == base and comp["rung"] == rung:
            return comp
    raise LadderError(f"the cell has no comparison of {rung} over {base}")


def brief(comp: Mapping[str, Any]) -> dict[str, Any]:
    r, v = comp["ratio"], comp["verdict"]
    out = {"call": v["call"], "estimate": r["estimate"], "lo": r["lo"], "hi": r["hi"],
           "rounds": r["n"], "text": v["text"]}
    if comp.get("stop"):  # the anytime-valid design: why it stopped, what would decide it
        out["stop"] = comp["stop"]
    return out


def unresolved(step: Mapping[str, Any]) -> dict[str, Any] | None:
    """When the ends' comparison was left open (by the design's maximum, the budget or
    futility), the rounds that would decide it at the noise and effect measured, and the
    setting that gives them (rounds None: its effect sits on ±δ, no number of rounds decides
    it); None when it was decided (a step, or equivalent ends) or not measured sequentially."""
    stop = step.get("stop") or {}
    if stop.get("why") not in ("cap", "budget", "futile"):
        return None
    need = stop.get("rounds_to_decide")
    per_round = stop.get("per_round_s")
    if not need:
        return {"rounds": None, "why": stop["why"], "config": None, "minutes": None}
    return {"rounds": int(need), "why": stop["why"], "config": f"measure.sequential.max={need}",
            "minutes": round(need * per_round / 60, 1) if per_round else None}


def suspect(s: Mapping[str, Any], names: Sequence[str]) -> tuple[str, str] | None:
    """Why a measured step is set aside and measured again (``Bisection.checked_step``), in
    short and in full: its A/A check failed, or (the ends: a step of two commits) the good
    build's two labels disagree on the ends' call; None when it stands."""
    cell = s.get("cell_summary") or {}
    check = (cell.get("noise_floor") or {}).get("control_check")
    if check and check.get("passed") is False:
        return "its A/A check failed", f"its A/A check failed ({check.get('text')})"
    if len(names) != 2 or not cell.get("steps"):
        return None
    good, bad = names
    why = disagreement(brief(comparison(cell, good, bad)), brief_or_none(
        twin_comparison(cell, bad)))
    short = "the ends' call not confirmed over the good build's second label"
    return (short, f"{short} ({why})") if why else None


def twin_needs(twin: Mapping[str, Any] | None) -> dict[str, Any]:
    """What would decide the bad end over the good build's second label: its rounds at the
    noise and effect measured, as fixed rounds (the anytime-valid design stops a cell when
    its steps are decided, so a larger maximum alone would not give them); none when its
    effect sits on ±δ."""
    stop = (twin or {}).get("stop") or {}
    need, per_round = stop.get("rounds_to_decide"), stop.get("per_round_s")
    if not need:
        return {"rounds": None, "why": TWIN, "config": None, "minutes": None,
                "text": "The second label's difference sits on the threshold: no number of "
                        "rounds tells a step of at least δ from none on this host"}
    config = f"measure.sequential.enabled=false measure.rounds={need}"
    minutes = round(need * per_round / 60, 1) if per_round else None
    return {"rounds": int(need), "why": TWIN, "config": config, "minutes": minutes,
            "text": f"To decide both, run again with --config {config}"
                    + (f" (about {minutes} min for the ends)" if minutes else "")}


def brief_or_none(comp: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return brief(comp) if comp else None


def place(vs_good: Mapping[str, Any], to_bad: Mapping[str, Any], direction: str) -> str:
    """Where a probe sits, from its call over the good end and the bad end's call over it."""
    a, b = vs_good["call"], to_bad["call"]
    if b == direction and a not in stats.CALLS:
        return "good side"
    if a == direction and b not in stats.CALLS:
        return "bad side"
    if a == direction and b == direction:
        return "between"
    return "unplaced"


class Bisection:
    def __init__(self, args: argparse.Namespace, config: dict[str, Any], workdir: Path):
        self.args, self.config, self.workdir = args, config, workdir
        self.arch = config["ladder"] if config["ladder"] != "auto" else host_arch()
        rungs = {r["name"]: r for r in config["ladders"][self.arch]["rungs"]}
        if args.rung not in rungs:
            raise LadderError(f"--rung {args.rung}: not a rung of ladder {self.arch} "
                              f"({', '.join(rungs)})")
        self.template = rungs[args.rung]
        workloads = config["measure"]["workloads"]
        if not workloads.get(args.workload):
            raise LadderError(f"--workload {args.workload}: not in measure.workloads "
                              f"({', '.join(w for w, s in workloads.items() if s)})")
        res = Path(config["resources_dir"])
        self.resources = (res if res.is_absolute() else workdir / res).resolve()
        self.repo = mirror(args.repo, self.resources, bool(getattr(args, "offline", False)))
        self.commits = commits_between(self.repo, args.good, args.bad)
        ident = json.dumps([args.repo, args.subdirectory, self.commits[0].sha,
                            self.commits[-1].sha, self.template, args.quant, args.workload,
                            args.threads], sort_keys=True)
        self.id = hashlib.sha256(ident.encode()).hexdigest()[:12]
        self.dir = workdir / "bisect" / self.id
        self.steps: list[dict[str, Any]] = []
        self.doc: dict[str, Any] | None = None  # the run's trace, once the walk started

    def most_rounds(self) -> tuple[int, str]:
        """The most rounds a step measures and the setting that sets them: the anytime-valid
        design's maximum, else the pilot's maximum, else the fixed rounds."""
        m = self.config["measure"]
        if (m.get("sequential") or {}).get("enabled"):
            return int(m["sequential"]["max"]), "measure.sequential.max"
        rule = m.get("rounds_from_noise") or {}
        if rule.get("enabled"):
            return int(rule["max"]), "measure.rounds_from_noise.max"
        return int(m["rounds"]), "measure.rounds"

    def rung(self, c: Commit) -> dict[str, Any]:
        # every probe's source from the local mirror: the network was touched once, by mirror()
        return probe_rung(self.template, c, str(self.repo), self.args.subdirectory)

    def measure(self, label: str, commits: Sequence[Commit]) -> dict[str, Any]:
        """One step: its own Snakemake run of the workflow, the cell judged."""
        step_dir = self.dir / label
        step_dir.mkdir(parents=True, exist_ok=True)
        overlay = step_dir / "step.yaml"
        atomic_write_text(str(overlay), yaml.safe_dump(step_overlay(
            self.config, self.arch, [self.rung(c) for c in commits], self.args.quant,
            self.args.workload, self.args.threads, self.resources), sort_keys=False))
        target = cell_path(self.config, self.args.quant, self.args.workload, self.args.threads)
        argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
                "--profile", str(ROOT / "profiles" / "default"), "-d", str(step_dir),
                "--configfile", str(ROOT / "config" / "config.yaml"), *self.args.configfile,
                str(overlay), "--config", *self.overrides(), "--cores", str(self.args.cores),
                "--quiet", "rules", "--", target]
        print(f"ladder bisect: {label}: {', '.join(c.sha[:10] for c in commits)}",
              file=sys.stderr, flush=True)
        t0 = time.monotonic()
        with open(step_dir / "snakemake.log", "w") as log:
            res = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                 check=False)
        wall = time.monotonic() - t0
        if res.returncode != 0:
            raise LadderError(f"step {label}: the workflow failed (exit {res.returncode}); "
                              f"see {step_dir / 'snakemake.log'}")
        doc = read_json(str(step_dir / target))
        broken = {n: e.get("reason") or e.get("status")
                  for n, e in (doc.get("rungs") or {}).items() if e.get("status") != "measured"}
        cell = judge(doc, [c.name for c in commits], self.config)
        return {"label": label, "commits": [c.sha for c in commits], "wall_s": round(wall, 1),
                "cell": str(step_dir / target), "builds": self.builds(doc),
                "cell_summary": cell, "not_measured": broken}

    def overrides(self) -> list[str]:
        """The user's --config values, the shared resources dir last (a step runs elsewhere)."""
        mine = [c for c in self.args.config if c.partition("=")[0] != "resources_dir"]
        return [*mine, f"resources_dir={self.resources}"]

    def builds(self, doc: Mapping[str, Any]) -> list[dict[str, Any]]:
        """What each rung's build cost this step (a build made before: its first cost)."""
        builds_dir = Path(self.config.get("builds_dir") or self.resources / "builds")
        out = []
        for name, entry in (doc.get("rungs") or {}).items():
            prov = builds_dir / str(entry.get("build_key")) / "provenance.json"
            if prov.is_file():
                p = read_json(str(prov))
                hits, misses = ccache_hits(p.get("ccache") or {})
                out.append({"rung": name, "build_key": p.get("build_key"),
                            "status": p.get("status"), "build_wall_s": p.get("build_wall_s"),
                            "ccache_hits": hits, "ccache_misses": misses})
        return out

    def step(self, label: str, commits: Sequence[Commit]) -> dict[str, Any]:
        """``measure``, a failed workflow kept as the step's record (never lost with it)."""
        try:
            return self.measure(label, commits)
        except LadderError as exc:
            return {"label": label, "commits": [c.sha for c in commits], "wall_s": None,
                    "builds": [], "failed": str(exc),
                    "not_measured": {"workflow": f"failed: {exc}"}}

    def checked_step(self, label: str, commits: Sequence[Commit], **fields: Any
                     ) -> dict[str, Any]:
        """``step``, measured once more (a fresh step, fresh seeds) when its cell's A/A check
        failed (that cell's machinery misbehaved, so it judges only gross steps and a probe it
        measured could be left unplaced by its noise alone) or, for the ends, when the good
        build's two labels disagree on the step (``disagreement``). The first is kept in the
        trace, set aside, never averaged in; the second stands whatever its checks say."""
        s = {**self.step(label, commits), **fields}
        why = suspect(s, [c.name for c in commits])
        if why is None:
            return s
        short, full = why
        s.update(set_aside=f"{full}: measured again", side=f"set aside: {short}, measured again")
        self.steps.append(s)
        self.save_partial()
        return {**self.step(f"{label}-again", commits), **fields, "again_of": label}

    def save_partial(self) -> None:
        """The steps so far, while a step is measured again (the run's doc is written after
        each placed step by ``save``)."""
        if self.doc is not None:
            self.save(self.doc)

    def save(self, doc: Mapping[str, Any]) -> None:
        """The trace so far (bisect.json and bisect.md), after every step."""
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(str(self.dir / "bisect.json"), doc)
        atomic_write_text(str(self.dir / "bisect.md"), render(doc))

    def run(self) -> dict[str, Any]:
        """The ends, then the walk: a probe that is not measured (no build, a crash, a failed
        workflow) or cannot be placed is skipped and its nearest neighbour in the bracket
        tried; the trace is written after every step."""
        cs = self.commits
        good, bad = cs[0], cs[-1]
        doc: dict[str, Any] = {
            "format": FORMAT, "id": self.id, "repo": self.args.repo,
            "cell": {"rung": self.args.rung, "quant": self.args.quant,
                     "workload": self.args.workload, "threads": self.args.threads},
            "commits": [{"sha": c.sha, "subject": c.subject} for c in cs],
            "good": good.sha, "bad": bad.sha, "ends": None, "steps": self.steps,
            "skipped": [], "result": "running", "text": "the walk is under way"}
        self.doc = doc
        ends = self.checked_step("ends", [good, bad])
        self.steps.append(ends)
        if ends["not_measured"]:
            doc.update(result="failed" if ends.get("failed") else "not measured",
                       text=f"the ends were not both measured: "
                            f"{failed_text(ends['not_measured'])}")
            self.save(doc)
            return doc
        step = brief(comparison(ends["cell_summary"], good.name, bad.name))
        twin = brief_or_none(twin_comparison(ends["cell_summary"], bad.name))
        ends["bad_vs_good"], ends["bad_vs_twin"] = step, twin
        why = disagreement(step, twin)
        if why:  # measured twice (checked_step), the labels disagreeing both times: no call
            doc["ends"] = {**step, "call": "inconclusive", "called_over_good": step["call"],
                           "text": f"{step['text']}, not confirmed over the good build's "
                                   f"second label ({twin['text'] if twin else '-'})"}
            twin_need = twin_needs(twin)
            doc.update(result="unresolved", needs=twin_need, text=(
                f"the ends were not resolved: {why}, in two measurements of the ends; at "
                "this noise the walk would follow one label's luck. " + twin_need["text"]))
            self.save(doc)
            return doc
        doc["ends"] = step
        if step["call"] not in stats.CALLS:
            doc.update(result="no step", text=f"no step between the ends: {step['text']}")
            need = unresolved(step)
            if need and need["config"]:  # a step the ends' rounds could not resolve: what would
                doc.update(result="unresolved", needs=need, text=(
                    f"the ends were not resolved: bad over good {step['text']}; to decide it, "
                    f"run again with --config {need['config']}"
                    + (f" (about {need['minutes']} min for the ends)" if need["minutes"] else "")))
            elif need:  # open, its effect on ±δ: no rounds tell a step of δ from none
                doc.update(result="unresolved", needs=need, text=(
                    f"the ends were not resolved: bad over good {step['text']}; the difference "
                    "sits on the threshold, so no number of rounds decides whether it is a step"
                    " of at least δ (a smaller one is not called)"))
            self.save(doc)
            return doc
        doc["expected"] = expected_cost(len(cs), ends, step)
        print(f"ladder bisect: {doc['expected']['text']}", file=sys.stderr, flush=True)
        need = out_of_placing(doc["expected"], *self.most_rounds())
        if need and not getattr(self.args, "walk_anyway", False):
            # walking would skip probe after probe, each a full step: say what it needs
            doc.update(result="unresolved", needs=need, text=(
                f"the walk would not place its probes: bad over good {step['text']}; "
                + need["text"]))
            self.save(doc)
            return doc
        self.save(doc)
        direction = step["call"]
        lo, hi = 0, len(cs) - 1
        skipped: set[int] = set()
        far: dict[str, Any] = {"commit": bad.sha, "vs_good": step, "measured_in": "ends"}
        while (mid := next_probe(lo, hi, skipped)) is not None:
            p = cs[mid]
            s = self.checked_step(f"probe-{mid:03d}-{p.sha[:10]}", [good, p, bad],
                                  probe=p.sha, index=mid)
            self.steps.append(s)
            if s["not_measured"]:  # no build, a crash, a failed workflow: skipped, as git does
                s["side"] = f"skipped (not measured: {failed_text(s['not_measured'])})"
                skipped.add(mid)
                doc["skipped"].append({"commit": p.sha, "why": s["side"]})
                self.save(doc)
                continue
            vs_good = brief(comparison(s["cell_summary"], good.name, p.name))
            to_bad = brief(comparison(s["cell_summary"], p.name, bad.name))
            side = place(vs_good, to_bad, direction)
            s.update(vs_good=vs_good, bad_vs_probe=to_bad, side=side)
            if side == "good side":
                lo = mid
            elif side == "bad side":
                hi = mid
                far = {"commit": p.sha, "vs_good": vs_good, "measured_in": s["label"]}
            elif side == "unplaced":  # neither difference called: skipped, a neighbour tried
                s["side"] = "skipped (unplaced: neither difference called at these rounds)"
                skipped.add(mid)
                doc["skipped"].append({"commit": p.sha, "why": s["side"]})
            else:
                doc.update(result="no single step", bracket=[cs[lo].sha, cs[hi].sha],
                           text=f"no single step: the change is spread: this probe differs "
                                f"from both ends ({p.sha[:10]}: over good {vs_good['text']}; "
                                f"bad over it {to_bad['text']})")
                self.save(doc)
                return doc
            self.save(doc)
        doc["bracket"] = [cs[lo].sha, cs[hi].sha]
        inside = cs[lo + 1:hi]
        if inside:  # every commit between the last good and the first bad probe was skipped
            doc.update(result="among skipped", candidates=[c.sha for c in [*inside, cs[hi]]],
                       text=f"the first bad commit is one of {', '.join(c.sha[:10] for c in [*inside, cs[hi]])}"
                            f" (the skipped commits leave it uncertain): {cs[lo].sha[:12]} is on "
                            f"the good side, {cs[hi].sha[:12]} on the bad side")
            self.save(doc)
            return doc
        c = cs[hi]
        doc.update(result="step", first_bad=c.sha, first_bad_subject=c.subject,
                   last_good=cs[lo].sha, far_side=far,
                   text=f"first commit on the far side: {c.sha[:12]} \"{c.subject}\" "
                        f"({far['vs_good']['text']} over the good end, measured in "
                        f"{far['measured_in']}); the last on the good side: {cs[lo].sha[:12]}")
        merged = merged_branch(self.repo, c.sha)
        if merged:
            doc["merged_branch"] = merged
            doc["text"] += (f". It is a merge commit: the step is inside the branch it merged "
                            f"(second parent {merged['second_parent'][:12]}); bisect that branch "
                            f"with --good {merged['merge_base'][:12]} --bad "
                            f"{merged['second_parent'][:12]}")
        self.save(doc)
        return doc


# the one-sided confidence of the A/A SD's lower bound a walk is refused on (out_of_placing)
OPTIMISTIC = 0.9


def expected_cost(n_commits: int, ends: Mapping[str, Any], step: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """Before walking: about log2(commits between the ends) probes, each a step like the ends'
    (wall time); and whether a step's rounds place a probe. A probe is placed when it differs
    from one end by the ends' step: at the ends' A/A noise (its per-round SD), the rounds that
    call a difference of that size with 80 % power (``protocol.rounds_for``)."""
    probes = max(1, math.ceil(math.log2(n_commits - 1))) if n_commits > 2 else 0
    wall = float(ends.get("wall_s") or 0)
    out: dict[str, Any] = {"probes": probes, "step_wall_s": ends.get("wall_s"),
                           "wall_s": round(probes * wall, 1)}
    text = (f"{n_commits - 2} commits between the ends: about {probes} probes, each a step like "
            f"the ends' ({wall:.0f} s): about {probes * wall / 60:.1f} min, more for each "
            "skipped one")
    cell = ends.get("cell_summary") or {}
    # measured by the anytime-valid design (its comparisons say why they stopped): a probe's
    # step stops as soon as it is decided, and its maximum is what more rounds would raise
    sequential = any("stop" in c for c in cell.get("steps") or [])
    aa = (cell.get("noise_floor") or {}).get("aa") or {}
    sd, rounds = aa.get("sd_per_round"), aa.get("rounds")
    threshold = (cell.get("noise_floor") or {}).get("threshold")
    if sd and rounds and threshold is not None and step.get("estimate"):
        effect = abs(step["estimate"] - 1)
        need, capped = protocol.rounds_for(float(sd), effect, float(threshold), 3, 200)
        # the A/A SD of a few rounds is itself uncertain (3 rounds: 2 degrees of freedom): the
        # walk is refused only when even its lower 90 % confidence bound leaves a step short
        low_sd = protocol.sd_bound(float(sd), int(rounds), OPTIMISTIC)
        low_need, low_capped = protocol.rounds_for(low_sd, effect, float(threshold), 3, 200)
        out.update(step_effect=effect, aa_sd=sd, step_rounds=rounds,
                   rounds_to_place=None if capped else need, aa_sd_low=low_sd,
                   rounds_to_place_low=None if low_capped else low_need)
        if capped:
            text += (f"; placing a probe needs a {effect * 100:.1f} % difference called, which "
                     f"at this noise (A/A SD {sd * 100:.1f} % per round) takes more than 200 "
                     "rounds: the walk is unlikely to resolve")
        elif need > rounds:
            text += (f"; placing a probe needs a {effect * 100:.1f} % difference called: at this "
                     f"noise (A/A SD {sd * 100:.1f} % per round) about {need} rounds for 80 % "
                     f"power, and a step measures {rounds}: probes may be left unplaced "
                     f"(skipped); --config "
                     + (f"measure.sequential.max={need}" if sequential else
                        f"measure.rounds={need} (with rounds_from_noise off)")
                     + " would place them")
        else:
            text += (f"; a step's {rounds} rounds call the {effect * 100:.1f} % step with 80 % "
                     f"power ({need} would do)")
    out["text"] = text
    return out


def out_of_placing(expected: Mapping[str, Any], most: int, setting: str
                   ) -> dict[str, Any] | None:
    """When the ends' effect and noise say a step's rounds (at most ``most``, set by
    ``setting``) would not place a probe with 80 % power (``expected_cost``), even at the lower
    90 % confidence bound of the ends' A/A SD (a few rounds estimate it loosely: CI's 3-round
    ends once read 26 % for a pair that is a few % apart), what the walk needs instead: the
    rounds at the measured noise, the setting that gives them and the walk's minutes at that
    many rounds a step (its steps scaled from the ends'); None when they would (or nothing was
    measured to say)."""
    if "rounds_to_place" not in expected:
        return None
    need = expected["rounds_to_place"]
    low = expected.get("rounds_to_place_low", need)
    if (need is not None and need <= most) or (low is not None and low <= most):
        return None  # at the measured noise, or at its optimistic bound, a step would do
    out: dict[str, Any] = {"why": "probes", "rounds": need, "most": most}
    if need is None:
        out["text"] = (f"placing a probe needs a {expected['step_effect'] * 100:.1f} % "
                       f"difference called, which at this noise (A/A SD "
                       f"{expected['aa_sd'] * 100:.1f} % per round) takes more than 200 rounds:"
                       " the step is too small for this noise to bisect (--walk-anyway walks "
                       "regardless)")
        return out
    out["config"] = f"{setting}={need}"
    steps = int(expected["probes"]) + 1
    wall = float(expected.get("step_wall_s") or 0)
    rounds = int(expected.get("step_rounds") or 0)
    out["minutes"] = round(steps * wall * need / rounds / 60, 1) if wall and rounds else None
    out["text"] = (f"placing a probe needs a {expected['step_effect'] * 100:.1f} % difference "
                   f"called: at this noise (A/A SD {expected['aa_sd'] * 100:.1f} % per round) "
                   f"about {need} rounds for 80 % power, and a step measures at most {most} "
                   f"({setting}). "
                   f"Run again with --config {out['config']}"
                   + (f" (about {out['minutes']} min for the ends and {steps - 1} probes)"
                      if out["minutes"] else "")
                   + f", or with --walk-anyway to walk at {most} (probes may be left unplaced "
                   "and skipped)")
    return out


def failed_text(broken: Mapping[str, Any]) -> str:
    return "; ".join(f"{name} {why}" for name, why in broken.items())


def render(doc: Mapping[str, Any]) -> str:
    def ratio(b: Mapping[str, Any] | None) -> str:
        if not b or b.get("estimate") is None or b.get("lo") is None:
            return "-"
        return f"{b['estimate']:.3f}x ({b['lo']:.3f}-{b['hi']:.3f})"

    def call(b: Mapping[str, Any] | None) -> str:
        return b["call"] if b else "-"

    c = doc["cell"]
    ends = doc.get("ends")
    lines = [f"# ladder bisect {doc['id']}: {c['rung']} {c['quant']} {c['workload']} "
             f"t{c['threads']}", "",
             f"{len(doc['commits'])} commits from {doc['good'][:12]} (good) to "
             f"{doc['bad'][:12]} (bad), first-parent" + (
                 f"; the ends: bad over good {ends['text']}." if ends else "."), "",
             "| step | commit | subject | over good (95 % CI) | over good | bad over it | "
             "placed | wall s |", "|---|---|---|---|---|---|---|---:|"]
    subjects = {x["sha"]: x["subject"] for x in doc["commits"]}
    for s in doc["steps"]:
        if "probe" not in s:  # the ends (measured again once if their A/A check failed)
            placed = ("failed: " + s["failed"] if s.get("failed")
                      else s.get("side", "-") if s.get("set_aside") else "-")
            lines.append(f"| {s['label']} | {doc['bad'][:10]} | {subjects[doc['bad']][:40]} | "
                         f"{ratio(None if s.get('set_aside') else ends)} | "
                         f"{call(None if s.get('set_aside') else ends)} | - | {placed} | "
                         f"{'-' if s.get('wall_s') is None else s['wall_s']} |")
            continue
        lines.append(f"| {s['label']} | {s['probe'][:10]} | {subjects[s['probe']][:40]} | "
                     f"{ratio(s.get('vs_good'))} | {call(s.get('vs_good'))} | "
                     f"{call(s.get('bad_vs_probe'))} | {s.get('side', '-')} | "
                     f"{'-' if s.get('wall_s') is None else s['wall_s']} |")
    builds = [b for s in doc["steps"] for b in s.get("builds") or []]
    seen: dict[str, Mapping[str, Any]] = {}
    for b in builds:
        seen.setdefault(str(b["build_key"]), b)
    skipped = doc.get("skipped") or []
    lines += ["", f"**{doc['result']}**: {doc['text']}", ""]
    if skipped:
        lines += [f"Skipped ({len(skipped)}): " + "; ".join(
            f"{k['commit'][:10]} {k['why']}" for k in skipped), ""]
    lines += [f"{len(doc['steps'])} steps; {len(seen)} builds, "
              f"{sum(float(b.get('build_wall_s') or 0) for b in seen.values()):.0f} s of "
              f"compiling ({sum(int(b['ccache_misses']) for b in seen.values())} compiler-cache "
              f"misses, {sum(int(b['ccache_hits']) for b in seen.values())} hits); each step's "
              "comparisons are one Benjamini-Hochberg family.", ""]
    return "\n".join(lines)
