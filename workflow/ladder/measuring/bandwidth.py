"""A short memory-bandwidth probe for the decode roofline (recorded with the results).

STREAM-style copy with numpy: each of N threads copies its own block of ``size_mib`` (far beyond
the last-level cache) ``repeats`` times; numpy releases the GIL inside the copy, so threads run
in parallel. Bandwidth counts the bytes read plus the bytes written, the best repeat is kept
(as STREAM does) and every repeat is recorded. Decode reads every weight once per token, so
``bandwidth / model bytes`` is the decode roofline in tokens/s.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from typing import Any

import numpy as np

from ladder.core.machine import host_brief
from ladder.core.io import atomic_write_json

FORMAT = "ladder-bandwidth/1"


def copy_bandwidth(threads: int, size_mib: int, repeats: int) -> dict[str, Any]:
    n = size_mib * 1024 * 1024 // 8
    srcs = [np.full(n, 1.0) for _ in range(threads)]  # touched: no first-touch cost in timing
    dsts = [np.full(n, 0.0) for _ in range(threads)]
    seconds = []
    for _ in range(repeats):
        barrier = threading.Barrier(threads + 1)

        def work(i: int) -> None:
            barrier.wait()
            np.copyto(dsts[i], srcs[i])

        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        start = time.perf_counter()
        barrier.wait()
        for t in pool:
            t.join()
        seconds.append(time.perf_counter() - start)
    moved = 2 * threads * n * 8  # read + write
    best = min(seconds)
    return {"threads": threads, "bytes_per_repeat": moved, "seconds": [round(s, 6) for s in seconds],
            "best_gbps": round(moved / best / 1e9, 3),
            "median_gbps": round(moved / sorted(seconds)[len(seconds) // 2] / 1e9, 3)}


def probe(out_json: str, size_mib: int = 256, repeats: int = 7) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    runs = [copy_bandwidth(t, size_mib, repeats) for t in sorted({1, cores})]
    best = max(runs, key=lambda r: r["best_gbps"])
    doc = {"format": FORMAT, "ran_on": host_brief(), "method": f"numpy copy, {size_mib} MiB per thread, best of "
                                       f"{repeats}, read+write bytes",
           "numpy": np.__version__, "python": platform.python_version(), "runs": runs,
           "bandwidth_gbps": best["best_gbps"], "threads_at_best": best["threads"],
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write_json(out_json, doc)
    return doc
