"""What every ``script:`` adapter shares: logging to the rule's log, one-line errors."""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any, Callable

from ladder.core import outcome
from ladder.core.errors import LadderError


def job_label(snakemake: Any) -> str:
    """``bench local/q4_0/tg64/2``: the rule and its wildcard values, for terminal lines."""
    values = [str(v) for v in dict(snakemake.wildcards.items()).values()]
    return " ".join([snakemake.rule, "/".join(values)]).strip()


def run_step(snakemake: Any, step: Callable[[], object]) -> None:
    log_path = snakemake.log[0] if len(snakemake.log) else None
    # the terminal gets one short line per step, named by the job; the log gets timestamps
    terminal = logging.StreamHandler(sys.stderr)
    terminal.setFormatter(logging.Formatter(f"{job_label(snakemake)}: %(message)s"))
    handlers: list[logging.Handler] = [terminal]
    if log_path:
        to_log = logging.FileHandler(log_path, mode="a")
        to_log.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        handlers.append(to_log)
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    try:
        # an input that holds a failure of the moment makes this job's outputs one too: the
        # next run retires the whole chain (Snakemake never re-makes a missing input of a job
        # whose outputs exist), so every job that read it runs again
        derived = outcome.derived([str(i) for i in snakemake.input])
        with outcome.watch() as moments:
            step()
        moments += derived
        outputs = [str(o) for o in snakemake.output]
        if moments:  # a failure of the moment: the next run checks this job's outputs again
            outcome.mark(outputs, moments)
            logging.info("a failure of the moment (checked again on the next run): %s",
                         "; ".join(m["reason"] for m in moments))
        else:
            outcome.clear(outputs)
    except LadderError as exc:
        msg = f"ladder: error in rule {snakemake.rule}: {exc}"
        if log_path:
            with open(log_path, "a") as f:
                f.write(msg + "\n" + traceback.format_exc())
        print(msg, file=sys.stderr)
        sys.exit(1)
    except Exception:
        if log_path:  # an unexpected failure still leaves its traceback in the rule's log
            with open(log_path, "a") as f:
                f.write(traceback.format_exc())
        raise
