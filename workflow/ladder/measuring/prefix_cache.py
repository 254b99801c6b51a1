"""The prefix-cache serving experiment: per round and rung a fresh llama-server, then cold TTFT
(cache_prompt false) vs warm TTFT on a shared prefix, from the server's own timings; every raw
reply kept. It runs through ``ladder.measuring.harness`` (the bench cells' round loop: seeded
orders, CPU placement, disturbed rounds measured again); the report's view of it is
``ladder.analysis.serving_view``, its settings ``serving.prefix_cache``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.machine import task_cpus
from ladder.core.watch import Watch, process_cpu_s
from ladder.core.records import RungEntry
from ladder.measuring import harness
from ladder.measuring.harness import Attempt, Cell, Outcome, Paths, Policy
from ladder.measuring.llama_server import PortTaken, llama_server

FORMAT = "ladder-serving/1"


def prefix_words(corpus: str, n: int) -> str:
    words = Path(corpus).read_text(errors="replace").split()
    if len(words) < n + 40:
        raise LadderError(f"serving.prefix_cache.prefix_words: {n} words asked for, but the "
                          f"corpus {corpus} has {len(words)}")
    return " ".join(words[:n])


SUFFIXES = ("\n\nQuestion: who may copy this text?\nAnswer:",
            "\n\nQuestion: what does the license protect?\nAnswer:",
            "\n\nQuestion: summarise the first paragraph.\nAnswer:")


@dataclass
class PrefixCache(harness.ModelExperiment):
    """Per round and rung: a fresh server, then cold, priming and warm requests on one prefix."""

    prefix: str
    port: int | None

    def process(self, cell: Cell, policy: Policy, at: Attempt) -> Outcome:
        log = f"{at.stem}.server.log"
        watch, cpu_s, seen = Watch(), 0.0, None
        try:
            with llama_server(cell.bins[at.name], self.model["path"], threads=self.threads,
                              ctx=self.cfg["ctx"], log=log, port=self.port, env=at.rung["env"],
                              cpus=policy.cpu_list,
                              args=[*at.rung["common_argv"], *self.cfg.get("server_args", [])],
                              ready_timeout_s=self.cfg["ready_timeout_s"]) as srv:
                srv.post("/completion", {"prompt": "Hello", "n_predict": 1,
                                         "cache_prompt": False}, policy.timeout_s)  # loads it all
                seen = sorted({c for cs in task_cpus(srv.pid).values() for c in cs}) or None
                out = self.requests(srv, cell.seed, policy.timeout_s)
                cpu_s = process_cpu_s(srv.pid)
        except PortTaken:
            raise  # the machine's fault, not the rung's: the rule fails, naming the port
        except LadderError as exc:
            return Outcome({}, watch.share(cpu_s), seen, str(exc), raw=log)
        atomic_write_text(f"{at.stem}.json", json.dumps(out, indent=1))
        return Outcome({"samples": [self.sample(kind, at.name, out[kind])
                                    for kind in ("cold", "warm")]},
                       watch.share(cpu_s), seen, raw=log, note=", ".join(
                           f"{k} {float((out[k]['timings'] or {}).get('prompt_ms') or 0):.0f} "
                           "ms prefill" for k in ("cold", "warm")))

    def requests(self, srv: Any, seed: int, timeout_s: float) -> dict[str, Any]:
        out = {}
        for kind, suffix, cache in (("cold", SUFFIXES[0], False), ("prime", SUFFIXES[1], True),
                                    ("warm", SUFFIXES[2], True)):
            reply, wall_ms = srv.post("/completion", {
                "prompt": self.prefix + suffix, "n_predict": 1, "cache_prompt": cache,
                "temperature": 0, "seed": seed}, timeout_s)
            out[kind] = {"wall_ms": round(wall_ms, 3), "timings": reply.get("timings"),
                         "tokens_cached": reply.get("tokens_cached")}
        return out

    def sample(self, kind: str, name: str, got: Mapping[str, Any]) -> dict[str, Any]:
        t = got["timings"] or {}
        prompt_ms = float(t.get("prompt_ms") or 0.0)
        first_ms = prompt_ms + float(t.get("predicted_ms") or 0.0)
        return {
            "rung": name if kind == "cold" else f"{name}+cache", "base_rung": name,
            "kind": kind, "ttft_ms": first_ms, "wall_ms": got["wall_ms"],
            "prompt_ms": prompt_ms, "prompt_n": t.get("prompt_n"),
            "cache_n": t.get("cache_n"), "n_threads": self.threads,
            # a rate, so "faster" reads the same way as throughput: first tokens per s
            "tokens_per_s": 1000.0 / first_ms if first_ms > 0 else 0.0,
        }


def prefix_cache(rungs: Sequence[RungEntry], block: Mapping[str, Any],
                 settings: Mapping[str, Any], paths: Paths, threads: int,
                 own_cpus: int | None = None, *, corpus: str) -> dict[str, Any]:
    """Cold vs warm TTFT on a shared prefix (``PrefixCache``), every rung interleaved;
    ``block``: the serving policy (``harness.policy_from``); ``corpus``: the text the prefix
    is cut from."""
    model = read_json(paths.model_meta)
    cfg = settings["prefix_cache"]
    exp = PrefixCache(name=f"prefix_cache/{model['quant']}/t{threads}", model=model, cfg=cfg,
                      threads=threads, prefix=prefix_words(corpus, cfg["prefix_words"]),
                      port=cfg.get("port"))
    cell, _, meta = harness.run_cell(exp, rungs, block, paths, (threads, None, own_cpus))
    if not cell.samples:
        raise harness.nothing_measured(
            "serving prefix_cache: no rung's llama-server produced a measurement", cell)
    doc = {"format": FORMAT, **meta,
           "experiment": "prefix_cache", "quant": model["quant"].lower(),
           "workload": "prefix_cache", "threads": threads,
           "prefix_words": cfg["prefix_words"], "ctx": cfg["ctx"],
           "server_args": list(cfg.get("server_args", [])), "samples": cell.samples,
           "method": "llama-server on 127.0.0.1, one fresh server per round and rung; TTFT = "
                     "prompt_ms + predicted_ms (n_predict 1) from the server's timings; cold "
                     "with cache_prompt false, warm after a priming request on the same prefix"}
    atomic_write_json(paths.out_json, doc)
    return doc
