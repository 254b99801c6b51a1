"""Quality drift per rung and quant: perplexity, KL divergence and top-1 agreement against the
floor rung, and a greedy generation probe. A speedup that changes outputs is flagged, not hidden.

The floor's base logits (vocab x tokens, ~130 MB for Gemma at 512 tokens) live at a
content-addressed scratch path. Rung jobs depend on the floor's small result JSON, not on the
logits file, so regenerating that file never reruns other rungs. A rung job recreates it if an
earlier cleanup deleted it, and ``cleanup_logits`` removes it after a successful run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core import parse, progress
from ladder.core.machine import host_brief
from ladder.core.errors import LadderError
from ladder.core.io import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    canonical_hash,
    read_json,
    sha256_file,
)
from ladder.core.run import RunResult, run
from ladder.core.status import unbuilt_status
from ladder.planning.scoring import MIN_SCORED_TOKENS, scored_tokens

FORMAT = "ladder-quality/1"
def fetch_corpus(spec: Mapping[str, Any], dest: str, meta_out: str) -> None:
    kind = spec["kind"]
    out = Path(dest)
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "path":
        src = Path(spec["path"]).expanduser()
        if not src.is_file():
            raise LadderError(f"quality.corpus.path: {src} does not exist")
        source: dict[str, Any] = {"kind": "path", "path": str(src)}
    elif kind == "hf":
        from huggingface_hub import hf_hub_download

        try:
            src = Path(hf_hub_download(repo_id=spec["repo"], filename=spec["filename"],
                                       revision=spec["revision"],
                                       repo_type=spec.get("repo_type", "dataset")))
        except Exception as exc:  # noqa: BLE001 - one message names the file
            raise LadderError(f"quality.corpus: cannot fetch {spec['repo']}/{spec['filename']}"
                              f"@{spec['revision']} ({type(exc).__name__}: {exc})") from exc
        source = {"kind": "hf", "repo": spec["repo"], "filename": spec["filename"],
                  "revision": spec["revision"]}
    else:
        raise LadderError(f"quality.corpus.kind: {kind!r} is not one of path, hf")
    got = sha256_file(src)
    if got != spec["sha256"]:
        raise LadderError(f"quality.corpus.sha256: {src} has sha256 {got}, config says "
                          f"{spec['sha256']}; corpus not used")
    text = src.read_bytes()
    atomic_write_bytes(dest, text)  # byte for byte what the sha256 was checked on
    atomic_write_json(meta_out, {"format": "ladder-corpus/1", "sha256": got, "bytes": len(text),
                                 "source": source, "description": spec.get("description")})


def logits_path(base_dir: str, floor_build_key: str, model_sha: str, corpus_sha: str,
                settings: Mapping[str, Any]) -> str:
    key = canonical_hash({"floor": floor_build_key, "model": model_sha, "corpus": corpus_sha,
                          "settings": dict(settings)}, 16)
    return str(Path(base_dir) / f"base-{key}.kld")


def perplexity_argv(bin_dir: str, model: str, corpus: str, settings: Mapping[str, Any],
                    threads: int, extra: Sequence[str], launcher: Sequence[str] = ()) -> list[str]:
    return [*launcher, str(Path(bin_dir) / "llama-perplexity"), "-m", model, "-f", corpus,
            "-c", str(settings["ctx"]), "--chunks", str(settings["chunks"]),
            "-b", str(settings["ctx"]), "-t", str(threads), *extra]


def _failure(res: RunResult, needs: str) -> str | None:
    """llama-perplexity exits 0 on a too-short corpus: judge by the output, not the code."""
    text = res.stdout + "\n" + res.stderr
    if res.failure():
        return res.failure()
    short = parse.corpus_too_short(text)
    if short:
        return short
    if needs == "ppl" and parse.perplexity_final(text) is None:
        return "no 'Final estimate' in llama-perplexity's output"
    if needs == "kld" and "kld_mean" not in parse.kld_statistics(text):
        rows = parse.kld_chunk_rows(res.stdout)
        if rows:
            return ("llama-perplexity printed per-chunk KL figures but no statistics (it skips "
                    f"them under {MIN_SCORED_TOKENS} scored tokens)")
        return "no KL-divergence statistics in llama-perplexity's output"
    return None


def greedy_probe(bin_dir: str, model: str, probe: Mapping[str, Any], threads: int,
                 env: Mapping[str, str], extra: Sequence[str], timeout_s: float,
                 launcher: Sequence[str] = ()) -> dict[str, Any]:
    argv = [*launcher, str(Path(bin_dir) / "llama-completion"), "-m", model, "-p", probe["prompt"],
            "-n", str(probe["n_predict"]), "--temp", "0", "-s", str(probe.get("seed", 1)),
            "-no-cnv", "--no-display-prompt", "--no-warmup", "-c", "512", "-t", str(threads),
            *extra]
    res = run(argv, env=env, timeout_s=timeout_s)
    return {"argv": argv, "text": res.stdout, "failure": res.failure()}


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first differing character, or None when identical."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def measure(*, rung: Mapping[str, Any], is_reference: bool, provenance: str,
            floor_provenance: str, floor_result: str | None, model_meta: str, corpus: str,
            corpus_meta: str, settings: Mapping[str, Any], threads: int, logits_dir: str,
            out_json: str, raw_log: str) -> dict[str, Any]:
    prov, model, corp = read_json(provenance), read_json(model_meta), read_json(corpus_meta)
    fprov = read_json(floor_provenance)
    floor = read_json(floor_result) if floor_result else {}
    logits = logits_path(logits_dir, fprov.get("build_key", "?"),
                         model["sha256"], corp["sha256"],
                         {k: settings[k] for k in ("ctx", "chunks")})
    rec: dict[str, Any] = {
        "format": FORMAT, "ran_on": host_brief(rung.get("guest")), "rung": rung["name"],
        "quant": model["quant"].lower(), "reference": is_reference, "build_key": prov.get("build_key"),
        "model_sha256": model["sha256"], "corpus_sha256": corp["sha256"],
        "settings": dict(settings), "threads": threads, "status": None, "reason": None,
        "tokens_scored": scored_tokens(int(settings["ctx"]), int(settings["chunks"])),
    }
    log: list[str] = []

    def done(status: str, reason: str | None = None) -> dict[str, Any]:
        rec.update(status=status, reason=reason)
        atomic_write_text(raw_log, "\n".join(log) + "\n")
        atomic_write_json(out_json, rec)
        return rec

    if prov.get("status") != "ok":
        return done(unbuilt_status(prov), prov.get("reason"))
    env, extra = dict(rung["env"]), list(rung["common_argv"])
    timeout = float(settings["timeout_s"])
    launcher = list(rung.get("launcher") or [])  # qemu -cpu <model> on an emulated host

    if is_reference or not os.path.exists(logits):
        if fprov.get("status") != "ok":
            return done("no_reference", f"the floor build failed ({fprov.get('reason')})")
        Path(logits).parent.mkdir(parents=True, exist_ok=True)
        argv = perplexity_argv(fprov["bin_dir"], model["path"], corpus, settings, threads,
                               ["--kl-divergence-base", logits], launcher)
        progress.step("pass", 1, 3 if not is_reference else 2, "floor logits (perplexity)")
        res = run(argv, env=env if is_reference else {}, timeout_s=timeout)
        log += [f"$ {' '.join(argv)}", res.stderr, res.stdout]
        failure = _failure(res, "ppl")
        if failure:
            Path(logits).unlink(missing_ok=True)
            return done("crashed" if res.signal_name else "failed", f"floor base pass: {failure}")
        rec["logits_sha256"] = sha256_file(logits)
        if is_reference:
            ppl = parse.perplexity_final(res.stdout + res.stderr)
            if ppl is None:  # _failure checked it: a second reader that disagrees is named
                return done("failed", "floor base pass: no final perplexity estimate")
            rec.update(ppl=ppl[0], ppl_err=ppl[1], ppl_chunks=parse.perplexity_chunks(res.stdout),
                       wall_s=round(res.wall_s, 2))
        else:
            want = floor.get("logits_sha256")
            if want and want != rec["logits_sha256"]:
                return done("failed", "regenerated floor logits differ from the floor run's "
                            f"({rec['logits_sha256'][:12]} vs {want[:12]}): not deterministic")
    if not is_reference:
        argv = perplexity_argv(prov["bin_dir"], model["path"], corpus, settings, threads,
                               ["--kl-divergence-base", logits, "--kl-divergence"], launcher)
        progress.step("pass", 2, 3, f"{rung['name']} KL divergence vs the floor")
        res = run(argv, env=env, timeout_s=timeout)
        log += [f"$ {' '.join(argv)}", res.stderr, res.stdout]
        failure = _failure(res, "kld")
        if failure:
            return done("crashed" if res.signal_name else "failed", failure)
        st = parse.kld_statistics(res.stdout + res.stderr)
        rec.update(ppl=st.get("mean_ppl_q"), ppl_err=st.get("mean_ppl_q_err"),
                   kld=st, kld_chunks=parse.kld_chunk_rows(res.stdout),
                   wall_s=round(res.wall_s, 2))
    progress.step("pass", 3 if not is_reference else 2, 3 if not is_reference else 2,
                  "greedy probe")
    probe = greedy_probe(prov["bin_dir"], model["path"], settings["probe"], threads, env, extra,
                         timeout, launcher)
    log += [f"$ {' '.join(probe['argv'])}", probe["text"]]
    rec["probe"] = {"prompt": settings["probe"]["prompt"], "text": probe["text"],
                    "failure": probe["failure"]}
    if not is_reference and floor:
        ref = floor.get("probe", {}).get("text")
        if ref is not None and probe["failure"] is None:
            div = first_divergence(ref, probe["text"])
            rec["probe"].update(identical_to_floor=div is None, first_divergence=div)
    return done("ok" if probe["failure"] is None else "failed", probe["failure"])


def judge_drift(rec: Mapping[str, Any], floor: Mapping[str, Any] | None,
                tolerance: Mapping[str, float]) -> dict[str, Any]:
    """Flag a rung whose outputs drift from the floor's (pure), in the direction that matters:
    - the distribution: mean KLD above ``kld_mean``, or top-1 agreement below ``same_top1_min``
      by more than twice its error;
    - perplexity: a rise beyond ``ppl_rel`` by more than twice the error of the PPL ratio (a
      lower perplexity is reported, never flagged);
    - the greedy probe: text that differs from the floor's."""
    if rec.get("reference"):
        return {"flag": False, "text": "reference (floor)", "reasons": []}
    if rec.get("status") != "ok" or not floor or floor.get("status") != "ok":
        why = rec.get("reason") if rec.get("status") != "ok" else "the floor has no result"
        return {"flag": None, "text": f"not measured: {why}", "reasons": []}
    reasons: list[str] = []
    notes: list[str] = []
    open_: list[str] = []  # neither shown inside the tolerance nor beyond it: cannot tell
    kl = rec.get("kld") or {}
    rel = rec["ppl"] / floor["ppl"] - 1.0
    err = float(kl.get("ppl_ratio_err") or 0.0)
    tol_ppl = tolerance["ppl_rel"]
    ppl = f"PPL {rel * 100:+.2f} %" + (f" ± {err * 100:.2f}" if err else "")
    if rel - 2 * err > tol_ppl:
        reasons.append(f"PPL {rel * 100:+.2f} % ± {err * 100:.2f} vs floor (tolerance "
                       f"{tol_ppl * 100:g} %)")
    elif rel + 2 * err > tol_ppl:
        open_.append(f"{ppl} reaches past the {tol_ppl * 100:g} % tolerance")
    else:
        notes.append(ppl + (" (lower: not a regression)" if rel < -tol_ppl else ""))
    kld = kl.get("kld_mean")
    if kld is not None and kld > tolerance["kld_mean"]:
        reasons.append(f"mean KLD {kld:.4f} (tolerance {tolerance['kld_mean']:g})")
    elif kld is not None:
        notes.append(f"mean KLD {kld:.4f}")
    top1, top1_err = kl.get("same_top_p"), float(kl.get("same_top_p_err") or 0.0)
    top1_min = float(tolerance.get("same_top1_min", 0.95)) * 100
    if top1 is not None and top1 + 2 * top1_err < top1_min:
        reasons.append(f"same top-1 {top1:.2f} % ± {top1_err:.2f} (minimum {top1_min:g} %)")
    elif top1 is not None and top1 - 2 * top1_err < top1_min:
        open_.append(f"same top-1 {top1:.2f} % ± {top1_err:.2f} reaches below the "
                     f"{top1_min:g} % minimum")
    elif top1 is not None:
        notes.append(f"same top-1 {top1:.2f} %")
    probe = rec.get("probe") or {}
    if probe.get("first_divergence") is not None:
        reasons.append(f"greedy text differs from the floor's from character "
                       f"{probe['first_divergence']}")
    elif probe.get("identical_to_floor"):
        notes.append("greedy text identical")
    if reasons:
        text = "changes outputs: " + "; ".join(reasons)
    elif open_:  # too few tokens to say either way: never "within tolerance"
        text = ("no drift shown, none ruled out: " + "; ".join(open_)
                + (" (" + ", ".join(notes) + ")" if notes else ""))
    else:
        text = "within tolerance (" + ", ".join(notes) + ")"
    return {"flag": bool(reasons), "text": text, "reasons": reasons, "undecided": open_,
            "ppl_rel": rel, "kld_mean": kld}


def sme_scope(rec: Mapping[str, Any], evidence: Mapping[str, Any] | None) -> str | None:
    """Which of KleidiAI's kernel sets a quality run's drift is of, when the rung's evidence
    shows SME enabled with a thread cap (its init line): over the cap KleidiAI hands every
    matmul to its non-SME kernels (the dispatch ledger's SME_THREAD_CAP), so the figures are
    those kernels' drift, not the SME kernels'. None when SME is off or absent."""
    sme = (evidence or {}).get("kleidiai_sme") or {}
    cap, threads = sme.get("thread_cap"), rec.get("threads")
    if sme.get("state") != "enabled" or not cap or not threads:
        return None
    if int(threads) > int(cap):
        return (f"at {threads} threads, over KleidiAI's SME thread cap {cap} "
                f"({sme.get('cap_source')}): the drift of its non-SME fallback kernels; the SME "
                "kernels' drift is not measured here")
    return f"at {threads} thread(s), within KleidiAI's SME thread cap {cap}: its SME kernels"


def cleanup_logits(base_dir: str) -> list[str]:
    removed = []
    for p in Path(base_dir).glob("base-*.kld"):
        p.unlink(missing_ok=True)
        removed.append(str(p))
    return removed
