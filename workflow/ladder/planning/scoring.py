"""The quality measurement's protocol (what ``measuring/quality`` runs llama-perplexity with):
which tokens llama-perplexity scores, the fewest it reports KL statistics on, and the start-up
check of ``quality.ctx`` / ``quality.chunks`` against them (``config.check_config``)."""

from __future__ import annotations

from typing import Any, Mapping

from ladder.core.errors import LadderError

# tools/perplexity/perplexity.cpp: "if (kld.count < 100) return; // we do not wish to do
# statistics on so few values" - below this, KL mode prints its per-chunk table only.
MIN_SCORED_TOKENS = 100


def scored_tokens(ctx: int, chunks: int) -> int:
    """Tokens llama-perplexity scores: the second half of each chunk, less its first token."""
    return chunks * (ctx - ctx // 2 - 1)


def check_settings(settings: Mapping[str, Any]) -> None:
    """``quality``'s chunks of ``ctx`` tokens score enough tokens for KL statistics."""
    n = scored_tokens(int(settings["ctx"]), int(settings["chunks"]))
    if n < MIN_SCORED_TOKENS:
        raise LadderError(
            f"quality.chunks/quality.ctx: {settings['chunks']} chunks of {settings['ctx']} score "
            f"{n} tokens; llama-perplexity prints no KL statistics under {MIN_SCORED_TOKENS}")
