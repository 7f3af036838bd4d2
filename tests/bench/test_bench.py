"""`python -m agentrl bench --quick` (agentrl/bench/): it runs through the real CLI, prints every
figure next to its target and writes its report, with the machine it ran on, where it is told."""

from __future__ import annotations

import pytest

from helpers import agentrl, ok


@pytest.mark.slow
def test_bench_quick_prints_every_figure_with_its_target_and_writes_the_report(tmp_path):
    out = tmp_path / "docs" / "benchmarks.md"
    result = ok(agentrl("bench", "--quick", "--out", out, "--work-dir", tmp_path / "work", timeout=300))
    text = out.read_text()
    for section in ("## Machine", "## Ingest at scale", "## Page queries", "## Checkpoints off the ingest path",
                    "## Compaction", "## The live tick as a run grows", "## The quick benchmarks of benchmarks/"):
        assert section in text, section
    for fact in ("- CPUs: ", "- memory: ", "- Python: ", "- DuckDB: ", "- date: "):
        assert fact in text, fact
    assert "rows/s" in text and "MiB ->" in text and "<= 100 ms p95" in text
    assert "benchmarks/ingest_rate.py" in text and "benchmarks/write_path.py" in text and "benchmarks/fleet.py" in text
    assert "Traceback" not in text and "(exit " not in text  # every script ran to its end
    assert "[target: <= 100 ms p95]" in result.stdout  # printed next to its target as it is measured
    assert "[target: >= 150,000 rows/s" in result.stdout
    assert not (tmp_path / "work").exists()  # the synthetic runs are removed


def test_bench_refuses_sizes_it_cannot_measure(tmp_path):
    result = agentrl("bench", "--runs", "1", "--out", tmp_path / "b.md")
    assert result.returncode == 2 and "--runs must be at least 2" in result.stderr
    assert not (tmp_path / "b.md").exists()
