"""Sandbox users (agentrl/sandbox/users.py): one slot lock per machine at a fixed path, whatever
TMPDIR says, so concurrent trainers never share a sandbox uid; a trainer that finds every slot
taken fails in one line after its deadline instead of waiting forever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentrl.sandbox.users import SLOT_LOCK_DIRS, SlotsBusy, acquire_slot, release_slot, slot_lock_dir

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox slots are handed out to root's runs only")
CHECKOUT = Path(__file__).resolve().parents[2]


@needs_root
def test_the_slot_lock_directory_is_fixed_whatever_tmpdir_says(tmp_path, monkeypatch):
    before = slot_lock_dir()
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() would read TMPDIR afresh
    assert slot_lock_dir() == before
    assert str(before) in SLOT_LOCK_DIRS
    assert not str(before).startswith(str(tmp_path))


def test_a_trainer_that_finds_every_slot_taken_fails_in_one_line_after_its_deadline(tmp_path):
    held = [acquire_slot(lock_dir=tmp_path, slots=2) for _ in range(2)]
    try:
        with pytest.raises(SlotsBusy) as caught:
            acquire_slot(0.2, lock_dir=tmp_path, slots=2)
        assert "every one of the 2 sandbox slots" in str(caught.value)
        assert "\n" not in str(caught.value)
    finally:
        for slot in held:
            release_slot(slot)
    release_slot(acquire_slot(0.2, lock_dir=tmp_path, slots=2))  # free again: taken at once


TRAINER = textwrap.dedent("""
    import json, sys
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from agentrl.sandbox import SandboxLimits, run_tests

    workspace = Path(sys.argv[1])
    fixed = {"calc.py": "def add(a, b):\\n    return a + b\\n"}

    def attempt(_):
        result = run_tests(workspace, fixed, [sys.executable, "tests/test_calc.py"], ["tests"],
                           SandboxLimits(timeout_s=60, cpu_s=30))
        return result.reason

    with ThreadPoolExecutor(3) as pool:
        print(json.dumps(list(pool.map(attempt, range(6)))))
""")


@needs_root
@pytest.mark.slow
def test_two_trainers_with_different_tmpdirs_at_once_never_lose_a_run(tmp_path):
    workspace = tmp_path / "repo"
    (workspace / "tests").mkdir(parents=True)
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    # Long enough for the two trainers' runs to overlap; each run's clean-up kills every process
    # of its sandbox uid, so a shared uid would kill the other trainer's test mid-run.
    (workspace / "tests" / "test_calc.py").write_text(
        "import sys, time\nsys.path.insert(0, '.')\nfrom calc import add\ntime.sleep(1.0)\nassert add(2, 3) == 5\n")
    trainers = []
    for name in ("a", "b"):
        tmpdir = tmp_path / f"tmp-{name}"
        tmpdir.mkdir(mode=0o711)
        env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(CHECKOUT)}
        trainers.append(subprocess.Popen([sys.executable, "-c", TRAINER, str(workspace)], env=env, cwd=CHECKOUT,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outcomes = []
    for trainer in trainers:
        out, err = trainer.communicate(timeout=300)
        assert trainer.returncode == 0, err[-2000:]
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    assert outcomes == [["tests passed"] * 6] * 2


@needs_root
def test_a_slot_an_earlier_version_holds_in_tmp_is_not_handed_out(tmp_path, monkeypatch):
    # an older trainer locks its slots under /tmp (the default TMPDIR): those slots stay its own
    import fcntl

    from agentrl.sandbox import users

    monkeypatch.setattr(users, "LEGACY_SLOT_LOCK_DIR", str(tmp_path))
    held = []
    for slot in range(users.SANDBOX_SLOTS):
        fd = os.open(tmp_path / f"{slot}.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    try:
        with pytest.raises(SlotsBusy):
            acquire_slot(0.2)
    finally:
        for fd in held[1:]:
            os.close(fd)
    slot = acquire_slot(0.2)
    try:
        assert slot.uid != users.SANDBOX_UID_BASE  # slot 0 is still the older trainer's
    finally:
        release_slot(slot)
        os.close(held[0])
