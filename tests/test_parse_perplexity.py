"""llama-perplexity parsers on real captured output (tests/fixtures/README.md)."""

from __future__ import annotations

import pytest

from ladder.core import parse

P = "x86_64/perplexity/"


def test_base_pass_final_estimate_and_chunks(fixture_text):
    err = fixture_text(P + "floor-q8_0-kld-base.stderr")
    out = fixture_text(P + "floor-q8_0-kld-base.stdout")
    # the final estimate shares a line with the ETA print on stderr
    assert parse.perplexity_final(err) == (14.7852, 2.37442)
    assert parse.perplexity_chunks(out) == [16.5510, 13.6586, 13.9129, 14.7852]


def test_kld_mode_summary(fixture_text):
    out = fixture_text(P + "native_repack-q8_0-kld.stdout")
    s = parse.kld_statistics(out)
    assert s["mean_ppl_q"] == pytest.approx(14.926922)
    assert s["mean_ppl_base"] == pytest.approx(14.785293)
    assert s["ppl_ratio"] == pytest.approx(1.009579)
    assert s["kld_mean"] == pytest.approx(0.002842) and s["kld_mean_err"] == pytest.approx(0.000182)
    assert s["kld_max"] == pytest.approx(0.022870)
    assert s["kld_p99"] == pytest.approx(0.014777) and s["kld_p999"] == pytest.approx(0.021278)
    assert s["same_top_p"] == pytest.approx(96.825)
    rows = parse.kld_chunk_rows(out)
    assert [r["chunk"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["kld"] == pytest.approx(0.00459)
    assert parse.perplexity_final(out) is None  # KLD mode prints no "Final estimate"


def test_too_short_message(fixture_text):
    # Captured with -c 8192 on the 7,562-token default corpus. llama-perplexity exits 0 here,
    # so a run is judged by its output, not its exit code.
    err = fixture_text(P + "too-short-ctx8192.stderr")
    assert parse.corpus_too_short(err) == (
        "corpus too short: llama-perplexity needs at least 16384 tokens for a context of 8192")
    assert parse.perplexity_final(err) is None
