"""A small load generator for llama-server: streamed requests, closed-loop and open-loop load,
and the per-request metrics of vLLM's serving benchmark.

Why not the field's generators (docs/serving-under-load.md): guidellm needs torch,
transformers and datasets; aiperf pins pandas 2 and huggingface_hub < 2 (ladder uses 3 and 2);
llama-benchy tokenizes with transformers (a model-hub download). This client sends token-ID
prompts (no tokenizer), to 127.0.0.1 only, with aiohttp.

Per request (client clock, ``time.perf_counter``):

* TTFT: from sending the request to the first streamed token;
* ITL: every gap between consecutive streamed tokens;
* TPOT: (end to end - TTFT) / (output tokens - 1), for requests with more than one token;
* E2EL: from sending to the last chunk.

A level's throughput is over its duration (first send to last completion). A failed or timed-out
request stays in every denominator: it counts as infinitely slow in the TTFT, TPOT and E2EL
percentiles (a p99 with over 1 % failures reads "failed": aiperf's adjusted percentiles) and
never meets a goodput limit. Beside them, ``<metric>_ok_p<q>_ms`` are vLLM's success-only
percentiles, over the completed requests.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Sequence
from urllib.parse import urlsplit

import aiohttp
import numpy as np

from ladder.core.errors import LadderError

# token IDs the prompts are drawn from: ordinary vocabulary of every model ladder ships (well
# above the special and byte tokens at the start of SentencePiece/BPE vocabularies)
TOKEN_RANGE = (1000, 20000)
PERCENTILES = (50, 90, 99)


@dataclass
class Request:
    """One streamed request and what came back. Times are seconds from the level's origin."""

    index: int
    level: str
    prompt_tokens: int
    n_predict: int
    scheduled_s: float | None = None
    sent_s: float | None = None
    token_s: list[float] = field(default_factory=list)
    end_s: float | None = None
    output_tokens: int = 0
    tokens: list[int] = field(default_factory=list)
    timings: dict[str, Any] | None = None
    stop_type: str | None = None  # the final chunk's: limit (n_predict), eos, word
    status: str = "pending"  # ok, failed, timeout, not sent
    error: str | None = None
    turn: int | None = None
    conversation: int | None = None

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("tokens")
        out.update(metrics(self))
        return out


def metrics(r: Request) -> dict[str, Any]:
    """vLLM's per-request definitions (module docstring); None where not defined."""
    sent = r.sent_s
    ok = r.status == "ok" and sent is not None and r.token_s
    ttft = (r.token_s[0] - sent) * 1000 if ok and sent is not None else None
    e2el = ((r.end_s or r.token_s[-1]) - sent) * 1000 if ok and sent is not None else None
    tpot = ((e2el - ttft) / (r.output_tokens - 1)
            if ok and r.output_tokens > 1 and e2el is not None and ttft is not None else None)
    # one gap per token *event*: tokens that arrived in one read share its time, and k of them
    # would add k - 1 gaps of 0 ms (a client's read granularity, not the server's speed)
    events = sorted(set(r.token_s))
    itl = [(b - a) * 1000 for a, b in zip(events, events[1:])]
    return {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el, "itl_ms": itl,
            "token_events": len(events),
            "tokens_per_event_max": max((r.token_s.count(t) for t in events), default=0),
            "check": server_check(r, ttft)}


# llama-server streams no token that leaves its text an incomplete UTF-8 character; when
# n_predict ends the generation there, those tokens (a byte-fallback token carries one byte:
# at most 3 of a 4-byte character) are generated and never streamed (server-context.cpp,
# "check if there is incomplete UTF-8 character at the end"). Seen in CI: 2 of 364 requests.
MAX_HELD_TOKENS = 3


def server_check(r: Request, ttft_ms: float | None) -> dict[str, Any] | None:
    """The client's figures against the server's own ``timings``: the token count must agree
    (or fall short only by the tokens of an incomplete UTF-8 character the server held back
    when n_predict stopped it: ``held_back``), and the client's TTFT must cover the server's
    prefill (it adds the queue and the wire)."""
    t = r.timings
    if not t or r.status != "ok":
        return None
    prompt_ms = float(t.get("prompt_ms") or 0.0)
    short = int(t.get("predicted_n") or 0) - r.output_tokens
    held = short if r.stop_type == "limit" and 0 < short <= MAX_HELD_TOKENS else 0
    return {"predicted_n": t.get("predicted_n"), "prompt_n": t.get("prompt_n"),
            "cache_n": t.get("cache_n"), "prompt_ms": prompt_ms,
            "predicted_ms": t.get("predicted_ms"), "stop_type": r.stop_type,
            "tokens_agree": t.get("predicted_n") == r.output_tokens, "held_back": held,
            # 1 ms of slack: the server rounds its timings to microseconds
            # None: no token was streamed (every one held back), so there is no first-token time
            "ttft_covers_prefill": None if ttft_ms is None else ttft_ms + 1.0 >= prompt_ms}


def prompt_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(*TOKEN_RANGE) for _ in range(n)]


def check_local(url: str) -> None:
    host = urlsplit(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise LadderError(f"load generator: {url} is not on 127.0.0.1; ladder loads only a "
                          "server it started on this host")


async def stream(session: aiohttp.ClientSession, url: str, req: Request, body: dict[str, Any],
                 origin: float, timeout_s: float) -> Request:
    """POST ``body`` to llama-server's /completion with streaming on; fill ``req`` in place."""
    body = {**body, "stream": True, "return_tokens": True}
    req.sent_s = time.perf_counter() - origin
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url + "/completion", json=body) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    raise LadderError(f"HTTP {resp.status}: {text}")
                # lines split here, not by aiohttp's readline: the final chunk carries the
                # whole prompt's text, past aiohttp's 64 KiB line limit for long prompts
                buf = b""
                async for data in resp.content.iter_any():
                    now = time.perf_counter() - origin
                    buf += data
                    *lines, buf = buf.split(b"\n")
                    if any(_event(req, ln, now) for ln in lines):
                        break
        if req.end_s is None:
            raise LadderError("the stream ended without a final chunk")
        req.status = "ok"
    except TimeoutError:
        req.status, req.error = "timeout", f"no complete reply within {timeout_s:g} s"
    except (aiohttp.ClientError, LadderError, ValueError, ConnectionError) as exc:
        req.status, req.error = "failed", f"{type(exc).__name__}: {exc}"[:300]
    if req.status != "ok" and req.end_s is None:
        req.end_s = time.perf_counter() - origin
    return req


def _event(req: Request, raw: bytes, now: float) -> bool:
    """One server-sent-event line into ``req``; True at the final chunk."""
    line = raw.decode(errors="replace").strip()
    if line.startswith("error:"):  # llama-server's stream error event: its reason, named
        raise LadderError(f"server error event: {line[6:].strip()[:300]}")
    if not line.startswith("data:"):
        return False
    chunk = json.loads(line[5:])
    if "error" in chunk:
        raise LadderError(f"server error: {chunk['error']}")
    toks = chunk.get("tokens") or []
    if toks:
        req.token_s.extend([now] * len(toks))
        req.tokens.extend(int(t) for t in toks)
        req.output_tokens += len(toks)
    if chunk.get("stop"):
        req.timings = chunk.get("timings")
        req.stop_type = chunk.get("stop_type")
        req.end_s = now
        return True
    return False


Body = Callable[[int], dict[str, Any]]


def _session() -> aiohttp.ClientSession:
    """A connection per request (no keep-alive, as vLLM's client): llama-server closes a
    streamed response's connection, and a pooled one would fail the next request's write."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))


async def closed_loop(url: str, level: str, body: Body, *, concurrency: int, requests: int,
                      timeout_s: float, max_s: float,
                      decided: Callable[[Sequence[Request]], bool] | None = None
                      ) -> tuple[list[Request], float]:
    """``concurrency`` clients, each sending its next request when its last one finished.
    ``decided``: as ``open_loop``'s (once it holds, the requests not yet sent are not)."""
    check_local(url)
    reqs = [Request(i, level, len(body(i)["prompt"]), body(i)["n_predict"])
            for i in range(requests)]
    queue = list(range(requests))
    origin = time.perf_counter()
    over = False
    async with _session() as session:
        async def client() -> None:
            nonlocal over
            while queue:
                i = queue.pop(0)
                if over:
                    reqs[i].status, reqs[i].error = "not sent", "the probe's outcome was decided"
                    continue
                if time.perf_counter() - origin > max_s:
                    reqs[i].status, reqs[i].error = "not sent", f"level over its {max_s:g} s"
                    continue
                await stream(session, url, reqs[i], body(i), origin, timeout_s)
                if decided is not None and decided(reqs):
                    over = True

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return reqs, time.perf_counter() - origin


def arrival_schedule(rate: float, requests: int, seed: int,
                     burstiness: float | None = 1.0) -> list[float]:
    """Arrival times (s) of ``requests`` at ``rate`` requests/s, the first at 0: gamma gaps of
    shape ``burstiness`` (1: a Poisson process; below 1 burstier, above 1 more regular, as
    vLLM's ``--burstiness``), or evenly spaced (``None``: a constant rate). The gaps are scaled
    so the last arrival is at (requests - 1) / rate: the rate offered over the sends is the
    rate stated (vLLM normalises its delays the same way; without it, 4 gaps' span varied by
    about 50 % from round to round)."""
    if requests <= 1:
        return [0.0] * requests
    span = (requests - 1) / rate
    times = np.arange(requests, dtype=float)  # evenly spaced: a constant rate
    if burstiness is not None:
        gaps = np.random.default_rng(seed).gamma(shape=burstiness,
                                                 scale=1.0 / (rate * burstiness),
                                                 size=requests - 1)
        if gaps.sum() > 0:
            times = np.concatenate([[0.0], np.cumsum(gaps)])
    return [float(t) for t in times * (span / times[-1])]


async def open_loop(url: str, level: str, body: Body, *, rate: float, requests: int, seed: int,
                    timeout_s: float, max_s: float, burstiness: float | None = 1.0,
                    decided: Callable[[Sequence[Request]], bool] | None = None
                    ) -> tuple[list[Request], float]:
    """Requests sent at their arrival times (``arrival_schedule``) whatever the server's state
    (it queues them). ``decided``: once it holds for the requests so far (a capacity probe
    that can no longer pass), the rest are not sent (status "not sent", reason named); those
    in flight finish."""
    check_local(url)
    when = arrival_schedule(rate, requests, seed, burstiness)
    reqs = [Request(i, level, len(body(i)["prompt"]), body(i)["n_predict"], scheduled_s=when[i])
            for i in range(requests)]
    origin = time.perf_counter()
    over = asyncio.Event()  # set once ``decided`` holds: the senders still waiting wake up
    async with _session() as session:
        async def one(i: int) -> None:
            delay = when[i] - (time.perf_counter() - origin)
            if delay > 0:
                try:
                    await asyncio.wait_for(over.wait(), delay)
                except TimeoutError:
                    pass
            left = max_s - (time.perf_counter() - origin)
            if left <= 0:
                reqs[i].status, reqs[i].error = "not sent", f"level over its {max_s:g} s"
                return
            if over.is_set():
                reqs[i].status, reqs[i].error = "not sent", "the probe's outcome was decided"
                return
            # a request sent is given its whole timeout: the level's time bounds the sends only
            # (a request cut short by the level's end would be a "timeout" it never had)
            await stream(session, url, reqs[i], body(i), origin, timeout_s)
            if decided is not None and decided(reqs):
                over.set()

        await asyncio.gather(*(one(i) for i in range(requests)))
    return reqs, time.perf_counter() - origin


async def conversation(url: str, level: str, *, conv: int, turns: int, turn_tokens: int,
                       n_gen: int, cache: bool, slot: int | None, seed: int,
                       timeout_s: float) -> list[Request]:
    """An agent's multi-turn conversation: each turn sends the whole history (earlier turns'
    prompts and the model's own replies, as token IDs) plus ``turn_tokens`` new ones, so the
    turns share a growing prefix the server may reuse (``cache_prompt``)."""
    check_local(url)
    rng = random.Random(seed)
    history: list[int] = []
    out = []
    origin = time.perf_counter()
    async with _session() as session:
        for turn in range(turns):
            prompt = history + prompt_ids(rng, turn_tokens)
            req = Request(turn, level, len(prompt), n_gen, turn=turn, conversation=conv)
            body: dict[str, Any] = {"prompt": prompt, "n_predict": n_gen, "ignore_eos": True,
                                    "temperature": 0, "cache_prompt": cache}
            if slot is not None:
                body["id_slot"] = slot
            await stream(session, url, req, body, origin, timeout_s)
            out.append(req)
            if req.status != "ok":
                break  # a conversation cannot go on without the reply
            history = prompt + req.tokens
    return out


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


# --- a level's summary -------------------------------------------------------------------------
FAILED = "failed"  # a percentile that the failed requests reach (JSON has no infinity)


def _pct(values: Sequence[float], q: float) -> float | str | None:
    """Percentile (numpy's linear, as vLLM); "failed" when the failed requests (infinitely
    slow) reach it; None when there are no values."""
    if not values:
        return None
    arr = np.sort(np.asarray(values, dtype=float))
    # the rank the linear percentile reads: if it or its upper neighbour is a failure, the
    # percentile is one
    pos = (len(arr) - 1) * q / 100
    if not math.isfinite(arr[min(int(math.ceil(pos)), len(arr) - 1)]):
        return FAILED
    return float(np.percentile(arr, q))


def summarize(records: Sequence[Mapping[str, Any]], duration_s: float,
              limits: Mapping[str, float | None]) -> dict[str, Any]:
    """One level's metrics from its request records (``Request.record()``)."""
    n = len(records)
    ok = [r for r in records if r["status"] == "ok"]
    out: dict[str, Any] = {"requests": n, "completed": len(ok),
                           "failed": sum(r["status"] == "failed" for r in records),
                           "timeout": sum(r["status"] == "timeout" for r in records),
                           "not_sent": sum(r["status"] == "not sent" for r in records),
                           "duration_s": duration_s}
    for key in ("ttft_ms", "tpot_ms", "e2el_ms"):
        # failed requests are infinitely slow; an ok request without the metric (one token:
        # no TPOT) is left out of that metric only
        vals = [math.inf if r["status"] != "ok" else r[key] for r in records
                if r["status"] != "ok" or r[key] is not None]
        fin = [v for v in vals if math.isfinite(v)]
        for q in PERCENTILES:
            out[f"{key[:-3]}_p{q}_ms"] = _pct(vals, q)
            # vLLM's: over the completed requests only (what a level's survivors saw)
            out[f"{key[:-3]}_ok_p{q}_ms"] = float(np.percentile(fin, q)) if fin else None
        out[f"{key[:-3]}_mean_ms"] = float(np.mean(fin)) if fin else None
    itl = [g for r in records for g in r["itl_ms"]]
    for q in PERCENTILES:
        out[f"itl_p{q}_ms"] = _pct(itl, q)
    out_tokens = sum(r["output_tokens"] for r in ok)
    in_tokens = sum(r.get("prompt_tokens") or 0 for r in ok)
    out["output_tokens"] = out_tokens
    out["input_tokens"] = in_tokens
    out["output_tokens_per_s"] = out_tokens / duration_s if duration_s > 0 else None
    # input and total throughput, as vLLM's and guidellm's users read them (completed requests)
    out["input_tokens_per_s"] = in_tokens / duration_s if duration_s > 0 else None
    out["total_tokens_per_s"] = (in_tokens + out_tokens) / duration_s if duration_s > 0 else None
    sent_lengths = [(r["prompt_tokens"], r["n_predict"]) for r in records
                    if r.get("prompt_tokens") is not None and r.get("n_predict") is not None]
    out["prompt_tokens_mean"] = (sum(a for a, _ in sent_lengths) / len(sent_lengths)
                                 if sent_lengths else None)
    out["output_tokens_mean"] = (sum(b for _, b in sent_lengths) / len(sent_lengths)
                                 if sent_lengths else None)
    out["requests_per_s"] = len(ok) / duration_s if duration_s > 0 else None
    good = [r for r in ok if meets(r, limits)]
    out["good"] = len(good)
    out["goodput_rps"] = len(good) / duration_s if duration_s > 0 else None
    out["good_share"] = len(good) / n if n else None
    # the client's lag behind the schedule (open loop): a level whose sends fell behind did not
    # offer the rate it names (on 2 cores the client shares the CPUs with the server)
    lag = [(r["sent_s"] - r["scheduled_s"]) * 1000 for r in records
           if r.get("scheduled_s") is not None and r.get("sent_s") is not None]
    sent = sorted(r["sent_s"] for r in records if r.get("sent_s") is not None)
    out["send_lag_p50_ms"] = float(np.percentile(lag, 50)) if lag else None
    out["send_lag_p99_ms"] = float(np.percentile(lag, 99)) if lag else None
    out["achieved_rate_rps"] = ((len(sent) - 1) / (sent[-1] - sent[0])
                                if len(sent) > 1 and sent[-1] > sent[0] else None)
    checks = [r["check"] for r in ok if r.get("check")]
    out["server_check"] = {
        "requests": len(checks),
        "tokens_disagree": sum(not c["tokens_agree"] and not c.get("held_back")
                               for c in checks),
        "tokens_held_back": sum(bool(c.get("held_back")) for c in checks),
        "ttft_below_prefill": sum(c["ttft_covers_prefill"] is False for c in checks)}
    return out


def meets(r: Mapping[str, Any], limits: Mapping[str, float | None]) -> bool:
    """A request is good when it completed and met every configured limit (vLLM's goodput)."""
    if r["status"] != "ok":
        return False
    for key in ("ttft_ms", "tpot_ms", "e2el_ms"):
        lim = limits.get(key)
        if lim is not None and r.get(key) is not None and r[key] > lim:
            return False
    return True


def parse_metrics(text: str) -> dict[str, float]:
    """llama-server's Prometheus /metrics: ``llamacpp:*`` samples by name."""
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, _, value = line.partition(" ")
            try:
                out[name.split(":", 1)[1]] = float(value)
            except ValueError:
                continue
    return out


async def sample_metrics(url: str, every_s: float, stop: asyncio.Event,
                         into: list[dict[str, float]]) -> None:
    """Poll /metrics while a level runs (requests deferred and processing over time)."""
    check_local(url)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            try:
                async with asyncio.timeout(2):
                    async with session.get(url + "/metrics") as resp:
                        if resp.status == 200:
                            into.append({"t_s": time.perf_counter() - t0,
                                         **parse_metrics(await resp.text())})
            except (TimeoutError, aiohttp.ClientError, ConnectionError):
                pass
            try:
                await asyncio.wait_for(stop.wait(), every_s)
            except TimeoutError:
                pass


async def with_metrics(url: str, every_s: float,
                       work: Awaitable[Any]) -> tuple[Any, list[dict[str, float]]]:
    """Run ``work`` while polling the server's /metrics."""
    seen: list[dict[str, float]] = []
    stop = asyncio.Event()
    poll = asyncio.ensure_future(sample_metrics(url, every_s, stop, seen))
    try:
        result = await work
    finally:
        stop.set()
        await poll
    return result, seen


def metrics_brief(seen: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """What the report keeps of a level's /metrics samples: peaks, and the last totals."""
    if not seen:
        return {"samples": 0}
    last = seen[-1]
    return {"samples": len(seen),
            "requests_deferred_max": max(s.get("requests_deferred", 0) for s in seen),
            "requests_processing_max": max(s.get("requests_processing", 0) for s in seen),
            "n_busy_slots_per_decode_max": max(s.get("n_busy_slots_per_decode", 0)
                                               for s in seen),
            # this llama.cpp's /metrics has no KV-cache usage gauge (kv_cache_usage_ratio left
            # upstream); n_tokens_max as the server reports it
            "n_tokens_max": last.get("n_tokens_max"),
            "prompt_tokens_cached_total": last.get("prompt_tokens_cached_total"),
            "prompt_tokens_total": last.get("prompt_tokens_total"),
            "tokens_predicted_total": last.get("tokens_predicted_total")}
