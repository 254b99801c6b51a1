"""Load-time evidence a rung's claim needs: a marker (kept apart from recipes, so the evidence
rule's code identity does not reach the build and source code)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Marker:
    """A piece of load-time evidence that must (or must not) be seen for a mechanism's claim."""

    mechanism: str
    buffer: str | None = None
    feature: str | None = None
    log: str | None = None
    absent: bool = False

    def describe(self) -> str:
        what = (
            f"weight buffer {self.buffer}"
            if self.buffer
            else f"compiled feature {self.feature}"
            if self.feature
            else f"log line containing {self.log!r}"
        )
        return ("no " if self.absent else "") + what
