"""Long context: a fixed prompt (prefill) and its decode after a context of depth d, per rung,
every rung interleaved in rounds (``ladder.measuring.harness``), every depth judged by the
ladder's rule; the report's view is ``ladder.analysis.depth_view``, its settings
``serving.depth``.

The context is computed once per rung and reused (issue 58): a rung's first round fills it with
llama-server (one request of the context's tokens, no output) and saves the slot
(``POST /slots/0?action=save``) at each depth, into a folder named by everything the saved state
depends on (``context_key``: the build, the model, the server's arguments, the context size and
tokens); every timed request afterwards restores the depth's state
(``?action=restore``, a few ms) and sends the context's tokens followed by the round's prompt,
so the server reuses the restored cache and computes only the prompt. The timed work is read
from the server's own timings and checked to be exactly that: ``cache_n`` the depth, ``prompt_n``
the prompt, ``predicted_n`` the tokens asked for; anything else is a named failure of the rung,
never a sample. Peak RSS per depth is the server's VmHWM, reset before each depth
(``/proc/<pid>/clear_refs``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Mapping, Sequence

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.machine import task_cpus
from ladder.core.records import RungEntry
from ladder.core.watch import Watch, process_cpu_s
from ladder.core.kernels import load_families
from ladder.core.machine import host_arch
from ladder.measuring import harness, hotspots, load_client
from ladder.measuring.harness import Attempt, Cell, Outcome, Paths, Policy, cell_seed
from ladder.measuring.llama_server import PortTaken, Server, llama_server
from ladder.planning import protocol

FORMAT = "ladder-depth/1"
METHOD = ("llama-server per rung and round on the cell's CPU set, one slot; the context (random "
          "token IDs of a fixed seed) filled once per rung and saved with the slot API; before "
          "each timed request the depth's slot state is restored and the context's tokens "
          "followed by the round's prompt are sent (cache_prompt), so the server computes only "
          "the prompt; prefill = prompt_n / prompt_ms and decode = predicted_n / predicted_ms "
          "from the server's timings, checked to be the prompt after exactly d cached tokens")


def points(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every (depth, phase) point of the experiment, in depth order: its name, depth, phase and
    the workload it times."""
    out = []
    for d in sorted({int(x) for x in cfg["depths"]}):
        out.append({"point": f"pp{cfg['n_prompt']}@d{d}", "depth": d, "phase": "prefill",
                    "n_prompt": int(cfg["n_prompt"]), "n_gen": 0})
        out.append({"point": f"tg{cfg['n_gen']}@d{d}", "depth": d, "phase": "decode",
                    "n_prompt": 0, "n_gen": int(cfg["n_gen"])})
    return out


def saved_depths(folder: Path) -> list[int]:
    """The depths whose whole context a folder holds (``d<depth>.bin``; a ``.part`` never)."""
    return sorted(int(p.stem[1:]) for p in folder.glob("d*.bin") if p.stem[1:].isdigit())


def depths_of(cfg: Mapping[str, Any]) -> list[int]:
    """The configured depths, sorted, each once."""
    return sorted({int(d) for d in cfg["depths"]})


def ctx_for(cfg: Mapping[str, Any]) -> int:
    """-c of the one slot: the deepest context, the prompt, its output, and a margin."""
    return depths_of(cfg)[-1] + int(cfg["n_prompt"]) + int(cfg["n_gen"]) + 16


def context_tokens(cfg: Mapping[str, Any]) -> list[int]:
    """The context every depth is a prefix of: random token IDs of ``context_seed`` (the cost of
    attention does not depend on what the tokens say)."""
    rng = random.Random(f"ladder-depth-context/{int(cfg['context_seed'])}")
    return load_client.prompt_ids(rng, depths_of(cfg)[-1])


def server_argv(rung: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[str]:
    return [*rung["common_argv"], *cfg.get("server_args", [])]


def context_key(binary_dir: str, model: Mapping[str, Any], argv: Sequence[str],
                cfg: Mapping[str, Any]) -> str:
    """What a rung's saved contexts depend on, hashed: its build (the folder its binaries are in,
    named by the build's own key), the model file, the server's arguments and the context's
    seed. The depth is the file's name inside the folder. Not the server's context size: a
    state saved at one size restores into a larger one (measured: 1024 tokens saved under -c
    1088, restored under -c 4200, reused whole), so a deeper series extends the contexts a
    shallower one saved."""
    build = Path(binary_dir).resolve()
    ident = {"build": str(build), "llama_server": _stat(build / "llama-server"),
             "model": model.get("sha256") or str(model["path"]),
             "model_file": _stat(Path(model["path"])), "argv": list(argv),
             "context_seed": int(cfg["context_seed"]), "format": FORMAT}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _stat(p: Path) -> list[int] | None:
    try:
        st = p.stat()
    except OSError:
        return None
    return [st.st_size, int(st.st_mtime)]


def timed_sample(reply: Mapping[str, Any], depth: int, n_prompt: int, n_gen: int,
                 where: str) -> tuple[float, float, dict[str, Any]]:
    """Prefill and decode tokens/s of one timed request, from the server's timings, after
    checking the work was exactly the prompt after ``depth`` cached tokens and ``n_gen`` tokens
    out (a LadderError naming what differed otherwise); and the timings kept."""
    t = reply.get("timings") or {}
    got = {k: t.get(k) for k in ("cache_n", "prompt_n", "prompt_ms", "predicted_n",
                                 "predicted_ms")}
    want = {"cache_n": depth, "prompt_n": n_prompt, "predicted_n": n_gen}
    wrong = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    if wrong:
        raise LadderError(f"{where}: the timed request was not the prompt after the context: "
                          + ", ".join(f"{k} {g} (expected {w})" for k, (g, w) in wrong.items())
                          + " (the slot state was not reused as restored)")
    if not (got["prompt_ms"] and got["predicted_ms"]):
        raise LadderError(f"{where}: the server's timings have no prompt_ms/predicted_ms: {t}")
    return (1000.0 * n_prompt / float(got["prompt_ms"]),
            1000.0 * n_gen / float(got["predicted_ms"]), got)


def reset_peak_rss(pid: int) -> bool:
    """Reset the process's peak RSS (VmHWM) so that the next reading is this depth's."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass
class Depth(harness.ModelExperiment):
    """Per round and rung: one server, every depth in a seeded order, one timed request each
    after restoring the depth's saved context (filled on the rung's first round)."""

    contexts: Path
    fills: dict[str, dict[str, Any]] = field(default_factory=dict)

    def process(self, cell: Cell, policy: Policy, at: Attempt) -> Outcome:
        cfg = self.cfg
        argv = server_argv(at.rung, cfg)
        key = context_key(cell.bins[at.name], self.model, argv, cfg)
        folder = self.contexts / key
        folder.mkdir(parents=True, exist_ok=True)
        log = f"{at.stem}.server.log"
        watch, cpu_s, seen = Watch(), 0.0, None
        kept: dict[str, Any] = {"context_key": key, "requests": []}
        samples: list[dict[str, Any]] = []
        try:
            with self.server(cell.bins[at.name], at.rung, folder, log, policy) as srv:
                check(cfg, model_meta(srv, policy.timeout_s))
                fill = self.fill(srv, folder, at.name, policy.timeout_s)
                if fill:
                    kept["fill"] = fill
                seen = sorted({c for cs in task_cpus(srv.pid).values() for c in cs}) or None
                samples = self.timed(srv, cell_seed(cell.seed, f"depth/{at.rnd}"), at,
                                     policy.timeout_s, kept)
                cpu_s = process_cpu_s(srv.pid)
        except (PortTaken, BeyondModel):
            raise
        except LadderError as exc:
            atomic_write_text(f"{at.stem}.json", json.dumps(kept, indent=1))
            return Outcome({}, watch.share(cpu_s), seen, str(exc), raw=log)
        atomic_write_text(f"{at.stem}.json", json.dumps(kept, indent=1))
        deepest = depths_of(cfg)[-1]
        return Outcome({"samples": samples}, watch.share(cpu_s), seen, raw=log,
                       note=", ".join(f"{s['point']} {s['tokens_per_s']:.1f} t/s"
                                      for s in samples if s["depth"] == deepest))

    def server(self, bins: str, rung: Mapping[str, Any], folder: Path, log: str,
               policy: Policy) -> ContextManager[Server]:
        """A rung's server, one slot on the cell's CPUs, its saved contexts in ``folder``."""
        return llama_server(bins, self.model["path"], threads=self.threads,
                            ctx=ctx_for(self.cfg), log=log, port=self.cfg.get("port"),
                            env=rung["env"], slots=1, cpus=policy.cpu_list,
                            args=[*server_argv(rung, self.cfg), "--slot-save-path", str(folder)],
                            ready_timeout_s=self.cfg["ready_timeout_s"])

    def fill(self, srv: Server, folder: Path, name: str, timeout_s: float
             ) -> dict[str, Any] | None:
        """Save every depth's context this rung has not saved yet, each extending the deepest
        one saved below it (so a depth series costs one fill of its deepest context). Kept once
        per folder: later rounds, runs and rungs of the same build only restore."""
        depths = [d for d in depths_of(self.cfg) if d > 0]
        missing = [d for d in depths if not (folder / f"d{d}.bin").is_file()]
        if not missing:
            return None
        tokens = context_tokens(self.cfg)
        done: dict[str, Any] = {"depths": missing, "prompt_ms": {}, "save_ms": {}}
        t0 = time.monotonic()
        for d in missing:
            # the deepest context saved below it, by this series or another (the overlay's)
            below = [b for b in saved_depths(folder) if b < d]
            _slot(srv, "erase", None, timeout_s)
            if below:
                _slot(srv, "restore", f"d{below[-1]}.bin", timeout_s)
            reply, _ = srv.post("/completion", {"prompt": tokens[:d], "n_predict": 0,
                                                "cache_prompt": True}, timeout_s)
            t = reply.get("timings") or {}
            done["prompt_ms"][str(d)] = t.get("prompt_ms")
            part = f"d{d}.part.bin"
            saved = _slot(srv, "save", part, timeout_s)
            if int(saved.get("n_saved") or 0) != d:
                raise LadderError(f"{name}: saving the context at depth {d} saved "
                                  f"{saved.get('n_saved')} tokens (log: {srv.log})")
            os.replace(folder / part, folder / f"d{d}.bin")  # whole files only
            done["save_ms"][str(d)] = (saved.get("timings") or {}).get("save_ms")
        done["wall_s"] = round(time.monotonic() - t0, 3)
        self.fills[name] = done
        return done

    def timed(self, srv: Server, seed: int, at: Attempt, timeout_s: float,
              kept: dict[str, Any]) -> list[dict[str, Any]]:
        """Every depth once, in this round's seeded order: restore, one request, two samples
        (its prefill and its decode), the depth's peak RSS."""
        cfg = self.cfg
        tokens = context_tokens(cfg)
        n_prompt, n_gen = int(cfg["n_prompt"]), int(cfg["n_gen"])
        rng = random.Random(seed)
        prompt = load_client.prompt_ids(rng, n_prompt)
        order = depths_of(cfg)
        rng.shuffle(order)
        out = []
        for pos, d in enumerate(order):
            _slot(srv, "erase", None, timeout_s)
            reset = reset_peak_rss(srv.pid)
            restore_ms, reply, wall_ms = after_context(srv, d, tokens[:d] + prompt, n_gen, seed,
                                                       at.name, timeout_s)
            pp, tg, timings = timed_sample(reply, d, n_prompt, n_gen,
                                           f"{at.name} at depth {d}")
            rss = peak_rss_kib(srv.pid) if reset else None
            kept["requests"].append({"depth": d, "position": pos, "wall_ms": round(wall_ms, 3),
                                     "restore_ms": restore_ms, "timings": reply.get("timings")})
            common = {"depth": d, "depth_position": pos, "restore_ms": restore_ms,
                      "peak_rss_kib": rss, "n_threads": self.threads, **timings}
            out.append({**common, "point": f"pp{n_prompt}@d{d}", "phase": "prefill",
                        "n_prompt": n_prompt, "n_gen": 0, "tokens_per_s": pp})
            out.append({**common, "point": f"tg{n_gen}@d{d}", "phase": "decode",
                        "n_prompt": 0, "n_gen": n_gen, "tokens_per_s": tg})
        return out


def model_meta(srv: Server, timeout_s: float) -> dict[str, Any]:
    """The server's model facts (/v1/models: n_ctx_train, n_params, ...)."""
    req = urllib.request.Request(srv.url + "/v1/models")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data = json.loads(resp.read())
    except (OSError, ValueError) as exc:
        raise LadderError(f"llama-server /v1/models failed: {exc} (log: {srv.log})") from exc
    return dict(((data.get("data") or [{}])[0]).get("meta") or {})


def after_context(srv: Server, depth: int, prompt: list[int], n_gen: int, seed: int,
                  name: str, timeout_s: float) -> tuple[float | None, dict[str, Any], float]:
    """One request after ``depth`` tokens of context: the depth's saved state restored (and
    checked to hold ``depth`` tokens), then ``prompt`` (the context's tokens and the prompt);
    the restore's ms (None at depth 0), the reply and its wall ms."""
    restore_ms = None
    if depth > 0:
        got = _slot(srv, "restore", f"d{depth}.bin", timeout_s)
        if int(got.get("n_restored") or 0) != depth:
            raise LadderError(f"{name}: restoring depth {depth} gave "
                              f"{got.get('n_restored')} tokens (log: {srv.log})")
        restore_ms = (got.get("timings") or {}).get("restore_ms")
    reply, wall_ms = srv.post("/completion", {
        "prompt": prompt, "n_predict": n_gen, "cache_prompt": True, "ignore_eos": True,
        "temperature": 0, "seed": seed}, timeout_s)
    return restore_ms, reply, wall_ms


def _slot(srv: Server, action: str, filename: str | None, timeout_s: float
          ) -> dict[str, Any]:
    reply, _ = srv.post(f"/slots/0?action={action}",
                        {"filename": filename} if filename else {}, timeout_s)
    if "error" in reply:
        raise LadderError(f"llama-server slot {action} {filename or ''} failed: "
                          f"{reply['error']} (log: {srv.log})")
    return reply


class BeyondModel(LadderError):
    """A depth series the model cannot hold: the configuration's fault, never a rung's."""


def check(cfg: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
    """Refuse, by name, a depth series the model cannot hold (``meta``: the server's
    /v1/models entry, whose ``n_ctx_train`` is the model's trained context)."""
    need, n_ctx_train = ctx_for(cfg), (meta or {}).get("n_ctx_train")
    if n_ctx_train and need > int(n_ctx_train):
        raise BeyondModel(f"serving.depth.depths: the deepest context ({max(cfg['depths'])}) "
                          f"plus the prompt and output needs {need} tokens, beyond the model's "
                          f"trained context length {n_ctx_train}")


def where_time_goes(exp: Depth, cell: Cell, policy: Policy) -> dict[str, Any]:
    """Where the time of the timed work goes at the shallowest and the deepest depth, per rung
    of the ladder (``depth.hotspots``), after the measured rounds (never inside them): a server
    per rung, perf attached to it (cpu-clock, every thread) while the depth's request is
    repeated for at least ``min_seconds``, its samples grouped by the dispatch ledger's kernel
    families and the time groups (attention, activation quantization, ...)."""
    hcfg = exp.cfg.get("hotspots") or {}
    if not hcfg.get("enabled"):
        return {"status": "off"}
    perf = hotspots.perf_path()
    reason = hotspots.unavailable_reason(perf)
    if reason or perf is None:
        return {"status": "unavailable", "reason": reason}
    fset = load_families(host_arch())
    ds = depths_of(exp.cfg)
    out: dict[str, Any] = {"status": "ok", "frequency_hz": int(hcfg["frequency_hz"]),
                           "depths": [ds[0], ds[-1]], "families": list(fset.families),
                           "families_file": fset.source, "cells": []}
    ladder, _, _ = cell.roles()
    for name in ladder:
        if cell.status[name]["status"] != "measured":
            continue
        rung = cell.by_name[name]
        stem = cell.raw / "hotspots" / name
        stem.parent.mkdir(parents=True, exist_ok=True)
        folder = exp.contexts / context_key(cell.bins[name], exp.model,
                                            server_argv(rung, exp.cfg), exp.cfg)
        try:
            with exp.server(cell.bins[name], rung, folder, f"{stem}.server.log", policy) as srv:
                for d in out["depths"]:
                    out["cells"].append({"rung": name, "depth": d, **sample_depth(
                        exp, srv, perf, d, Path(f"{stem}.d{d}"), fset, policy.timeout_s)})
        except PortTaken:
            raise
        except LadderError as exc:
            out["cells"].append({"rung": name, "status": "failed", "reason": str(exc)})
    return out


def sample_depth(exp: Depth, srv: Server, perf: str, depth: int, stem: Path, fset: Any,
                 timeout_s: float) -> dict[str, Any]:
    """perf attached to the server while the depth's request (restore, then the prompt after
    the context) is repeated for at least ``hotspots.min_seconds``; its report grouped."""
    hcfg = exp.cfg["hotspots"]
    tokens = context_tokens(exp.cfg)
    prompt = tokens[:depth] + load_client.prompt_ids(random.Random(depth), int(exp.cfg["n_prompt"]))
    after_context(srv, depth, prompt, 1, 0, stem.name, timeout_s)  # every thread started
    data = f"{stem}.perf.data"
    with open(f"{stem}.record.log", "wb") as log:
        rec = subprocess.Popen(hotspots.record_pid_argv(perf, data, int(hcfg["frequency_hz"]),
                                                        srv.pid), stdout=log, stderr=log)
        n, t0 = 0, time.monotonic()
        try:
            time.sleep(0.5)  # perf attaches to every thread before the work starts
            while n == 0 or time.monotonic() - t0 < float(hcfg["min_seconds"]):
                _slot(srv, "erase", None, timeout_s)
                after_context(srv, depth, prompt, int(exp.cfg["n_gen"]), 0, stem.name,
                              timeout_s)
                n += 1
        finally:
            rec.send_signal(signal.SIGINT)
            try:
                rec.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rec.kill()
                rec.wait()
    if rec.returncode not in (0, -signal.SIGINT, 130):
        return {"status": "failed", "reason": f"perf record exited {rec.returncode} "
                f"(log: {stem}.record.log)", "requests": n}
    return {"requests": n, "raw": {"perf_data": os.path.basename(data),
                                   "report": f"{stem.name}.report.txt"},
            **hotspots.read_report(perf, data, stem, fset, int(hcfg["top"]), timeout_s)}


def lever_depths(cfg: Mapping[str, Any]) -> list[int]:
    """The depths the levers are measured at: ``levers.depths``, else the shallowest and the
    deepest of ``depths``."""
    want = (cfg.get("levers") or {}).get("depths")
    ds = sorted({int(d) for d in (want or cfg["depths"])})
    return ds if want else [ds[0], ds[-1]]


def lever_groups(levers: Sequence[RungEntry]) -> dict[str, list[RungEntry]]:
    """The lever entries (``Plan.server_levers``) by the rung they are settings of, in order."""
    out: dict[str, list[RungEntry]] = {}
    for e in levers:
        out.setdefault(str(e["lever"]["base"]), []).append(e)
    return out


def measure_depth(rungs: Sequence[RungEntry], block: Mapping[str, Any],
                  settings: Mapping[str, Any], paths: Paths, threads: int,
                  own_cpus: int | None = None, levers: Sequence[RungEntry] = (),
                  budget: harness.Budget | None = None) -> dict[str, Any]:
    """Every rung at every depth (``Depth``), rungs interleaved by the harness, each point
    (depth, phase) looked at by the anytime-valid design on its own; then, per lever rung, its
    lever settings at the lever depths in a cell of their own (each against the baseline, whose
    second label is that cell's noise floor). Each cell within its allowance of the run's
    ``budget``."""
    cfg = settings["depth"]
    model = read_json(paths.model_meta)
    exp = Depth(name=f"depth/{model['quant']}/t{threads}", model=model, cfg=cfg,
                threads=threads, contexts=Path(settings["keeps"]))
    cell, policy, meta, allowed = harness.run_budgeted(exp, rungs, block, paths,
                                                       (threads, protocol.POINTS, own_cpus),
                                                       budget, paths.out_json)
    if not cell.samples:
        raise harness.nothing_measured("serving depth: no rung's llama-server measured a depth",
                                       cell)
    doc = {"format": FORMAT, **meta, "experiment": "depth", "quant": model["quant"].lower(),
           "workload": "depth", "threads": threads, "spec": dict(cfg), "ctx": ctx_for(cfg),
           "points": points(cfg), "fills": exp.fills, "samples": cell.samples,
           "method": METHOD, "budget": allowed,
           "hotspots": where_time_goes(exp, cell, policy),
           "levers": [measure_levers(exp, group, block, paths, (threads, own_cpus), budget)
                      for group in lever_groups(levers).values()]}
    atomic_write_json(paths.out_json, doc)
    return doc


def measure_levers(ladder: Depth, group: Sequence[RungEntry], block: Mapping[str, Any],
                   paths: Paths, job: tuple[int, int | None], budget: harness.Budget | None
                   ) -> dict[str, Any]:
    """One lever rung's settings (``group``) at the lever depths, interleaved in rounds, as the
    ladder's experiment measures its rungs; the cell waits only for each setting against the
    baseline (not for one setting against another)."""
    threads, own_cpus = job
    base = str(group[0]["lever"]["base"])
    lcfg = {**ladder.cfg, "depths": lever_depths(ladder.cfg)}
    exp = Depth(name=f"depth-levers/{base}/{ladder.model['quant']}/t{threads}",
                model=ladder.model, cfg=lcfg, threads=threads, contexts=ladder.contexts)
    seq = block.get("sequential")
    lblock = {**block, "sequential": {**seq, "wait_for": ["vs_floor"]}} if seq else block
    where = Path(paths.raw_dir) / "levers" / base
    lpaths = Paths(paths.model_meta, str(where), paths.out_json,
                   str(Path(paths.log).with_suffix(f".levers-{base}.log")))
    cell, _, meta, allowed = harness.run_budgeted(
        exp, group, lblock, lpaths, (threads, protocol.POINTS, own_cpus), budget,
        f"{paths.out_json}#levers/{base}", none_ok=True)
    return {**meta, "base": base, "depths": lcfg["depths"], "budget": allowed,
            "settings": [e["name"] for e in group if not e.get("twin_of")],
            "baseline": group[0]["name"], "control": next(
                (e["name"] for e in group if e.get("twin_of")), None),
            "points": points(lcfg), "fills": exp.fills, "samples": cell.samples}
