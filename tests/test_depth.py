"""Long context (issue 58): the timed request checked against the server's own timings (real
replies, tests/fixtures/depth/replies.json), a cell of several points looked at point by point
by the anytime-valid design (a synthetic experiment, no process), and the crossover read from
the calls along the depths."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from conftest import ladder_cell, sequential_policy
from ladder.analysis import depth_view
from ladder.core.errors import LadderError
from ladder.measuring import depth, harness
from ladder.planning import protocol, sequential

FIXTURES = Path(__file__).parent / "fixtures" / "depth"


def _replies():
    return json.loads((FIXTURES / "replies.json").read_text())


def test_a_timed_request_is_the_prompt_after_the_restored_context():
    """A server started with --swa-full reuses the restored 1024 tokens and computes only the
    32-token prompt: the samples are the server's own prompt and decode rates."""
    got = _replies()["with_swa_full"]
    pp, tg, timings = depth.timed_sample(got, 1024, 32, 16, "native_repack at depth 1024")
    t = got["timings"]
    assert pp == pytest.approx(32_000 / t["prompt_ms"]) and tg == pytest.approx(16_000 / t["predicted_ms"])
    assert timings["cache_n"] == 1024 and timings["prompt_n"] == 32


def test_a_context_the_server_did_not_reuse_is_a_named_failure_not_a_sample():
    """Without --swa-full the same server discards the restored cache of a sliding-window model
    and processes all 1056 tokens (a real reply): timing that as "32 tokens after 1024" would be
    a wrong number, so it is refused, naming what differed."""
    with pytest.raises(LadderError, match=r"cache_n 0 \(expected 1024\), prompt_n 1056 "
                                          r"\(expected 32\)"):
        depth.timed_sample(_replies()["without_swa_full"], 1024, 32, 16, "native_repack")


def test_the_points_and_the_context_size():
    cfg = {"depths": [512, 0, 256], "n_prompt": 32, "n_gen": 16, "context_seed": 0}
    assert [p["point"] for p in depth.points(cfg)] == [
        "pp32@d0", "tg16@d0", "pp32@d256", "tg16@d256", "pp32@d512", "tg16@d512"]
    assert depth.ctx_for(cfg) == 512 + 32 + 16 + 16
    toks = depth.context_tokens(cfg)
    assert len(toks) == 512 and toks == depth.context_tokens(dict(cfg))  # seeded: reusable
    assert toks != depth.context_tokens({**cfg, "context_seed": 1})


def test_a_depth_beyond_the_model_is_refused_by_name():
    cfg = {"depths": [0, 40000], "n_prompt": 32, "n_gen": 16}
    with pytest.raises(depth.BeyondModel, match=r"serving\.depth\.depths.*40000.*32768"):
        depth.check(cfg, {"n_ctx_train": 32768})
    depth.check({**cfg, "depths": [0, 1024]}, {"n_ctx_train": 32768})


def test_a_saved_context_is_named_by_what_it_depends_on(tmp_path):
    (tmp_path / "b1").mkdir()
    (tmp_path / "b1" / "llama-server").write_text("x")
    model = {"sha256": "abc", "path": str(tmp_path / "m.gguf")}
    cfg = {"depths": [0, 256], "n_prompt": 32, "n_gen": 16, "context_seed": 0}
    key = depth.context_key(str(tmp_path / "b1"), model, ["--swa-full"], cfg)
    assert key == depth.context_key(str(tmp_path / "b1"), model, ["--swa-full"], dict(cfg))
    assert key != depth.context_key(str(tmp_path / "b1"), model, [], cfg)  # another cache
    assert key != depth.context_key(str(tmp_path / "b1"), {**model, "sha256": "x"}, ["--swa-full"],
                                    cfg)
    assert key != depth.context_key(str(tmp_path / "b1"), model, ["--swa-full"],
                                    {**cfg, "context_seed": 1})
    # another prompt after the same context, or a deeper series, reuses what was saved
    assert key == depth.context_key(str(tmp_path / "b1"), model, ["--swa-full"],
                                    {**cfg, "n_prompt": 16, "n_gen": 32, "depths": [0, 8192]})


# --- a cell of several points, looked at point by point ------------------------------------------
@dataclass
class Depths(harness.Experiment):
    """Each process gives one sample per point: the rung's speed at that point times a seeded
    log-normal noise of SD ``sd`` (no process runs)."""

    name: str
    speed: dict  # (rung, point) -> tokens/s
    phases: dict  # point -> phase
    sd: float = 0.02
    ran: list = field(default_factory=list)

    def process(self, cell, policy, at):
        self.ran.append((at.name, at.rnd))
        out = []
        for point, phase in self.phases.items():
            rng = np.random.default_rng(zlib.crc32(f"{at.name}/{point}/{at.rnd}".encode()))
            out.append({"point": point, "phase": phase, "tokens_per_s":
                        self.speed[(at.name, point)] * float(np.exp(self.sd * rng.standard_normal()))})
        return harness.Outcome({"samples": out}, {"foreign_cpu_share": 0.0, "steal_share": 0.0,
                                                  "ncpu": 2}, None, note="ok")


def _cell(tmp_path):
    return ladder_cell(tmp_path, ("floor", "native_repack", "control"), "depth/q4_0/t2")


def _policy(**seq):
    return sequential_policy(phase=protocol.POINTS, max=12, **seq)


def test_each_point_is_decided_on_its_own_at_its_phases_threshold(tmp_path):
    """A 20x step at d0 is decided at the first look, and the same rungs 2 % apart at d1024
    (decode: δ 3 %) are decided equivalent only later; the rungs run until the last point is
    decided, and each decision is recorded under its point."""
    phases = {"pp32@d0": "prefill", "tg16@d1024": "decode"}
    speed = {("floor", "pp32@d0"): 1.0, ("native_repack", "pp32@d0"): 20.0,
             ("control", "pp32@d0"): 20.0, ("floor", "tg16@d1024"): 10.0,
             ("native_repack", "tg16@d1024"): 10.2, ("control", "tg16@d1024"): 10.2}
    exp = Depths("depth/q4_0/t2", speed, phases, sd=0.005)
    cell, policy = _cell(tmp_path), _policy()
    assert policy.sequential["threshold"] is None
    assert policy.sequential["thresholds"] == {"prefill": 0.05, "decode": 0.03}
    harness.measure(exp, cell, policy)
    d = cell.decided
    shallow, deep = d["pp32@d0|step:floor:native_repack"], d["tg16@d1024|step:floor:native_repack"]
    assert shallow["decision"] == "faster" and shallow["at"] == sequential.MIN_ROUNDS
    assert deep["decision"] == "equivalent" and deep["at"] > shallow["at"]
    assert cell.stopped == "decided"
    assert {r for n, r in exp.ran if n == "floor"} == set(range(deep["at"]))
    assert harness.cell_meta(cell, policy)["sequential"]["threshold"] is None
    assert sequential.decided_at(d, "pp32@d0") == {k.split("|")[1]: v for k, v in d.items()
                                                    if k.startswith("pp32@d0|")}


def test_a_cell_of_one_workload_keeps_its_keys():
    samples = [{"rung": "a", "tokens_per_s": 1.0}]
    assert sequential.by_point(samples) == [(None, samples)]
    assert sequential.point_key(None, "step:a:b") == "step:a:b"
    assert sequential.decided_at({"step:a:b": 1, "p|step:a:b": 2}, None) == {"step:a:b": 1}
    assert sequential.describe("pp32@d0|step:a:b") == "pp32@d0 a -> b"


# --- the crossover ------------------------------------------------------------------------------
def _series(*points):
    return [{"depth": d, "estimate": e, "lo": e * 0.9, "hi": e * 1.1, "call": c}
            for d, e, c in points]


def test_an_advantage_that_ends_is_placed_between_two_measured_depths():
    x = depth_view.crossover(_series((0, 3.0, "faster"), (1024, 1.5, "faster"),
                                     (4096, 1.02, "inconclusive"), (8192, 0.8, "slower")))
    assert (x["kind"], x["lo"], x["hi"]) == ("between", 1024, 8192)
    # interpolated in log ratio between the last point above 1x and the next below it
    la, lb = np.log(1.02), np.log(0.8)
    assert x["estimate"] == pytest.approx(4096 + 4096 * la / (la - lb), abs=0.1)


def test_an_advantage_that_holds_is_bounded_not_extrapolated():
    x = depth_view.crossover(_series((0, 20.0, "faster"), (1024, 19.0, "faster")))
    assert x["kind"] == "none below" and x["depth"] == 1024
    assert "no crossover below d1024" in depth_view.sentence(
        {"rung": "b", "base": "a", "phase": "prefill", "series": _series(
            (0, 20.0, "faster"), (1024, 19.0, "faster")), "crossover": x})


def test_what_the_calls_cannot_place_is_said():
    assert depth_view.crossover(_series((0, 0.7, "slower"), (512, 0.6, "slower")))["kind"] \
        == "from the start"
    x = depth_view.crossover(_series((0, 1.02, "inconclusive"), (512, 0.7, "slower")))
    assert x["kind"] == "not located" and x["slower_from"] == 512
    x = depth_view.crossover(_series((0, 2.0, "faster"), (512, 1.01, "equivalent")))
    assert x["kind"] == "not located" and "equivalent" in x["why"]


# --- the report's view, on a real result ----------------------------------------------------------
def test_a_real_depth_result_reaches_the_report(tmp_path):
    """A real run's result (tests/fixtures/depth/result.json: the default depths on this
    machine's x86 ladder): every point judged, each phase's curve with its crossover said in
    words, the memory table, and the section validated and rendered (Markdown, HTML, figures)."""
    from ladder.analysis import serving_view
    from ladder.reporting import render

    root = Path(__file__).parent / "fixtures"
    report = json.loads((root / "report" / "ladder.json").read_text())
    missing: list = []
    value = serving_view.serving_section(
        plan=report["plan"], stats_cfg=report["provenance"]["stats"], points=[],
        point_files=[], missing=missing, server_files={"depth": [str(FIXTURES / "result.json")]})
    assert not missing, missing
    dp = value["depth"]
    assert [p["point"] for p in dp["points"]] == [
        f"{w}@d{d}" for d in (0, 512, 1024) for w in ("pp32", "tg16")]
    for phase in depth_view.PHASES:
        (curve,) = dp["curves"][phase]  # one step on this ladder: floor -> native_repack
        assert (curve["base"], curve["rung"]) == ("floor", "native_repack")
        assert [p["depth"] for p in curve["series"]] == [0, 512, 1024]
        # measured: still called faster at 1024 in both phases (no inversion on this host)
        assert curve["crossover"] == {**curve["crossover"], "kind": "none below", "depth": 1024}
    assert any("no crossover below d1024" in s for s in dp["sentences"])
    assert {(m["rung"], m["depth"]) for m in dp["memory"]} == {
        (n, d) for n in ("floor", "native_repack", "control") for d in (0, 512, 1024)}
    assert all(m["restore_ms"] is None if m["depth"] == 0 else m["restore_ms"] < 50
               for m in dp["memory"])
    # the levers on native_repack, each against the server's default at d0 and d1024: in this
    # run flash attention off was decided faster at d1024 (prefill) and its effect grew with
    # depth, KV q8_0 slower at d1024; no other change of the curve was decided within the budget
    (lv,) = dp["levers"]
    assert lv["settings"] == ["native_repack+default", "native_repack+fa_off",
                              "native_repack+kv_q8_0"] and lv["depths"] == [0, 1024]
    calls = {(c["setting"].split("+")[1], c["phase"]): c["call"] for c in lv["changes"]}
    assert calls == {("fa_off", "prefill"): "grows", ("kv_q8_0", "prefill"): "cannot tell",
                     ("fa_off", "decode"): "cannot tell", ("kv_q8_0", "decode"): "cannot tell"}
    assert "changes the curve: `native_repack+fa_off` (prefill)" in lv["sentence"]
    deep = next(p for p in lv["points"] if p["point"] == "pp32@d1024")
    assert {c["rung"]: c["verdict"]["call"] for c in deep["cell"]["vs_floor"]} == {
        "native_repack+fa_off": "faster", "native_repack+kv_q8_0": "slower"}
    # where the time goes: attention's share of the floor's timed work grows with depth
    hs = dp["hotspots"]
    assert hs["status"] == "ok" and hs["depths"] == [0, 1024]
    floor = {r["depth"]: r for r in hs["rows"] if r["rung"] == "floor"}
    assert floor[0]["attention"] < 0.05 < 0.25 < floor[1024]["attention"]
    assert floor[0]["kernels"] > floor[1024]["kernels"] > 0.5
    assert hs["sentences"][0].startswith("`floor`: attention 3% of the sampled time at d0, 29%")
    doc = {**report, "serving": {**(report.get("serving") or {}), "depth": dp}}
    src = tmp_path / "ladder.json"
    src.write_text(json.dumps(doc))
    out = render.render_all(src, tmp_path / "out", workdir=tmp_path)
    md, html = Path(out["md"]).read_text(), Path(out["html"]).read_text()
    assert "### Long context: prefill and decode after a context of depth d" in md
    assert dp["sentences"][0] in md
    assert 'id="serving-depth"' in html and lv["sentence"] in md
    assert hs["sentences"][0] in md and "| `floor` | 1024 |" in md
    assert (tmp_path / "out" / "figures" / "serving_depth_prefill.png").is_file()


def test_a_lever_changes_the_curve_only_when_its_effect_at_depth_differs():
    """Per round, the setting's log ratio against the baseline at the deepest depth minus the
    same at the shallowest, on the design's repeated interval: a setting 30 % faster only at
    depth "grows"; one 30 % faster at both depths is "unchanged" (it is a lever, but not of
    the curve); three rounds of noise cannot tell a 4 % change."""
    pts = [{"point": "pp32@d0", "depth": 0, "phase": "prefill"},
           {"point": "pp32@d1024", "depth": 1024, "phase": "prefill"}]
    rng = np.random.default_rng(3)
    rule = depth_view.Design(12, 0.05, 1.0, {"prefill": 0.05, "decode": 0.03})

    def samples(shallow, deep, rounds=8, sd=0.01):
        out = []
        for r in range(rounds):
            for point, gain in (("pp32@d0", shallow), ("pp32@d1024", deep)):
                for rung, g in (("base", 1.0), ("set", gain)):
                    out.append({"round": r, "point": point, "rung": rung,
                                "tokens_per_s": 100 * g * float(np.exp(sd * rng.standard_normal()))})
        return out

    def call(*args, **kw):
        return depth_view.curve_change(samples(*args, **kw), ("base", "set"), pts, "prefill",
                                       rule)

    grows = call(1.0, 1.3)
    assert grows["call"] == "grows" and grows["estimate"] == pytest.approx(1.3, rel=0.03)
    assert call(1.3, 1.3)["call"] == "unchanged"
    assert call(1.0, 0.7)["call"] == "shrinks"
    assert call(1.0, 1.04, rounds=3, sd=0.05)["call"] == "cannot tell"
    assert depth_view.curve_change([], ("base", "set"), pts, "prefill", rule)["call"] \
        == "cannot tell"
    assert depth_view.curve_change([], ("base", "set"), pts[:1], "prefill", rule) is None


class _Stub:
    """The slot API's replies as a server gives them, scripted (no process): what a restore
    returns, and the completion's timings (a real reply's)."""

    url, pid, log = "http://127.0.0.1:1", 0, "stub.log"

    def __init__(self, restored):
        self.restored, self.calls = restored, []

    def post(self, path, body, timeout_s):
        self.calls.append(path)
        if "action=restore" in path:
            return {"n_restored": self.restored, "timings": {"restore_ms": 1.0}}, 1.0
        if "action=" in path:
            return {}, 1.0
        n = len(body["prompt"])
        return {"timings": {"cache_n": n - 32, "prompt_n": 32, "prompt_ms": 80.0,
                            "predicted_n": 16, "predicted_ms": 200.0}}, 300.0


def test_a_restored_state_of_another_depth_is_refused_not_used(tmp_path):
    """A saved state that does not hold the depth it is named for (a truncated or foreign file)
    is a named failure of the rung before any request is timed on it."""
    cfg = {"depths": [0, 64], "n_prompt": 32, "n_gen": 16, "context_seed": 0}
    exp = depth.Depth(name="depth/q4_0/t2", model={"path": "m.gguf"}, cfg=cfg, threads=2,
                      contexts=tmp_path)
    at = harness.Attempt(rnd=0, attempt=0, pos=0, rung={"name": "floor"}, stem="x",
                         warmup=False)
    with pytest.raises(LadderError, match="restoring depth 64 gave 63 tokens"):
        exp.timed(_Stub(63), 1, at, 5.0, {"requests": []})
    kept: dict = {"requests": []}
    got = exp.timed(_Stub(64), 1, at, 5.0, kept)
    assert sorted({s["point"] for s in got}) == ["pp32@d0", "pp32@d64", "tg16@d0", "tg16@d64"]
    assert [r["depth"] for r in kept["requests"]] in ([0, 64], [64, 0])


def test_a_fill_extends_the_deepest_context_saved_below_it(tmp_path):
    """Whole saved contexts only (a .part file is never one), from this series or another."""
    for name in ("d256.bin", "d1024.bin", "d2048.part.bin", "dx.bin"):
        (tmp_path / name).write_bytes(b"")
    assert depth.saved_depths(tmp_path) == [256, 1024]
