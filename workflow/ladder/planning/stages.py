"""What the plan and the config checks know of the profiling stages (hotspots, ggml's kernel
tests) without importing the code that runs them: which workload each hotspot phase samples, and
why neither runs on an emulated host. ``Plan`` imports this, never ``hotspots`` or
``kernel_tests`` (which import llama-bench's argv and the process runner)."""

from __future__ import annotations

from typing import Any, Mapping

from ladder.core.errors import LadderError
from ladder.planning.protocol import phase_of

HOTSPOTS_EMULATED_REASON = ("emulated host: perf would sample QEMU's translator, not the "
                            "guest's kernels, so no hotspot is told")
KERNEL_TESTS_EMULATED_REASON = ("emulated host: ggml's kernel tests are not run under QEMU here "
                                "(timings under emulation say nothing about a CPU)")


def phase_workloads(settings: Mapping[str, Any], workloads: Mapping[str, Any]
                    ) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """phase -> (workload name, spec): hotspots.workloads names keys of measure.workloads; a
    phase it leaves out (or all, when it is null) takes the bench's largest workload of that
    phase, so a config that shrinks the bench's workloads samples what it measures."""
    live = {w: s for w, s in workloads.items() if s}
    named = dict(settings.get("workloads") or {})
    for phase in ("prefill", "decode"):
        if phase not in named:
            same = sorted((int(s.get("n_prompt") or 0) + int(s.get("n_gen") or 0), w)
                          for w, s in live.items() if phase_of(s) == phase)
            if same:
                named[phase] = same[-1][1]
    out = {}
    for phase, name in named.items():
        spec = live.get(name)
        if not spec:
            raise LadderError(f"hotspots.workloads.{phase}: {name!r} is not a workload of "
                              f"measure.workloads ({sorted(live)})")
        if phase_of(spec) != phase:
            raise LadderError(f"hotspots.workloads.{phase}: {name!r} is a {phase_of(spec)} "
                              "workload")
        out[phase] = (name, spec)
    return out
