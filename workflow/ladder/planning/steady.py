"""A capacity probe's rule (issue 59): how long a probe runs, which of its requests count, and
when it passes. Pure functions: ``measuring/load`` runs the probes, the analysis reads
the same rule back.

A probe offers one request rate (open loop, Poisson arrivals, an independent draw per probe) to
a warm server for a warm-up window and a measured window, both in units of the server's own
service time (``service_s``: prefill + decode of one request with every slot busy, measured at
the server's warm-up), so a slow rung gets a long probe and a fast one a short one:

- **warm-up**: the first ``warmup_services`` service times of arrivals are sent and kept but
  not judged (the queue starts empty; its first seconds flatter any rate);
- **measured**: the next ``n`` arrivals, spanning at least ``measure_services`` service times,
  ``n`` at least the fewest requests that can pass at all, and snapped up to a count at which
  the attainment test's size is close to its α (``efficient_n``): the pass probability at a
  given attainment then rises with that attainment, never with the accident of ``n``;
- **passes** only if (1) its attainment (the measured requests within every limit) is shown
  above ``target - tolerance`` by a one-sided exact binomial test at level ``alpha``
  (``least_good``), and (2) its backlog is flat: the measured window's departures are not
  significantly fewer than its arrivals (``departures_p``: Poisson, as a stable M/M/c queue's
  departures are by Burke's theorem) and the requests in the system (sent, not finished: the
  deferred plus the processing ones, on the client's exact clock) grew by no more than the
  server's slots from the window's first quarter to its last (``backlog_growth``).

A probe that would need more than ``probe_max_s`` is not run (``window``: "untestable"): the rate
is below what a bounded probe can establish, said as such; it counts as not passed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

from scipy import stats as sps


@lru_cache(maxsize=None)
def least_good(n: int, p0: float, alpha: float) -> int | None:
    """The fewest good requests of ``n`` that reject "attainment ≤ p0" at level ``alpha``
    (one-sided exact binomial: P(Bin(n, p0) ≥ k) ≤ α); None when even n of n cannot."""
    for k in range(n + 1):
        if sps.binom.sf(k - 1, n, p0) <= alpha:
            return k
    return None


@lru_cache(maxsize=None)
def efficient_n(least: int, p0: float, alpha: float) -> int:
    """The smallest count ≥ ``least`` at which the test allows one miss more than at the count
    before it: there its size is closest to α (between two such counts the extra requests only
    make passing harder), so the pass probability at a fixed attainment rises from one such
    count to the next."""
    n = max(int(least), 1)
    while True:
        k = least_good(n, p0, alpha)
        prev = least_good(n - 1, p0, alpha) if n > 1 else None
        if k is not None and (prev is None or n - k > (n - 1) - prev):
            return n
        n += 1


def pass_probability(n: int, p: float, p0: float, alpha: float) -> float:
    """The chance a probe of ``n`` measured requests passes the attainment test when each is
    good with probability ``p`` (the test's operating characteristic)."""
    k = least_good(n, p0, alpha)
    return 0.0 if k is None else float(sps.binom.sf(k - 1, n, p))


@dataclass(frozen=True)
class Window:
    """One probe's plan: ``n_warm`` arrivals of warm-up then ``n`` measured ones, at ``rate``;
    the probe lasts about ``total_s``; ``testable`` False: it would need more than
    ``probe_max_s`` (not run)."""

    rate: float
    service_s: float
    n_warm: int
    n: int
    least: int
    warm_s: float
    measure_s: float
    total_s: float
    testable: bool

    def record(self) -> dict[str, Any]:
        return asdict(self)


def p0_of(cap: Mapping[str, Any]) -> float:
    return float(cap["target"]) - float(cap["tolerance"])


def fewest(cap: Mapping[str, Any]) -> int:
    """The fewest measured requests with which a probe can pass at all."""
    p0, alpha = p0_of(cap), float(cap["alpha"])
    n = max(1, math.ceil(math.log(alpha) / math.log(p0) - 1e-9)) if p0 > 0 else 1
    return efficient_n(max(n, int(cap["requests"])), p0, alpha)


def window(rate: float, service_s: float, cap: Mapping[str, Any]) -> Window:
    """The probe at ``rate`` on a server whose requests take ``service_s`` each (``cap``: the
    ``serving.load.capacity`` block)."""
    p0, alpha = p0_of(cap), float(cap["alpha"])
    warm_s = float(cap["warmup_services"]) * service_s
    n_warm = max(1, math.ceil(rate * warm_s))
    want = max(fewest(cap), math.ceil(rate * float(cap["measure_services"]) * service_s))
    n = efficient_n(want, p0, alpha)
    least = least_good(n, p0, alpha) or n
    # the sends span (n_warm + n - 1) / rate; the last ones' service follows
    measure_s = n / rate
    total = (n_warm + n - 1) / rate + service_s
    return Window(rate=rate, service_s=service_s, n_warm=n_warm, n=n, least=least,
                  warm_s=n_warm / rate, measure_s=measure_s, total_s=total,
                  testable=total <= float(cap["probe_max_s"]))


def stream_window(streams: int, cap: Mapping[str, Any]) -> Window:
    """A concurrency probe of ``streams`` clients: the first wave (one request each) its
    warm-up, then at least ``waves - 1`` more waves and the test's fewest, snapped as
    ``window``'s count (no rate, no time: a closed loop's length is its requests)."""
    p0, alpha = p0_of(cap), float(cap["alpha"])
    n = efficient_n(max(fewest(cap), (int(cap["waves"]) - 1) * streams), p0, alpha)
    return Window(rate=0.0, service_s=0.0, n_warm=streams, n=n,
                  least=least_good(n, p0, alpha) or n, warm_s=0.0, measure_s=0.0, total_s=0.0,
                  testable=True)


def untestable(probes: Sequence[Mapping[str, Any]]) -> bool:
    """A search whose every probe was not run (longer than probe_max_s): nothing tested."""
    return bool(probes) and all(p.get("testable") is False for p in probes)


def departures_p(departures: int, expected: float) -> float:
    """P(a Poisson count of mean ``expected`` ≤ ``departures``): small when the window's
    requests finished markedly slower than they arrived (a backlog growing)."""
    return float(sps.poisson.cdf(departures, expected)) if expected > 0 else 1.0


def in_system(records: Sequence[Mapping[str, Any]], t: float) -> int:
    """Requests sent by ``t`` and not finished by it (the client's clock)."""
    return sum(1 for r in records if r.get("sent_s") is not None and r["sent_s"] <= t
               and (r.get("end_s") is None or r["end_s"] > t))


def backlog_growth(records: Sequence[Mapping[str, Any]], t0: float, t1: float,
                   points: int = 40) -> float:
    """How much the requests in the system grew over [t0, t1]: the mean over its last quarter
    minus the mean over its first (sampled on ``points`` instants)."""
    if t1 <= t0:
        return 0.0
    ts = [t0 + (t1 - t0) * i / (points - 1) for i in range(points)]
    q = max(1, points // 4)
    first = [in_system(records, t) for t in ts[:q]]
    last = [in_system(records, t) for t in ts[-q:]]
    return sum(last) / len(last) - sum(first) / len(first)


def judge(records: Sequence[Mapping[str, Any]], good: Sequence[bool], win: Window,
          cap: Mapping[str, Any], slots: int, closed: bool = False) -> dict[str, Any]:
    """A finished probe: ``records`` its requests in arrival order (``Request.record()``:
    sent_s, end_s, status, scheduled_s), ``good`` whether each met every limit. The warm-up's
    are left out; the measured window is from the first measured arrival to the last.
    ``closed``: a closed loop's probe (its backlog is bounded by its streams: attainment
    only)."""
    alpha = float(cap["alpha"])
    meas = list(records[win.n_warm:])
    ok = list(good[win.n_warm:])
    sent = [r for r in meas if r.get("sent_s") is not None]
    n_good = sum(1 for r, g in zip(meas, ok) if g and r.get("sent_s") is not None)
    attained = n_good >= win.least and len(sent) == win.n
    out: dict[str, Any] = {"measured": len(meas), "measured_sent": len(sent), "good": n_good,
                           "least_good": win.least, "attainment": n_good / len(sent)
                           if sent else 0.0, "attained": attained}
    if not attained or len(sent) < 2 or closed:
        out.update(flat=None, passed=attained and closed,
                   why=None if attained else "attainment" if sent else "nothing measured")
        return out
    t0 = min(float(r["scheduled_s"]) for r in sent)
    t1 = max(float(r["scheduled_s"]) for r in sent)
    departed = sum(1 for r in records if r.get("end_s") is not None and t0 <= r["end_s"] <= t1)
    expected = win.rate * (t1 - t0)
    p = departures_p(departed, expected)
    growth = backlog_growth(records, t0, t1)
    flat = p >= alpha and growth <= slots
    out.update(departures=departed, departures_expected=expected, departures_p=p,
               backlog_growth=growth, flat=flat, passed=flat,
               why=None if flat else ("departures" if p < alpha else "backlog"))
    return out
