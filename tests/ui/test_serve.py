"""`python -m ui.serve`: the link that gives a browser the key, printed without starting anything."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each starts a Python that imports Streamlit: seconds on two cores

ROOT = Path(__file__).resolve().parents[2]


def _serve(runs_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, AGENTRL_RUNS_DIR=str(runs_dir))
    return subprocess.run([sys.executable, "-m", "ui.serve", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_link_names_the_port_and_the_runs_directorys_key(tmp_path):
    runs_dir = tmp_path / "runs"
    done = _serve(runs_dir, "--link", "--server.port", "8600")
    assert done.returncode == 0, done.stderr
    key = (runs_dir / ".dashboard-key").read_text().strip()
    assert done.stdout.strip() == f"http://127.0.0.1:8600/?key={key}"
    assert stat.S_IMODE((runs_dir / ".dashboard-key").stat().st_mode) == 0o600
    assert _serve(runs_dir, "--link", "--server.port=8601").stdout.strip().endswith(f":8601/?key={key}")  # kept


def test_a_bad_port_is_one_line(tmp_path):
    done = _serve(tmp_path / "runs", "--link", "--server.port", "eighty")
    assert done.returncode == 2 and done.stderr.strip() == "--server.port takes a port number"
