"""Kernel evidence per rung and quant: what the build advertises and where the weights went.

"No marker, no claim": a rung is credited with a mechanism only when every marker the rung
declares for it is seen in its own load log / feature string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core import parse
from ladder.preparing.emulation import guest_crash
from ladder.core.machine import host_brief
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.machine import host_cpu_flags
from ladder.core.markers import Marker
from ladder.core.run import diagnose_crash, run
from ladder.core.status import unbuilt_status

FORMAT = "ladder-evidence/1"

# system_info feature name -> the host flag (/proc/cpuinfo) that must be present to use it.
HOST_FLAG_FOR_FEATURE = {
    "SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
    "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8",
    "NEON": "asimd", "ARM_FMA": "asimd", "FP16_VA": "asimdhp", "DOTPROD": "asimddp",
    "MATMUL_INT8": "i8mm", "SVE": "sve", "SME": "sme",
}


def marker_seen(m: Marker, buffers: Mapping[str, float], features: Mapping[str, str],
                log: str) -> bool:
    if m.buffer is not None:
        present = buffers.get(m.buffer, 0.0) > 0.0
    elif m.feature is not None:
        present = features.get(m.feature) == "1"
    elif m.log is not None:
        present = m.log in log
    else:
        present = False
    return present != m.absent


def judge_claims(markers: Sequence[Marker], buffers: Mapping[str, float],
                 features: Mapping[str, str], log: str, crash: str | None) -> list[dict[str, Any]]:
    by_mech: dict[str, list[Marker]] = {}
    for m in markers:
        by_mech.setdefault(m.mechanism, []).append(m)
    claims = []
    for mech, ms in by_mech.items():
        seen = [m.describe() for m in ms if marker_seen(m, buffers, features, log)]
        missing = [m.describe() for m in ms if not marker_seen(m, buffers, features, log)]
        if missing:
            verdict = "no marker, no claim"
        elif crash:
            verdict = f"markers present, but the run crashed ({crash})"
        else:
            verdict = "credited"
        claims.append({"mechanism": mech, "verdict": verdict, "credited": verdict == "credited",
                       "seen": seen, "missing": missing})
    return claims


def feature_vs_host(features: Mapping[str, str], host_flags: frozenset[str]) -> list[dict[str, Any]]:
    rows = []
    for feat, flag in HOST_FLAG_FOR_FEATURE.items():
        if feat in features:
            rows.append({"feature": feat, "compiled": features[feat] == "1",
                         "host_flag": flag, "host_has": flag in host_flags})
    return rows


def analyse_log(log: str, markers: Sequence[Marker], crash: str | None) -> dict[str, Any]:
    buffers = parse.weight_buffers(log)
    features = parse.system_info_features(log)
    return {
        "weight_buffers_mib": buffers,
        "system_info": parse.system_info_line(log),
        "compiled_features": features,
        "vendor_lines": parse.vendor_lines(log),
        "kleidiai_primary": parse.kleidiai_primary(log),
        "kleidiai_sme": parse.kleidiai_sme(log),
        "kleidiai_unaccelerated_types": parse.kleidiai_unaccelerated_types(log),
        "repacked_layouts": parse.repacked_layouts(log),
        "amx_repacked_types": parse.amx_repacked_types(log),
        "buffer_fallbacks": parse.buffer_fallbacks(log),
        "claims": judge_claims(markers, buffers, features, log, crash),
    }


def collect(*, rung: Mapping[str, Any], markers: Sequence[Marker], provenance: str, model_meta: str,
            prompt: str, n_predict: int, threads: int, timeout_s: float, out_json: str,
            raw_log: str, env: Mapping[str, str], common_args: Sequence[str]) -> dict[str, Any]:
    """One short verbose load + a few tokens with llama-completion; always writes ``out_json``.

    On an emulated host the tool runs under the rung's ``launcher`` (qemu -cpu <model>), and the
    guest CPU's flags stand in for /proc/cpuinfo (inside qemu-user that is the x86 host's)."""
    prov = read_json(provenance)
    model = read_json(model_meta)
    launcher = list(rung.get("launcher") or [])
    guest = rung.get("guest") or None
    if guest:
        timeout_s = max(timeout_s, float(guest.get("timeout_s", timeout_s)))
    record: dict[str, Any] = {
        "format": FORMAT, "ran_on": host_brief(guest), "rung": rung["name"],
        "quant": model["quant"].lower(),
        "build_key": prov.get("build_key"), "model_sha256": model["sha256"],
        "requantized": model.get("requantized", False), "runtime": dict(rung["runtime"]),
        "status": None, "reason": None,
    }
    if prov.get("status") != "ok":
        record.update(status=unbuilt_status(prov), reason=prov.get("reason"), build_log=prov.get("log"))
        atomic_write_text(raw_log, f"no run: build failed ({prov.get('reason')})\n")
        atomic_write_json(out_json, record)
        return record
    argv = [*launcher, str(Path(prov["bin_dir"]) / "llama-completion"), "-m", model["path"], "-p", prompt,
            "-n", str(n_predict), "-no-cnv", "--temp", "0", "-s", "1", "-c", "512",
            "-t", str(threads), "-lv", "5", "--no-warmup", *common_args]
    res = run(argv, env=env, timeout_s=timeout_s)
    atomic_write_text(raw_log, f"$ {' '.join(argv)}\n# env {dict(env)}\n{res.stderr}\n"
                               f"--- stdout ---\n{res.stdout}")
    crash = res.failure()
    record.update(argv=argv, wall_s=round(res.wall_s, 3), peak_rss_kib=res.peak_rss_kib,
                  returncode=res.returncode, raw_log=raw_log)
    if crash is None:
        record["status"] = "ok"
    else:
        record["status"] = "crashed" if res.signal_name or res.timed_out else "failed"
        record["reason"] = crash
        if res.signal_name and launcher:
            # gdb on qemu would debug the emulator; qemu names the guest's signal itself
            record["crash"] = {"signal": res.signal_name, "symbol": None,
                               "method": "qemu", "note": guest_crash(res.stderr)}
            record["reason"] = (f"guest {res.signal_name} under qemu {' '.join(launcher[-2:])}: "
                                f"{guest_crash(res.stderr) or 'no qemu signal line'}")
        elif res.signal_name:
            record["crash"] = {"signal": res.signal_name,
                               **diagnose_crash(argv, env=env, timeout_s=timeout_s)}
            sym = record["crash"].get("symbol")
            record["reason"] = f"{res.signal_name}" + (f" in {sym}" if sym else "")
    record.update(analyse_log(res.stderr, markers, record.get("reason")))
    flags = frozenset(guest["cpu_flags"]) if guest else host_cpu_flags()
    record["features_vs_host"] = feature_vs_host(record["compiled_features"], flags)
    atomic_write_json(out_json, record)
    return record
