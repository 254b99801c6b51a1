"""Serving under load: the client's metric definitions on synthetic requests (exact), the client
against a stand-in server that streams at known times (each metric within the machine's timer
slack), its faults (HTTP error, a stream cut mid-way, a stall past the timeout), and the report's
view of a load experiment on synthetic levels (failures in the denominators, verdicts, words)."""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from ladder import loadgen, loadview, serveload
from ladder.errors import LadderError


# --- definitions, exactly -----------------------------------------------------------------------
def req(status="ok", sent=1.0, tokens=(1.5, 1.6, 1.8, 2.1), end=2.1, **kw):
    r = loadgen.Request(0, "c1", 32, len(tokens), sent_s=sent, token_s=list(tokens), end_s=end,
                        output_tokens=len(tokens), status=status, **kw)
    return r


def test_metrics_follow_vllms_definitions():
    m = loadgen.metrics(req())
    assert m["ttft_ms"] == pytest.approx(500)  # sent -> first token
    assert m["e2el_ms"] == pytest.approx(1100)  # sent -> last chunk
    assert m["tpot_ms"] == pytest.approx((1100 - 500) / 3)  # after the first, per token
    assert m["itl_ms"] == pytest.approx([100, 200, 300])  # every gap
    one = loadgen.metrics(req(tokens=(1.2,), end=1.2))
    assert one["tpot_ms"] is None and one["itl_ms"] == []  # one token: no TPOT
    assert loadgen.metrics(req(status="failed"))["ttft_ms"] is None


def test_tokens_read_together_are_one_inter_token_gap():
    """Issue 43, item 4: three tokens in one read are one event, not two gaps of 0 ms."""
    m = loadgen.metrics(req(tokens=(1.5, 1.6, 1.6, 1.6, 1.9), end=1.9))
    assert m["itl_ms"] == pytest.approx([100, 300])
    assert m["token_events"] == 3 and m["tokens_per_event_max"] == 3
    assert m["tpot_ms"] == pytest.approx((900 - 500) / 4)  # TPOT still per token


def test_a_stream_error_event_is_named():
    r = loadgen.Request(0, "c1", 8, 4)
    with pytest.raises(LadderError, match="server error event: .*context size exceeded"):
        loadgen._event(r, b'error: {"code": 400, "message": "context size exceeded"}', 1.0)
    assert loadgen._event(r, b": keep-alive", 1.0) is False


def test_the_server_check_compares_tokens_and_prefill():
    r = req(timings={"predicted_n": 4, "prompt_n": 32, "prompt_ms": 450.0, "cache_n": 0})
    assert loadgen.metrics(r)["check"]["tokens_agree"] is True
    assert loadgen.metrics(r)["check"]["ttft_covers_prefill"] is True  # 500 ms >= 450 ms
    r.timings = {"predicted_n": 3, "prompt_ms": 700.0}
    chk = loadgen.metrics(r)["check"]
    assert chk["tokens_agree"] is False and chk["ttft_covers_prefill"] is False


def records(n_ok: int, n_failed: int, ttft_s: float = 0.5) -> list[dict]:
    out = [req(sent=0.0, tokens=(ttft_s, ttft_s + 0.1), end=ttft_s + 0.1).record()
           for _ in range(n_ok)]
    out += [req(status="failed", error="x").record() for _ in range(n_failed)]
    return out


def test_failed_requests_stay_in_every_denominator():
    s = loadgen.summarize(records(3, 1), 10.0, {"ttft_ms": 1000})
    assert (s["requests"], s["completed"], s["failed"]) == (4, 3, 1)
    assert s["ttft_p50_ms"] == pytest.approx(500)
    assert s["ttft_p99_ms"] == "failed"  # the failure is infinitely slow, and p99 reaches it
    assert s["requests_per_s"] == pytest.approx(0.3)  # completed / duration
    assert s["good"] == 3 and s["good_share"] == pytest.approx(0.75)  # of all sent
    assert json.loads(json.dumps(s)) == s  # no infinity in the JSON


def test_success_only_percentiles_sit_beside_the_adjusted_ones():
    """Issue 43, item 2: vLLM's percentiles over the completed requests beside aiperf's, which
    count the failures as infinitely slow."""
    s = loadgen.summarize(records(3, 1, ttft_s=0.5), 10.0, {})
    assert s["ttft_p99_ms"] == "failed" and s["ttft_ok_p99_ms"] == pytest.approx(500)
    assert s["e2el_ok_p50_ms"] == pytest.approx(600)
    none_ok = loadgen.summarize(records(0, 2), 10.0, {})
    assert none_ok["ttft_ok_p50_ms"] is None and none_ok["ttft_p50_ms"] == "failed"
    # without failures the two agree
    clean = loadgen.summarize(records(5, 0), 10.0, {})
    assert all(clean[f"ttft_ok_p{q}_ms"] == clean[f"ttft_p{q}_ms"] for q in (50, 90, 99))


def test_the_load_section_lists_success_only_percentiles_where_rows_failed():
    from ladder.render import _fmt_ms

    sec = loadview.summarize_load(synthetic_doc(fail_round=2), PLAN, STATS)
    (row,) = sec["success_only"]  # the floor's row; the others completed every request
    assert (row["rung"], row["completed"], row["requests"]) == ("floor", 12, 16)
    assert _fmt_ms(row["ttft_ok_p99_ms"]) != "failed" and row["ttft_ok_p99_ms"] > 900
    assert loadview.summarize_load(synthetic_doc(), PLAN, STATS)["success_only"] == []


def test_a_percentile_is_failed_only_when_the_failures_reach_it():
    assert loadgen.summarize(records(99, 1), 1.0, {})["ttft_p99_ms"] == "failed"
    assert isinstance(loadgen.summarize(records(199, 1), 1.0, {})["ttft_p99_ms"], float)
    assert isinstance(loadgen.summarize(records(199, 1), 1.0, {})["ttft_p50_ms"], float)


def test_goodput_counts_requests_within_every_limit():
    recs = records(2, 0, ttft_s=0.5) + records(2, 0, ttft_s=1.5)
    s = loadgen.summarize(recs, 2.0, {"ttft_ms": 1000, "tpot_ms": None})
    assert s["good"] == 2 and s["goodput_rps"] == pytest.approx(1.0)
    assert loadgen.summarize(recs, 2.0, {"ttft_ms": None})["good"] == 4


def test_arrivals_are_reproducible_and_offer_the_stated_rate():
    """Issue 43, item 3: the gaps are scaled so every schedule spans (n - 1) / rate: the rate
    offered in a round is the rate printed (unscaled, 4 Poisson gaps varied by ~50 %)."""
    a = loadgen.arrival_schedule(4.0, 5, seed=3)
    assert a == loadgen.arrival_schedule(4.0, 5, seed=3) and a[0] == 0.0
    spans = [loadgen.arrival_schedule(4.0, 5, seed=s)[-1] for s in range(50)]
    assert all(x == pytest.approx(1.0) for x in spans)  # 4 gaps at 4/s, every seed
    gaps = np.diff(loadgen.arrival_schedule(4.0, 4000, seed=3))
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.06)  # exponential: CV 1
    bursty = np.diff(loadgen.arrival_schedule(4.0, 4000, seed=3, burstiness=0.25))
    assert np.std(bursty) / np.mean(bursty) == pytest.approx(2.0, abs=0.2)  # CV 1/sqrt(k)
    assert np.diff(loadgen.arrival_schedule(2.0, 5, seed=1, burstiness=None)) == \
        pytest.approx([0.5] * 4)  # a constant rate
    assert loadgen.arrival_schedule(2.0, 1, seed=1) == [0.0]


def test_the_clients_lag_and_the_achieved_rate_are_summarized():
    recs = [{**rec, "scheduled_s": i * 0.5, "sent_s": i * 0.5 + lag}
            for i, (rec, lag) in enumerate(zip(records(4, 0), (0.001, 0.002, 0.003, 0.2)))]
    s = loadgen.summarize(recs, 4.0, {})
    assert s["send_lag_p50_ms"] == pytest.approx(2.5)
    assert s["send_lag_p99_ms"] == pytest.approx(194.09, rel=1e-3)
    assert s["achieved_rate_rps"] == pytest.approx(3 / (1.5 + 0.2 - 0.001))
    assert loadgen.summarize(records(3, 0), 1.0, {})["send_lag_p50_ms"] is None  # closed loop


def test_only_a_local_server_is_loaded():
    with pytest.raises(LadderError, match="not on 127.0.0.1"):
        loadgen.check_local("http://example.com:8080")
    loadgen.check_local("http://127.0.0.1:8080")


def test_server_metrics_are_parsed_and_kept_as_peaks():
    text = ("# HELP x\nllamacpp:requests_deferred 2\nllamacpp:requests_processing 1\n"
            "llamacpp:prompt_tokens_total 96\nother 5\n")
    m = loadgen.parse_metrics(text)
    assert m == {"requests_deferred": 2.0, "requests_processing": 1.0,
                 "prompt_tokens_total": 96.0}
    brief = loadgen.metrics_brief([{**m, "requests_deferred": 0}, m])
    assert brief["requests_deferred_max"] == 2 and brief["prompt_tokens_total"] == 96


# --- a stand-in server that streams at known times ---------------------------------------------
FIRST_S, GAP_S, TOKENS = 0.20, 0.10, 4
STATE = web.AppKey("state", dict)  # the stand-in's mode and its one slot's cached prompt


def stand_in_app() -> web.Application:
    async def completion(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state = request.app[STATE]
        mode = state["mode"]
        if mode == "http500":
            return web.Response(status=500, text="boom")
        resp = web.StreamResponse()
        await resp.prepare(request)
        await asyncio.sleep(FIRST_S if mode != "stall" else 30)
        n = int(body["n_predict"])
        for i in range(n):
            if i:
                await asyncio.sleep(GAP_S)
            if mode == "cut" and i == 2:
                request.transport.close()  # the server dies mid-stream
                return resp
            await resp.write(f"data: {json.dumps({'tokens': [7], 'stop': False})}\n\n".encode())
        prompt = body["prompt"]
        cached = state["cached"] if body.get("cache_prompt") else 0
        state["cached"] = len(prompt)
        final = {"tokens": [], "stop": True, "prompt": "x" * (100_000 if mode == "long" else 10),
                 "timings": {"predicted_n": n, "prompt_n": len(prompt) - cached,
                             "cache_n": cached, "prompt_ms": FIRST_S * 1000 * 0.9,
                             "predicted_ms": GAP_S * 1000 * (n - 1)}}
        await resp.write(f"data: {json.dumps(final)}\n\n".encode())
        return resp

    app = web.Application()
    app.router.add_post("/completion", completion)
    app[STATE] = {"mode": "ok", "cached": 0}
    return app


@pytest.fixture
def stand_in():
    app = stand_in_app()
    loop = asyncio.new_event_loop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = web.AppRunner(app, shutdown_timeout=1.0)  # a stalled handler is not waited for

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        loop.run_forever()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield app, f"http://127.0.0.1:{port}"

    async def shutdown() -> None:
        await runner.cleanup()
        pending = asyncio.all_tasks() - {asyncio.current_task()}
        for task in pending:  # a stalled handler
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    t.join(10)


def body(i: int) -> dict:
    return {"prompt": [1000 + i] * 8, "n_predict": TOKENS, "ignore_eos": True}


# timer slack on a shared 2-core VM: the stand-in's sleeps can only run late, not early
SLACK_MS = 60


def test_the_client_times_a_known_stream(stand_in):
    _, url = stand_in
    reqs, duration = loadgen.run(loadgen.closed_loop(url, "c1", body, concurrency=1, requests=2,
                                                     timeout_s=10, max_s=30))
    for r in reqs:
        m = r.record()
        assert r.status == "ok" and r.output_tokens == TOKENS and r.prompt_tokens == 8
        assert FIRST_S * 1000 <= m["ttft_ms"] < FIRST_S * 1000 + SLACK_MS
        assert all(GAP_S * 1000 - 5 <= g < GAP_S * 1000 + SLACK_MS for g in m["itl_ms"])
        assert GAP_S * 1000 - 5 <= m["tpot_ms"] < GAP_S * 1000 + SLACK_MS
        assert m["check"]["tokens_agree"] and m["check"]["ttft_covers_prefill"]
    # closed loop, one client: the second request is sent after the first one ended
    assert reqs[1].sent_s >= reqs[0].end_s
    assert duration >= 2 * (FIRST_S + (TOKENS - 1) * GAP_S)


def test_a_final_chunk_past_64_kib_is_read(stand_in):
    app, url = stand_in
    app[STATE]["mode"] = "long"  # llama-server's final chunk carries the prompt's text
    reqs, _ = loadgen.run(loadgen.closed_loop(url, "c1", body, concurrency=1, requests=1,
                                              timeout_s=10, max_s=30))
    assert reqs[0].status == "ok", reqs[0].error
    assert reqs[0].timings["predicted_n"] == TOKENS


def test_concurrent_clients_overlap(stand_in):
    _, url = stand_in
    reqs, duration = loadgen.run(loadgen.closed_loop(url, "c2", body, concurrency=2, requests=4,
                                                     timeout_s=10, max_s=30))
    assert all(r.status == "ok" for r in reqs)
    one = FIRST_S + (TOKENS - 1) * GAP_S
    assert duration < 4 * one  # two at a time: about 2 x one request, not 4 x


def test_open_loop_sends_at_the_scheduled_times(stand_in):
    _, url = stand_in
    reqs, _ = loadgen.run(loadgen.open_loop(url, "r5", body, rate=5.0, requests=5, seed=1,
                                            timeout_s=10, max_s=30))
    for r in reqs:
        assert r.status == "ok"
        assert r.scheduled_s <= r.sent_s < r.scheduled_s + SLACK_MS / 1000


@pytest.mark.parametrize("mode, status, error", [
    ("http500", "failed", "HTTP 500"),
    ("cut", "failed", ""),
    ("stall", "timeout", "no complete reply within 1 s"),
])
def test_faults_are_counted_with_their_reason(stand_in, mode, status, error):
    app, url = stand_in
    app[STATE]["mode"] = mode
    reqs, _ = loadgen.run(loadgen.closed_loop(url, "c1", body, concurrency=1, requests=2,
                                              timeout_s=1, max_s=30))
    assert [r.status for r in reqs] == [status, status]
    assert all(error in (r.error or "") and r.error for r in reqs)
    s = loadgen.summarize([r.record() for r in reqs], 1.0, {})
    assert s["requests"] == 2 and s["completed"] == 0 and s["ttft_p50_ms"] == "failed"


def test_an_agent_resends_its_history_and_the_server_reuses_it(stand_in):
    _, url = stand_in
    turns = loadgen.run(loadgen.conversation(url, "agent-cache", conv=0, turns=3, turn_tokens=8,
                                             n_gen=2, cache=True, slot=0, seed=1, timeout_s=10))
    # each turn: the whole history (earlier prompts and the model's replies) + 8 new tokens
    assert [t.prompt_tokens for t in turns] == [8, 18, 28]
    assert [t.timings["cache_n"] for t in turns] == [0, 8, 18]
    assert all(t.conversation == 0 for t in turns) and [t.turn for t in turns] == [0, 1, 2]


# --- the report's view, on synthetic levels ------------------------------------------------------
SPEC = {"n_prompt": 32, "n_gen": 8, "requests": 4, "limits": {"ttft_ms": 500, "tpot_ms": None},
        "agent": {"enabled": False}, "request_timeout_s": 60}
STATS = {"confidence": 0.95, "bootstrap_resamples": 200, "seed": 1,
         "threshold": {"prefill": 0.05, "decode": 0.03}}
PLAN = {"ladder_order": ["floor", "fast"], "control": "control", "twin": "fast"}


def synthetic_doc(fail_round: int | None = None, fast_ttft: float = 0.1) -> dict:
    """Three rungs x 4 rounds x one level: the floor's TTFT ~10x the others' (``fast_ttft`` s,
    the control's stays 0.1 s); in ``fail_round`` the floor's requests all fail."""
    levels, requests = [], []
    for rnd in range(4):
        for pos, (rung, ttft) in enumerate((("floor", 1.0), ("fast", fast_ttft),
                                            ("control", 0.1))):
            jitter = 1 + 0.02 * ((rnd * 7 + pos * 3) % 5 - 2)
            recs = []
            for i in range(SPEC["requests"]):
                t = ttft * jitter * (1 + 0.01 * i)
                status = "failed" if rung == "floor" and rnd == fail_round else "ok"
                r = req(status=status, sent=0.0, tokens=(t, t + 0.05 * (10 if rung == "floor"
                                                                       else 1)),
                        end=t + 0.05, error=None if status == "ok" else "x").record()
                r.update(round=rnd, order=pos, rung=rung, level="c1")
                recs.append(r)
            requests += recs
            levels.append({"level": "c1", "kind": "closed", "concurrency": 1, "round": rnd,
                           "order": pos, "rung": rung, "build_key": rung, "duration_s": 2.0,
                           "summary": loadgen.summarize(recs, 2.0, SPEC["limits"]),
                           "server_metrics": {"requests_deferred_max": 0}})
    return {"quant": "q4_0", "threads": 2, "rounds": 4, "spec": SPEC, "slots": 1,
            "levels_planned": [{"level": "c1", "kind": "closed", "concurrency": 1}],
            "levels": levels, "requests": requests,
            "rungs": {n: {"status": "measured"} for n in ("floor", "fast", "control")},
            "method": "synthetic"}


def test_the_report_judges_latency_per_level_like_a_cell():
    sec = loadview.summarize_load(synthetic_doc(), PLAN, STATS)
    rows = {r["rung"]: r for r in sec["table"]}
    assert rows["floor"]["pooled"]["requests"] == 16 and rows["floor"]["pooled"]["good"] == 0
    assert rows["fast"]["pooled"]["good"] == 16
    ttft99 = next(c for c in sec["cells"] if c["metric"] == "ttft_p99_ms")["cell"]
    step = ttft99["vs_floor"][0]
    assert step["rung"] == "fast" and step["verdict"]["call"] == "faster"
    assert 8 < step["ratio"]["estimate"] < 12
    words = loadview.sentences(sec)
    assert any(w.startswith("at 1 stream, `fast`'s p99 TTFT is") and "lower than `floor`'s" in w
               for w in words)


def test_a_round_whose_percentile_failed_counts_as_the_timeout_never_dropped():
    """Issue 43, item 2: the failed round enters the paired judgement at the request timeout
    (the least its failed requests' latency can be), not left out."""
    sec = loadview.summarize_load(synthetic_doc(fail_round=2), PLAN, STATS)
    floor = next(r for r in sec["table"] if r["rung"] == "floor")
    assert floor["pooled"]["requests"] == 16 and floor["pooled"]["failed"] == 4
    assert floor["per_round"]["ttft_p99_ms"]["failed_rounds"] == 1
    assert floor["per_round"]["ttft_p99_ms"]["n"] == 3  # the printed figure: finite rounds
    cell = next(c for c in sec["cells"] if c["metric"] == "ttft_p99_ms")["cell"]
    step = cell["vs_floor"][0]
    assert step["ratio"]["n"] == 4  # every round paired, the failed one at 60 s
    per_round = sorted(step["ratio"]["per_round"])
    assert per_round[-1] > 500 and per_round[0] < 15  # the failed round: 60 s against 0.1 s
    ok = loadview.summarize_load(synthetic_doc(), PLAN, STATS)
    ok_step = next(c for c in ok["cells"] if c["metric"] == "ttft_p99_ms")["cell"]["vs_floor"][0]
    assert step["ratio"]["estimate"] > ok_step["ratio"]["estimate"]  # the failure counts


def test_levels_slots_and_context_follow_the_config():
    cfg = {"concurrency": [1, 4], "rates": [0.5], "n_prompt": 32, "n_gen": 8,
           "agent": {"enabled": True, "conversations": 2, "turns": 3, "turn_tokens": 64,
                     "n_gen": 8}}
    assert [lv["level"] for lv in serveload.levels(cfg)] == [
        "c1", "c4", "r0.5", "agent-cache", "agent-nocache"]
    assert serveload.slots_for(cfg) == 4
    assert serveload.ctx_for(cfg) == 4 * (3 * (64 + 8) + 16)
    assert math.isclose(loadgen.arrival_schedule(0.5, 2, 1)[0], 0.0)


def test_a_rounds_percentile_prints_with_its_interval_or_its_failures():
    from ladder.render import _fmt_ms_ci

    assert _fmt_ms_ci({"estimate": 71.7, "lo": 69.9, "hi": 73.6, "failed_rounds": 0}) == \
        "71.7 (69.9-73.6)"
    assert _fmt_ms_ci({"estimate": 1273.0, "lo": None, "hi": None, "failed_rounds": 1}) == \
        "1273, 1 round(s) failed"
    assert _fmt_ms_ci({"estimate": None, "failed_rounds": 3}) == "failed"
    sec = loadview.summarize_load(synthetic_doc(fail_round=2), PLAN, STATS)
    floor = next(r for r in sec["table"] if r["rung"] == "floor")
    assert _fmt_ms_ci(floor["per_round"]["ttft_p99_ms"]).endswith(", 1 round(s) failed")


def test_an_open_level_whose_client_fell_behind_is_flagged():
    """Issue 43, item 3: the p99 send lag beyond half the mean gap means the rate named was not
    the rate offered."""
    row = {"kind": "open", "rate": 2.0, "pooled": {"send_lag_p99_ms": 260.0}}
    assert loadview.client_behind(row) is True  # the gap is 500 ms
    assert loadview.client_behind({**row, "pooled": {"send_lag_p99_ms": 20.0}}) is False
    assert loadview.client_behind({"kind": "closed", "pooled": {}}) is None


def test_the_report_prints_success_only_percentiles_beside_the_table(tmp_path):
    from ladder.render import render_all

    fixture = Path(__file__).parent / "fixtures" / "report-default" / "ladder.json"
    doc = json.loads(fixture.read_text())
    doc["serving"]["load"] = loadview.summarize_load(synthetic_doc(fail_round=2), PLAN, STATS)
    src = tmp_path / "ladder.json"
    src.write_text(json.dumps(doc))
    paths = render_all(src, tmp_path / "out", workdir=tmp_path)
    md, html = Path(paths["md"]).read_text(), Path(paths["html"]).read_text()
    assert re.search(r"Success-only percentiles \(vLLM's: over the completed requests; the table "
                     r"counts the others as infinitely slow, as aiperf does\): `c1` `floor` "
                     r"\(12 of 16 completed\) TTFT p50 / p90 / p99 [\d.]+ / [\d.]+ / [\d.]+ ms",
                     md), md[md.find("Serving under load"):][:3000]
    assert 'id="load-success-only"' in html and "(12 of 16 completed)" in html
