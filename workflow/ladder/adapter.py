"""What every ``script:`` adapter shares: logging to the rule's log, one-line errors."""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any, Callable

from ladder.errors import LadderError


def run_step(snakemake: Any, step: Callable[[], object]) -> None:
    log_path = snakemake.log[0] if len(snakemake.log) else None
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        handlers.append(logging.FileHandler(log_path, mode="a"))
    logging.basicConfig(level=logging.INFO, handlers=handlers,
                        format="%(asctime)s %(name)s %(message)s", force=True)
    try:
        step()
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
