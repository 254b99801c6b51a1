"""Serving under load: llama-server per rung, driven by ``load_client``, rungs taking turns
within shuffled rounds through the bench cells' harness (the report's view of it:
``analysis/load_view``).

Per round and rung: one server (``slots`` parallel sequences, the rung's binary, the cell's CPU
set, read back from /proc), warmed with one request per slot, then each level in turn:
closed-loop concurrency levels, open-loop Poisson rates, and the agent workload (multi-turn
conversations on a growing prefix) with prompt caching on and off. Every request's record and the
server's /metrics samples are kept; the analysis (``analysis/load_view``) reads only those.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.machine import task_cpus
from ladder.core.records import RungEntry
from ladder.core.watch import Watch, process_cpu_s
from ladder.measuring import harness, load_client
from ladder.measuring.harness import Attempt, Cell, Outcome, Paths, Policy, cell_seed
from ladder.measuring.llama_server import PortTaken, Server, llama_server
from ladder.planning import steady

FORMAT = "ladder-serving-load/1"
METHOD = ("llama-server (--metrics) per rung and round on the cell's CPU set, warmed with one "
          "request per slot; the client (ladder.load_client, aiohttp) streams /completion with "
          "token-ID prompts and times every token on its own clock; TTFT, TPOT, ITL and E2EL "
          "as vLLM's serving benchmark defines them; closed loop: N clients each sending its "
          "next request when the last one finished; open loop: Poisson arrivals")


def levels(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The levels of one round, in the order they run."""
    out: list[dict[str, Any]] = [{"level": f"c{c}", "kind": "closed", "concurrency": int(c)}
                                 for c in cfg["concurrency"]]
    out += [{"level": f"r{r:g}", "kind": "open", "rate": float(r)} for r in cfg["rates"]]
    agent = cfg.get("agent") or {}
    if agent.get("enabled"):
        out += [{"level": f"agent-{'cache' if c else 'nocache'}", "kind": "agent", "cache": c}
                for c in (True, False)]
    if (cfg.get("capacity") or {}).get("enabled"):
        out.append({"level": "capacity", "kind": "capacity"})
    return out


def _walk(passes: Callable[[int], bool], k0: int, kmin: int, kmax: int, step: int,
          gallop: bool) -> tuple[int | None, int | None]:
    """The bracket [lo, hi] on an integer grid where ``passes(lo)`` and not ``passes(hi)``
    (``lo`` None: even ``kmin`` failed; ``hi`` None: ``kmax`` passed), walking from ``k0``
    in steps of ``step`` (doubled after each step when ``gallop``), never past the grid's
    ends, then halving the bracket down to one grid step."""
    lo: int | None = None
    hi: int | None = None
    k = min(max(k0, kmin), kmax)
    if passes(k):
        lo = k
        while hi is None and lo < kmax:
            k = min(lo + step, kmax)
            if passes(k):
                lo = k
            else:
                hi = k
            step *= 2 if gallop else 1
    else:
        hi = k
        while lo is None and hi > kmin:
            k = max(hi - step, kmin)
            if passes(k):
                lo = k
            else:
                hi = k
            step *= 2 if gallop else 1
    while lo is not None and hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def _found(key: str, lo: float | None, hi: float | None, hint: float | None
           ) -> dict[str, Any]:
    bound = "bracketed" if lo is not None and hi is not None else (
        "above" if lo is not None else "below")
    return {key: lo, "bracket": [lo, hi], "bound": bound, "hint": hint}


def search_capacity(attains: Callable[[float], bool], *, start: float, min_rate: float,
                    max_rate: float, bisect: int, hint: float | None = None,
                    guess: float | None = None) -> dict[str, Any]:
    """The highest request rate whose probe ``attains(rate)`` (passes ``planning/steady``'s
    rule), on the grid start x 2^(k / 2^bisect) between the powers of two (times ``start``)
    nearest inside [min_rate, max_rate]. A first search (``hint`` None) doubles from ``start``
    (or halves, if ``start`` fails) until one rate passes and the next fails, then bisects that
    bracket ``bisect`` times (not vLLM's or guidellm's sweeps: docs/serving-under-load.md
    says how they differ and why). A later
    round starts at ``hint`` (the rung's capacity in its earlier rounds) and walks one grid step,
    then two, four, ... until the bracket is found, then bisects it: the same grid, so the same
    resolution, in two probes when the capacity held. A first search given a ``guess`` (from
    the server's own service time: ``first_guess``) walks from it the same way. The capacity
    is the highest rate that passed (a lower bound of the round's true capacity); the true one
    lies below ``bracket[1]``. ``bound``: "bracketed", "below" (even the lowest rate failed: capacity
    below it) or "above" (the highest passed: capacity at least it)."""
    m = 2 ** int(bisect)
    # the ends as before: whole doublings of start inside [min_rate, max_rate]
    kmin = -m * math.floor(math.log2(start / min_rate) + 1e-9)
    kmax = m * math.floor(math.log2(max_rate / start) + 1e-9)

    def rate(k: int) -> float:
        return start * 2 ** (k / m)

    def passes(k: int) -> bool:
        return attains(rate(k))

    from_rate = hint if hint is not None else guess
    if from_rate is None:
        lo, hi = _walk(passes, 0, kmin, kmax, m, gallop=False)
    else:
        lo, hi = _walk(passes, round(m * math.log2(from_rate / start)), kmin, kmax, 1,
                       gallop=True)
    return {**_found("capacity_rps", None if lo is None else rate(lo),
                     None if hi is None else rate(hi), hint),
            "guess": guess if hint is None else None}


def first_guess(service_s: float | None, slots: int, fraction: float) -> float | None:
    """Where a rung's first capacity search starts: ``fraction`` of the rate its server serves
    with every slot busy (slots / service time, its saturation as measured at its warm-up; a
    queue's capacity within a latency limit lies below it). None (the search doubles from
    start_rps) when the fraction is 0 or no service time was measured. On this VM the
    capacities found were 0.72-0.86 of it (docs/serving-capacity.md)."""
    if not fraction or not service_s or service_s <= 0:
        return None
    return fraction * slots / service_s


def search_concurrency(attains: Callable[[int], bool], *, max_streams: int,
                       hint: int | None = None) -> dict[str, Any]:
    """The most concurrent streams (closed loop: each client sends its next request when its
    last one finished) whose probe ``attains(n)``: from 1 (or ``hint``, a later round's start)
    up by 1, 2, 4, ... streams until one fails, then bisected to a single stream (exact, for
    attainment that falls with load). ``bound`` as ``search_capacity``'s (below: even one
    stream failed)."""
    lo, hi = _walk(attains, 1 if hint is None else int(hint), 1, int(max_streams), 1,
                   gallop=True)
    return _found("capacity_streams", lo, hi, hint)


def slots_for(cfg: Mapping[str, Any]) -> int:
    agent = cfg.get("agent") or {}
    return max([int(c) for c in cfg["concurrency"]]
               + ([int(agent["conversations"])] if agent.get("enabled") else []) + [1])


def ctx_for(cfg: Mapping[str, Any]) -> int:
    """-c: every slot holds the longest request (llama-server splits -c among slots)."""
    agent = cfg.get("agent") or {}
    per = sum(longest(cfg))
    if agent.get("enabled"):
        per = max(per, agent["turns"] * (agent["turn_tokens"] + agent["n_gen"]))
    return slots_for(cfg) * (per + 16)


def longest(cfg: Mapping[str, Any]) -> tuple[int, int]:
    """The longest prompt and output a request can have (``lengths``)."""
    mix = cfg.get("mix") or {}
    if mix.get("kind", "fixed") == "fixed":
        return int(cfg["n_prompt"]), int(cfg["n_gen"])
    f = float(mix["max_factor"])
    return math.ceil(f * cfg["n_prompt"]), math.ceil(f * cfg["n_gen"])


def draw_length(rng: random.Random, mean: float, cv: float, most: int) -> int:
    """One length from a lognormal of this mean and coefficient of variation, rounded, in
    [1, most] (the clamps move the mean a little: the report states the lengths sent)."""
    if cv <= 0:
        return int(round(mean))
    sigma2 = math.log(1 + cv * cv)
    x = rng.lognormvariate(math.log(mean) - sigma2 / 2, math.sqrt(sigma2))
    return min(max(1, int(round(x))), most)


def lengths(cfg: Mapping[str, Any], rng: random.Random) -> tuple[int, int]:
    """A request's prompt and output lengths (``load.mix``): fixed at n_prompt / n_gen, or drawn
    from lognormals with those means (each request's own seeded draw)."""
    mix = cfg.get("mix") or {}
    if mix.get("kind", "fixed") == "fixed":
        return int(cfg["n_prompt"]), int(cfg["n_gen"])
    most_p, most_g = longest(cfg)
    return (draw_length(rng, cfg["n_prompt"], float(mix["prompt_cv"]), most_p),
            draw_length(rng, cfg["n_gen"], float(mix["output_cv"]), most_g))


def _body(cfg: Mapping[str, Any], seed: int) -> load_client.Body:
    def make(i: int) -> dict[str, Any]:
        rng = random.Random(cell_seed(seed, f"request/{i}"))
        n_prompt, n_gen = lengths(cfg, rng)
        return {"prompt": load_client.prompt_ids(rng, n_prompt), "n_predict": n_gen,
                "ignore_eos": True, "temperature": 0, "cache_prompt": False}
    return make


def run_level(srv: Server, lv: Mapping[str, Any], cfg: Mapping[str, Any], seed: int,
              decided: Callable[[Sequence[load_client.Request]], bool] | None = None
              ) -> tuple[list[load_client.Request], float, list[dict[str, float]]]:
    """One level against a running server; its requests, duration and /metrics samples
    (``decided``: a capacity probe's early end, ``load_client.open_loop``)."""
    timeout, max_s = float(cfg["request_timeout_s"]), float(cfg["level_max_s"])
    body = _body(cfg, cell_seed(seed, lv["level"]))
    if lv["kind"] == "closed":
        work = load_client.closed_loop(srv.url, lv["level"], body, concurrency=lv["concurrency"],
                                   requests=cfg["requests"], timeout_s=timeout, max_s=max_s,
                                   decided=decided)
    elif lv["kind"] == "open":
        work = load_client.open_loop(srv.url, lv["level"], body, rate=lv["rate"],
                                 requests=cfg["requests"],
                                 seed=lv.get("arrivals_seed", cell_seed(seed, "arrivals")),
                                 timeout_s=timeout, max_s=max_s,
                                 burstiness=cfg.get("burstiness", 1.0), decided=decided)
    else:
        work = _agent(srv.url, lv, cfg["agent"], seed, timeout)
    (reqs, duration), seen = load_client.run(
        load_client.with_metrics(srv.url, float(cfg["metrics_every_s"]), work))
    return reqs, duration, seen


async def _agent(url: str, lv: Mapping[str, Any], acfg: Mapping[str, Any], seed: int,
                 timeout: float) -> tuple[list[load_client.Request], float]:
    t0 = time.perf_counter()
    convs = await asyncio.gather(*(load_client.conversation(
        url, lv["level"], conv=c, turns=acfg["turns"], turn_tokens=acfg["turn_tokens"],
        n_gen=acfg["n_gen"], cache=lv["cache"], slot=c,
        seed=cell_seed(seed, f"conversation/{c}"), timeout_s=timeout)
        for c in range(acfg["conversations"])))
    return [r for conv in convs for r in conv], time.perf_counter() - t0


def alive(pid: int) -> bool:
    """The server process is still running (a zombie, reaped later, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class Load(harness.ModelExperiment):
    """Per round and rung: one server through every level (``process``); the levels' rows and
    every request are its records."""

    plan: list[dict[str, Any]]

    def process(self, cell: Cell, policy: Policy, at: Attempt) -> Outcome:
        """One rung's server for one round: every level, every request kept; a server that
        does not start or dies is this rung's status, never the run's (a taken port is the
        machine's)."""
        cfg = self.cfg
        seed = cell_seed(cell.seed, f"{self.name}/{at.rnd}")
        hints = capacity_hints([r for r in cell.records.get("levels", [])
                                if r["rung"] == at.name and r["kind"] == "capacity"
                                and not r.get("disturbed")]) \
            if (cfg.get("capacity") or {}).get("warm_start") else {}
        log = f"{at.stem}.server.log"
        got: dict[str, Any] = {"levels": [], "requests": [], "metrics": {}}
        watch, cpu_s, seen = Watch(), 0.0, None
        out = Outcome({"levels": got["levels"], "requests": got["requests"]}, {}, None, raw=log)
        try:
            with llama_server(cell.bins[at.name], self.model["path"], threads=self.threads,
                              ctx=ctx_for(cfg), log=log, port=cfg.get("port"),
                              env=at.rung["env"], slots=slots_for(cfg), cpus=policy.cpu_list,
                              args=[*at.rung["common_argv"], "--metrics",
                                    *cfg.get("server_args", [])],
                              ready_timeout_s=cfg["ready_timeout_s"]) as srv:
                seen, service_s = self.warm_up(srv, seed)
                try:
                    self.levels(srv, seed, hints, got, (seen, service_s))
                finally:
                    cpu_s = process_cpu_s(srv.pid)
            out.note = ", ".join(
                f"{r['level']} p99 TTFT {_ms(r['summary']['ttft_p99_ms'])}"
                if r["kind"] != "capacity" else f"capacity {_rps(r)}"
                for r in got["levels"] if r["kind"] != "agent") or "no level"
        except PortTaken:
            raise
        except LadderError as exc:
            out.failure, out.crashed = str(exc), bool(got["levels"])
        out.machine, out.cpus_seen = watch.share(cpu_s), seen
        atomic_write_text(f"{at.stem}.json", json.dumps(got, indent=1, default=str))
        return out

    @contextmanager
    def session(self, policy: Policy) -> Iterator[None]:
        """The load generator (this process) runs beside the servers' CPUs
        (``_client_cpus``) for the whole cell."""
        client_cpus = _client_cpus(policy.cpu_list)
        before = os.sched_getaffinity(0)
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        try:
            yield
        finally:
            os.sched_setaffinity(0, before)

    def warm_up(self, srv: Server, seed: int) -> tuple[list[int] | None, float | None]:
        """Two waves of one full request per slot; the CPUs the server's threads may run on and
        its service time: the mean prefill + decode time (its own timings) of the second
        wave's requests, every slot busy (what a capacity probe's window is sized by,
        ``steady.window``)."""
        slots = slots_for(self.cfg)
        # requests of the mix's mean lengths: the service time of a mean request
        warm = {**self.cfg, "requests": 2 * slots, "mix": {"kind": "fixed"}}
        wreqs, _, _ = run_level(srv, {"level": "warmup", "kind": "closed",
                                      "concurrency": slots}, warm, seed)
        if any(r.status != "ok" for r in wreqs):
            raise LadderError("warmup failed: " + "; ".join(
                str(r.error) for r in wreqs if r.status != "ok"))
        times = [float(t["prompt_ms"]) + float(t["predicted_ms"]) for r in wreqs[slots:]
                 for t in [r.timings or {}] if t.get("prompt_ms") is not None
                 and t.get("predicted_ms") is not None]
        service_s = sum(times) / len(times) / 1000.0 if times else None
        return sorted({c for cs in task_cpus(srv.pid).values() for c in cs}) or None, service_s

    def levels(self, srv: Server, seed: int, hints: Mapping[str, Any], got: dict[str, Any],
               warm: tuple[list[int] | None, float | None]) -> None:
        """The levels in a fresh order per round, the same for every rung of the round (its
        seed): a level run early or late (a warmer server, an agent level after its twin) is no
        longer always the same level."""
        cfg, rows, recs, metrics_seen = self.cfg, got["levels"], got["requests"], got["metrics"]
        seen, service_s = warm
        order = list(self.plan)
        random.Random(seed).shuffle(order)
        for i, lv in enumerate(order):
            if lv["kind"] == "capacity":
                # every probe checks the server is alive (``_probe``)
                row, records = _capacity(srv, lv, cfg, seed, metrics_seen, hints, service_s)
                rows.append({**row, "position": i, "cpus_seen": seen,
                             "service_ms": None if service_s is None else service_s * 1000})
                recs += records
                continue
            reqs, duration, mseen = run_level(srv, lv, cfg, seed)
            records = [r.record() for r in reqs]
            summary = load_client.summarize(records, duration, cfg["limits"])
            metrics_seen[lv["level"]] = mseen
            rows.append({**lv, "position": i, "duration_s": duration, "summary": summary,
                         "server_metrics": load_client.metrics_brief(mseen), "cpus_seen": seen})
            recs += records
            if not alive(srv.pid):
                skipped = [x["level"] for x in order[i + 1:]]
                raise LadderError(f"llama-server died during level {lv['level']} "
                                  f"({summary['failed'] + summary['timeout']} of "
                                  f"{summary['requests']} requests failed)"
                                  + (f"; not run: {', '.join(skipped)}" if skipped else ""))


def measure_load(rungs: Sequence[RungEntry], block: Mapping[str, Any],
                 settings: Mapping[str, Any], paths: Paths, threads: int,
                 own_cpus: int | None = None) -> dict[str, Any]:
    """Every rung's server under the load levels (``Load``), rungs interleaved by the harness;
    ``block``: the serving policy (``harness.policy_from``), ``settings["load"]``:
    ``serving.load``. The load generator runs beside the servers' CPUs (``_client_cpus``)."""
    cfg = settings["load"]
    model = read_json(paths.model_meta)
    quant = model["quant"].lower()
    exp = Load(name=f"load/{quant}/t{threads}", model=model, cfg=cfg, threads=threads,
               plan=levels(cfg))
    cell, policy, meta = harness.run_cell(exp, rungs, block, paths, (threads, None, own_cpus))
    client_cpus = _client_cpus(policy.cpu_list)
    if not cell.records.get("levels"):
        raise harness.nothing_measured(
            "serving load: no rung's llama-server completed a level", cell)
    doc = {"format": FORMAT, **meta, "experiment": "load", "quant": quant, "threads": threads, "spec": dict(cfg),
           "levels_planned": exp.plan, "slots": slots_for(cfg), "ctx": ctx_for(cfg),
           "cpus": ",".join(map(str, policy.cpu_list)) if policy.cpu_list else None,
           "client_cpus": ",".join(map(str, client_cpus)) if client_cpus else None,
           "levels": cell.records["levels"], "requests": cell.records.get("requests", []),
           "method": METHOD}
    atomic_write_json(paths.out_json, doc)
    return doc


def _client_cpus(server_cpus: Sequence[int] | None) -> list[int] | None:
    """The load generator runs beside the server's CPUs where the host has others (on a host
    with no spare CPU it shares them, as any client on that host would)."""
    if not server_cpus:
        return None
    rest = sorted(set(os.sched_getaffinity(0)) - set(server_cpus))
    return rest or None


def _capacity(srv: Server, lv: Mapping[str, Any], cfg: Mapping[str, Any], seed: int,
              metrics_seen: dict[str, Any], hints: Mapping[str, Any], service_s: float | None
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """This round's capacity searches on a running server: the request rate
    (``search_capacity``; every probe an open-loop level at its rate, sized by the server's
    service time and judged by ``steady``'s rule: ``_rate_probe``) and, with
    ``capacity.max_streams``, the concurrent streams (``search_concurrency``; every probe a
    closed-loop level of that many clients: ``_stream_probe``). ``hints``: this rung's
    capacities in its earlier rounds, where a later round's searches start
    (``capacity.warm_start``). Every probe's summary and requests are kept."""
    cap = cfg["capacity"]
    if service_s is None:
        raise LadderError("capacity: the warm-up's requests carried no server timings "
                          "(prompt_ms, predicted_ms), so no probe can be sized")
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    rate_probes: list[dict[str, Any]] = []
    kept = (rate_probes, records, metrics_seen)

    def at_rate(rate: float) -> bool:
        return _rate_probe(srv, cfg, seed, steady.window(rate, service_s, cap), kept)

    found = search_capacity(at_rate, start=float(cap["start_rps"]),
                            min_rate=float(cap["min_rps"]), max_rate=float(cap["max_rps"]),
                            bisect=int(cap["bisect"]), hint=hints.get("rate"),
                            guess=first_guess(service_s, slots_for(cfg),
                                              float(cap.get("start_from_service") or 0)))
    rate_s = time.perf_counter() - t0
    row = {**lv, "duration_s": rate_s, "summary": {}, "server_metrics": {},
           "capacity": {**found, "target": cap["target"], "probes": rate_probes,
                        "duration_s": rate_s}}
    if int(cap.get("max_streams") or 0) > 0:
        t1 = time.perf_counter()
        stream_probes: list[dict[str, Any]] = []

        def at_streams(n: int) -> bool:
            return _stream_probe(srv, cfg, seed, n, (stream_probes, records, metrics_seen))

        streams = search_concurrency(at_streams, max_streams=int(cap["max_streams"]),
                                     hint=hints.get("concurrency"))
        row["concurrency"] = {**streams, "target": cap["target"], "probes": stream_probes,
                              "duration_s": time.perf_counter() - t1}
        row["duration_s"] = time.perf_counter() - t0
    return row, records


Kept = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]
PROBE_KEYS = ("achieved_rate_rps", "requests_per_s", "output_tokens_per_s", "send_lag_p99_ms",
              "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")


def _rate_probe(srv: Server, cfg: Mapping[str, Any], seed: int, win: steady.Window,
                kept: Kept) -> bool:
    """One rate probe (``steady``): not run when it would need more than ``probe_max_s``;
    else ``win.n_warm + win.n`` Poisson arrivals, an independent draw per probe (seeded by the
    round and the probe's place in it, recorded), ending early once the measured requests'
    misses can no longer pass; a probe whose client fell behind its schedule (p99 send lag
    over ``send_lag_gaps`` mean gaps) is discarded, kept as such, and run again, at most
    ``reruns`` times."""
    probes, records, metrics_seen = kept
    cap = cfg["capacity"]
    level = f"capacity@{win.rate:.4g}"
    if not win.testable:
        probes.append({"rate": win.rate, "level": level, "window": win.record(),
                       "testable": False, "passed": False, "requests": 0, "sent": 0,
                       "good": 0, "attainment": None, "duration_s": 0.0,
                       "why": f"untestable: {win.total_s:.0f} s needed > probe_max_s "
                              f"{float(cap['probe_max_s']):g} s"})
        return False
    bound_ms = float(cap["send_lag_gaps"]) * 1000.0 / win.rate
    for attempt in range(int(cap["reruns"]) + 1):
        arrivals = cell_seed(seed, f"arrivals/{level}/{len(probes)}")
        lv = {"level": level, "kind": "open", "rate": win.rate, "arrivals_seed": arrivals}
        recs, summary, judged = _run_probe(srv, cfg, seed, lv, win, metrics_seen)
        lag = summary.get("send_lag_p99_ms")
        behind = lag is not None and lag > bound_ms
        probes.append({"rate": win.rate, "level": level, "window": win.record(),
                       "testable": True, "arrivals_seed": arrivals, "attempt": attempt,
                       **_probe_brief(summary, judged, win.n),
                       "discarded": f"client behind: p99 send lag {lag:.0f} ms > "
                                    f"{bound_ms:.0f} ms" if behind else None})
        probes[-1]["passed"] = bool(judged["passed"]) and not behind
        for r in recs:
            r["probe"] = len(probes) - 1
            if behind:
                r["discarded"] = True
        records.extend(recs)
        if not behind:
            return bool(judged["passed"])
    return False


def _stream_probe(srv: Server, cfg: Mapping[str, Any], seed: int, n: int, kept: Kept) -> bool:
    """One concurrency probe of ``n`` streams: the first wave (every stream's first request,
    arriving at once) is the warm-up; then enough requests for the attainment test
    (``steady.fewest``, at least ``waves - 1`` more waves), judged by its rule (a closed loop's
    backlog cannot grow past its streams: no flatness test)."""
    probes, records, metrics_seen = kept
    win = steady.stream_window(n, cfg["capacity"])
    lv = {"level": f"capacity@c{n}", "kind": "closed", "concurrency": n}
    recs, summary, judged = _run_probe(srv, cfg, seed, lv, win, metrics_seen, closed=True)
    probes.append({"concurrency": n, "level": lv["level"], "window": win.record(),
                   **_probe_brief(summary, judged, win.n)})
    for r in recs:
        r["probe"] = len(probes) - 1
    records.extend(recs)
    return bool(judged["passed"])


def _run_probe(srv: Server, cfg: Mapping[str, Any], seed: int, lv: dict[str, Any],
               win: steady.Window, metrics_seen: dict[str, Any], closed: bool = False
               ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Send the probe, ending it once its measured requests' misses exceed what the test
    allows; its records (each marked warm-up or measured), the measured window's summary and
    the verdict (``steady.judge``)."""
    allowed = win.n - win.least
    missed: dict[int, bool] = {}  # each finished measured request judged once

    def decided(reqs: Sequence[load_client.Request]) -> bool:
        for r in reqs:
            if r.index >= win.n_warm and r.index not in missed \
                    and r.status not in ("pending", "not sent"):
                missed[r.index] = not load_client.meets(
                    {"status": r.status, **load_client.metrics(r)}, cfg["limits"])
        return sum(missed.values()) > allowed

    reqs, duration, mseen = run_level(srv, lv, {**cfg, "requests": win.n_warm + win.n}, seed,
                                      decided)
    recs = [r.record() for r in reqs]
    for r in recs:
        r["window"] = "warmup" if r["index"] < win.n_warm else "measured"
    good = [load_client.meets(r, cfg["limits"]) for r in recs]
    judged = steady.judge(recs, good, win, cfg["capacity"], slots_for(cfg), closed=closed)
    # the measured window's throughput: its requests over the span from the first one sent to
    # the last one finished
    meas = [r for r in recs if r["window"] == "measured"]
    sent = [r["sent_s"] for r in meas if r.get("sent_s") is not None]
    ends = [r["end_s"] for r in meas if r.get("end_s") is not None]
    span = max(ends) - min(sent) if sent and ends else duration
    summary = load_client.summarize(meas, span, cfg["limits"])
    metrics_seen[lv["level"]] = mseen
    if not alive(srv.pid):
        raise LadderError(f"llama-server died during the capacity probe {lv['level']}")
    return recs, {**summary, "duration_s": duration}, judged


def _probe_brief(summary: Mapping[str, Any], judged: Mapping[str, Any], n: int
                 ) -> dict[str, Any]:
    """A probe's row: its verdict, the measured window's counts and latencies."""
    return {"requests": n, "sent": judged["measured_sent"], "good": judged["good"],
            "attainment": judged["attainment"], "passed": bool(judged["passed"]),
            "judged": dict(judged), "duration_s": summary["duration_s"],
            **{k: summary.get(k) for k in PROBE_KEYS}}


def capacity_hints(found: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where a rung's next capacity searches start (``capacity.warm_start``): the median of its
    earlier rounds' capacities (a round outside the search counts as the end it reached)."""
    out: dict[str, Any] = {}
    for dim, key in (("rate", "capacity"), ("concurrency", "concurrency")):
        # the value that passed, or (below the search) the lowest one tried
        vals = [lo if lo is not None else hi for f in found if f.get(key)
                for lo, hi in [f[key]["bracket"]]]
        if vals:
            mid = float(statistics.median(vals))
            out[dim] = int(round(mid)) if dim == "concurrency" else mid
    return out


def _rps(row: Mapping[str, Any]) -> str:
    """A capacity row in brief: "6.73/s (< 8)", "< 0.125/s", and its streams when searched."""
    out = []
    for key, unit in (("capacity", "/s"), ("concurrency", " streams")):
        found = row.get(key)
        if not found:
            continue
        lo, hi = found["bracket"]
        out.append("untestable within probe_max_s" if steady.untestable(found["probes"]) else
                   f"< {hi:.3g}{unit}" if found["bound"] == "below" else
                   f">= {lo:.3g}{unit}" if found["bound"] == "above" else
                   f"{lo:.3g}{unit} (< {hi:.3g})")
    return ", ".join(out)


def _ms(v: float | str | None) -> str:
    if v is None:
        return "-"
    return v if isinstance(v, str) else f"{v:.0f} ms"
