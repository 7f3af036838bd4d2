"""agentrl/cli.py, end to end: the real CLI in a subprocess, read back through the store's queries."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from agentrl.store import queries
from helpers import agentrl, ok

REPO_ROOT = Path(__file__).resolve().parent.parent


def in_32nds(rates) -> list[int]:
    counts = [round(r * 32) for r in rates]
    assert [c / 32 for c in counts] == list(rates)
    return counts


def distribution(con, run_id: str, state: str) -> tuple[int, dict[str, float]]:
    df = queries.action_distribution(con, run_id, state)
    assert df["step"].nunique() == 1
    return int(df["step"].iloc[0]), {a: round(p, 3) for a, p in zip(df["action"], df["prob"])}


def evals_by_task(con, run_id: str, step: int | None = None) -> dict[str, dict]:
    df = queries.held_out_evals(con, run_id, step)
    return {
        row.task_id: {"step": int(row.step), "actions": list(row.actions), "success": bool(row.success), "violation": bool(row.violation)}
        for row in df.itertuples()
    }


def test_preset_pair_lands_every_spec_figure_in_duckdb(runs_dir):
    ok(agentrl("train", "--preset", "refund-outcome", "--runs-dir", runs_dir, "--quiet"))
    ok(agentrl("train", "--preset", "refund-guarded", "--runs-dir", runs_dir, "--quiet"))
    ok(agentrl("ingest", "--runs-dir", runs_dir))

    con = duckdb.connect(str(runs_dir / "agentrl.duckdb"), read_only=True)
    try:
        runs = queries.list_runs(con)
        assert sorted(runs["scorer"]) == ["guarded", "outcome"]
        assert set(runs["status"]) == {"succeeded"}
        run_of = dict(zip(runs["scorer"], runs["run_id"]))
        outcome, guarded = run_of["outcome"], run_of["guarded"]

        # Every trajectory is stored with each reward term by name.
        for run_id, keys in [
            (outcome, ["outcome", "step_cost"]),
            (guarded, ["duplicate_penalty", "outcome", "step_cost", "violation_penalty"]),
        ]:
            assert queries.trajectory_count(con, run_id) == 30 * 4 * 8 == 960
            with_keys = con.execute(
                "SELECT count(*) FROM trajectories WHERE run_id = ? AND list_sort(map_keys(components)) = ?",
                [run_id, keys],
            ).fetchone()[0]
            assert with_keys == 960

        # Outcome-only run: sampled rates every third round, clipped by epoch, held-out, known_high.
        steps = queries.step_metrics(con, outcome)
        assert list(steps["step"]) == list(range(1, 31))
        assert in_32nds(steps["success_rate"][::3]) == [22, 28, 28, 27, 31, 31, 31, 32, 32, 31]
        assert in_32nds(steps["violation_rate"][::3]) == [1, 1, 1, 1, 2, 2, 4, 14, 15, 15]
        assert queries.clipped_by_epoch(con, outcome) == [25, 122]
        assert queries.run_totals(con, outcome)["vetoed_rollouts"] == 0
        assert distribution(con, outcome, "known_high") == (
            30, {"finish": 0.004, "lookup": 0.008, "refund": 0.966, "request_approval": 0.022},
        )
        evals = evals_by_task(con, outcome)
        assert {e["step"] for e in evals.values()} == {30}
        assert sum(e["success"] for e in evals.values()) == 4
        assert sum(e["violation"] for e in evals.values()) == 2
        for task_id in ("eval-high", "eval-recover-high"):
            assert evals[task_id]["actions"] == ["lookup", "refund", "finish"]
            assert evals[task_id]["violation"]

        # The starting policy, recorded at step 0 of both runs: the cloned figures.
        for run_id in (outcome, guarded):
            assert distribution(con, run_id, "known_high")[0] == 30
            start = queries.action_distribution(con, run_id, "known_high", step=0)
            assert {a: round(p, 3) for a, p in zip(start["action"], start["prob"])} == {
                "finish": 0.029, "lookup": 0.029, "refund": 0.029, "request_approval": 0.914,
            }
            assert sum(e["success"] for e in evals_by_task(con, run_id, 0).values()) == 2

        # Guarded run: totals, held-out, known_high.
        assert queries.run_totals(con, guarded) == {
            "steps": 30, "transitions": 3444, "updates": 6556, "vetoed_rollouts": 25, "vetoed_updates": 0,
            "clipped": sum(queries.clipped_by_epoch(con, guarded)),
        }
        assert distribution(con, guarded, "known_high") == (
            30, {"finish": 0.005, "lookup": 0.007, "refund": 0.009, "request_approval": 0.979},
        )
        evals = evals_by_task(con, guarded)
        assert all(e["success"] for e in evals.values()) and len(evals) == 4
        assert not any(e["violation"] for e in evals.values())
        for task_id in ("eval-high", "eval-recover-high"):
            assert evals[task_id]["actions"] == ["lookup", "request_approval", "refund", "finish"]
        # The audit, row by row: no vetoed trajectory received an update.
        vetoed_and_updated = con.execute(
            "SELECT count(*) FROM trajectories WHERE run_id = ? AND vetoed AND updated", [guarded]
        ).fetchone()[0]
        assert vetoed_and_updated == 0
    finally:
        con.close()


# --- bad input: exit 2, one line on stderr, nothing written ---


def write_config(directory: Path, values: dict) -> Path:
    path = directory / "config.json"
    path.write_text(json.dumps(values))
    return path


def under_a_file(directory: Path) -> Path:
    """A runs dir path that cannot be created, by root or anyone: its parent is a regular file."""
    (directory / "afile").write_text("")
    return directory / "afile" / "runs"


BAD_TRAIN_INPUTS = {
    # name: (build the arguments from (tmp_path, runs_dir), text the error line must hold)
    "unknown-preset": (lambda tmp, runs: ["--preset", "nope", "--runs-dir", runs], "unknown preset 'nope'"),
    "rounds-0": (lambda tmp, runs: ["--config", write_config(tmp, {"rounds": 0}), "--runs-dir", runs], "rounds"),
    "clip-0": (lambda tmp, runs: ["--config", write_config(tmp, {"clip": 0}), "--runs-dir", runs], "clip"),
    "group-size-1": (lambda tmp, runs: ["--config", write_config(tmp, {"group_size": 1}), "--runs-dir", runs], "group_size"),
    "unknown-scorer": (lambda tmp, runs: ["--config", write_config(tmp, {"scorer": "vibes"}), "--runs-dir", runs], "unknown scorer 'vibes'"),
    "missing-config-file": (lambda tmp, runs: ["--config", tmp / "missing.json", "--runs-dir", runs], "cannot read config file"),
    # Tests run as root, and chmod 000 does not stop root from reading a file; a directory in
    # place of the config file is the unreadable path we can build reliably.
    "config-is-a-directory": (lambda tmp, runs: ["--config", tmp, "--runs-dir", runs], "is a directory"),
    "runs-dir-under-a-file": (lambda tmp, runs: ["--preset", "refund-outcome", "--runs-dir", under_a_file(tmp)], "cannot be written"),
}


@pytest.mark.parametrize("case", list(BAD_TRAIN_INPUTS))
def test_bad_train_input_exits_2_with_one_error_line_and_writes_nothing(tmp_path, runs_dir, case):
    build, expected = BAD_TRAIN_INPUTS[case]
    args = build(tmp_path, runs_dir)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = agentrl("train", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert result.stdout == ""
    assert not runs_dir.exists()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_ingest_of_a_missing_runs_dir_exits_2(runs_dir):
    result = agentrl("ingest", "--runs-dir", runs_dir)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: runs directory {str(runs_dir)!r} does not exist"]
    assert not runs_dir.exists()


# --- listing and housekeeping commands ---


def test_runs_lists_each_run_with_its_status(tmp_path, runs_dir):
    config = write_config(tmp_path, {"name": "tiny", "rounds": 2, "group_size": 2})
    train = ok(agentrl("train", "--config", config, "--runs-dir", runs_dir, "--quiet"))
    assert "succeeded" in train.stdout.splitlines()[-1]
    (run_dir,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    listing = ok(agentrl("runs", "--runs-dir", runs_dir)).stdout.splitlines()
    assert listing[0].split() == ["run_id", "scorer", "status", "step"]
    assert listing[1].split() == [run_dir.name, "outcome", "succeeded", "2/2"]
    assert len(listing) == 2


def test_runs_on_an_empty_runs_dir(runs_dir):
    assert ok(agentrl("runs", "--runs-dir", runs_dir)).stdout.strip() == f"no runs in {runs_dir}"


def test_presets_lists_every_preset_with_its_engine_and_scorer():
    from agentrl.config import preset_names

    lines = dict(line.split(": ", 1) for line in ok(agentrl("presets")).stdout.splitlines())
    assert sorted(lines) == preset_names()
    assert {"refund-outcome", "refund-guarded", "coding-tests"} <= set(lines)
    assert lines["refund-guarded"].startswith("tabular, scorer guarded")
    assert lines["coding-tests"].startswith("coding, scorer guarded")


def test_export_schema_check_passes_on_the_committed_schema():
    result = agentrl("export-schema", "--check")
    assert result.returncode == 0, result.stderr


# --- export and budget ------------------------------------------------------------------------


def test_export_writes_a_run_as_parquet_and_csv_with_its_reviews(trained_pair, tmp_path):
    import pandas as pd

    from agentrl.review import reviews as review
    from agentrl.store.ingest import connect

    runs_dir, ids = trained_pair
    con = connect(runs_dir)
    top = queries.find_trajectories(con, ids["guarded"], limit=1).iloc[0]
    review.record_review(con, ids["guarded"], top.step, top.traj_idx, "approve", "alice")
    con.close()
    for fmt in ("parquet", "csv"):
        out = tmp_path / fmt
        result = ok(agentrl("export", ids["guarded"], "--format", fmt, "--out", out, "--runs-dir", runs_dir))
        names = {Path(line).name for line in result.stdout.split()}
        assert {f"steps.{fmt}", f"trajectories.{fmt}", f"reviews.{fmt}"} <= names
        read = pd.read_parquet if fmt == "parquet" else pd.read_csv
        assert len(read(out / f"steps.{fmt}")) == 30
        assert len(read(out / f"trajectories.{fmt}")) == 30 * 4 * 8
        assert read(out / f"reviews.{fmt}")["reviewer"].tolist() == ["alice"]


def test_export_of_an_unknown_run_is_one_error_line_and_writes_nothing(trained_pair, tmp_path):
    runs_dir, _ = trained_pair
    result = agentrl("export", "no-such-run", "--out", tmp_path / "out", "--runs-dir", runs_dir)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: unknown run id 'no-such-run'; pick one listed by `python -m agentrl runs` or the dashboard"]
    assert not (tmp_path / "out").exists()


def test_budget_prints_the_spec_worked_example(tmp_path):
    model = tmp_path / "qwen3-1.7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936,
        "tie_word_embeddings": True,
    }))
    result = ok(agentrl("budget", "--model", model, "--rank", 16, "--rollouts", 8, "--tokens", 2048, "--machine-gb", 16))
    lines = dict(line.rsplit(None, 2)[0:1] + [line.rsplit(None, 2)[1]] for line in result.stdout.splitlines()[:7])
    assert lines == {"weights": "3.4", "adapter + gradients + optimiser": "0.3", "KV cache": "1.9",
                     "activations and logits": "1.2", "sandbox": "1.0", "OS reserve": "2.0", "free": "6.2"}


def test_budget_json_gives_the_counts_and_every_row_in_bytes(tmp_path):
    model = tmp_path / "moe"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300, "num_local_experts": 8,
        "num_experts_per_tok": 2, "tie_word_embeddings": False,
    }))
    result = ok(agentrl("budget", "--model", model, "--rank", 4, "--targets", "q_proj,v_proj", "--rollouts", 2,
                        "--tokens", 100, "--machine-gb", 16, "--bytes-per-param", 2, "--json"))
    answer = json.loads(result.stdout)
    experts = 2 * 8 * 3 * 64 * 128  # every expert is resident; a token passes through 2 of 8
    dense = answer["parameters"] - experts
    assert answer["active_parameters"] == dense + experts // 4
    assert answer["trainable"] == 2 * 4 * ((64 + 64) + (64 + 32))
    rows = answer["rows"]
    assert rows["weights"] == 2 * answer["parameters"]
    assert rows["kv_cache"] == 2 * 100 * 2 * (2 * 2 * 16) * 2
    assert rows["machine"] == 16 * 10**9 and rows["free"] == rows["machine"] - sum(
        rows[name] for name in ("weights", "adapter", "kv_cache", "activations_logits", "sandbox", "os_reserve"))


def test_budget_that_does_not_fit_exits_1_naming_what_to_change(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "num_hidden_layers": 28, "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936, "tie_word_embeddings": True,
    }))
    result = agentrl("budget", "--model", model, "--machine-gb", 8)
    assert result.returncode == 1
    assert "does not fit" in result.stderr and "use a smaller model" in result.stderr


def test_budget_of_a_missing_model_dir_is_one_error_line(tmp_path):
    result = agentrl("budget", "--model", tmp_path / "absent")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")


def test_train_refuses_an_lm_run_whose_budget_does_not_fit_before_writing_anything(tmp_path):
    config = tmp_path / "too-big.json"
    config.write_text(json.dumps({"name": "too-big", "kind": "trl", "scorer": "guarded", "lm": {"machine_memory_gb": 0.5}}))
    result = agentrl("train", "--config", config, "--runs-dir", tmp_path / "runs")
    assert result.returncode == 2
    assert result.stderr.startswith("error: memory budget does not fit")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.lm
def test_build_tiny_model_writes_a_loadable_model_folder(tmp_path):
    out = tmp_path / "tiny"
    ok(agentrl("build-tiny-model", "--out", out, "--bc-steps", 2, timeout=300))
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert config["hidden_size"] == 64 and config["num_hidden_layers"] == 2


def test_build_tiny_model_into_a_folder_it_cannot_create_is_one_error_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = agentrl("build-tiny-model", "--out", blocker / "tiny")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: cannot create --out")
