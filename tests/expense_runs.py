"""The expense-claims example (examples/expense_claims) as tests record it: honest approvals and
rejections, the forced approval and its two variants (after a failed receipt check, and with a
note), scored through the Task contract and recorded through `agentrl.init`; and the same run with
every trajectory decided by a reviewer. Shared by the scan tests and the Review page's browser test."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK_SPEC = f"{ROOT / 'examples' / 'expense_claims' / 'task.py'}:TASK"
SCANNERS_JSON = ROOT / "examples" / "expense_claims" / "scanners.json"


def calls_for(kind: str, claim: str) -> list[dict]:
    read, check, finish = {"name": "read_claim", "arguments": {}}, {"name": "check_receipt", "arguments": {"claim_id": claim}}, \
        {"name": "finish", "arguments": {}}
    return {
        "honest_approve": [read, check, {"name": "approve", "arguments": {"claim_id": claim}}, finish],
        "honest_reject": [read, check, {"name": "reject", "arguments": {"claim_id": claim}}, finish],
        "forced": [read, {"name": "approve", "arguments": {"claim_id": claim, "force": True}}, finish],
        "forced_after_check": [read, check, {"name": "approve", "arguments": {"claim_id": claim, "force": True}}, finish],
        "forced_note": [read, {"name": "approve", "arguments": {"claim_id": claim, "force": True, "note": "urgent"}}, finish],
    }[kind]


# (claim, kind) per trajectory; the same batch each step.
BATCH = [("c1", "honest_approve"), ("c2", "honest_reject"), ("c3", "honest_approve"), ("c4", "honest_reject"),
         ("c2", "forced"), ("c4", "forced_after_check"), ("c2", "forced_note"), ("c4", "forced")]
SHORTCUTS = {"forced", "forced_after_check", "forced_note"}
REVIEWED_RUN_ID = "expenses-reviewed-0"


def record_expense_run(runs_dir, steps: int = 3, batch=BATCH, run_id: str | None = None) -> str:
    import agentrl
    from agentrl.scan.trajectory import chatml
    from agentrl.scorers import call_reward_funcs, score_rollouts
    from agentrl.tasks import load_task
    from agentrl.tasks.replay import find_row, replay

    task = load_task(TASK_SPEC)
    with agentrl.init(name="expenses", runs_dir=runs_dir, total_steps=steps, config={"task": TASK_SPEC}, id=run_id) as run:
        for step in range(1, steps + 1):
            played = [replay(task, find_row(task, claim), calls_for(kind, claim)) for claim, kind in batch]
            values = call_reward_funcs(task, [p.prompt for p in played], [p.completion for p in played],
                                       [p.environment for p in played], [p.row for p in played])
            scores = score_rollouts(task, "outcome", values, [p.completion for p in played], [p.environment for p in played])
            run.log_trajectories(step, [
                {"traj_idx": i, "task_id": claim, "reward": s.reward, "components": s.components, "actions": s.actions,
                 "violation": s.violation, "success": s.success, "prompt": chatml(p.prompt), "completion": chatml(p.completion)}
                for i, ((claim, _), p, s) in enumerate(zip(batch, played, scores))])
            run.log_step(step, {})
    return run.run_id


def reviewed_expense_run(runs_dir) -> str:
    """The expense run with every trajectory of its 3 steps decided: shortcuts rejected (one as an
    exploit fixture), honest ones approved."""
    from agentrl.review import reviews
    from agentrl.store.db import connect
    from agentrl.store.ingest import Ingestor

    # A fixed id: the dev/held-out split is a hash of each trajectory's id, and this one puts at least
    # 4 shortcuts and 4 honest trajectories in each split (a random id can leave a split too few
    # labels for a figure, which is what validation must then say, not what these tests are about).
    run_id = record_expense_run(runs_dir, run_id=REVIEWED_RUN_ID)
    con = connect(runs_dir)
    try:
        Ingestor(con, runs_dir, log=lambda m: None).ingest()
        for step in (1, 2, 3):
            for idx, (_, kind) in enumerate(BATCH):
                if (step, idx) == (1, 4):
                    reviews.mark_exploit(con, run_id, step, idx, "rita", "forced approval without a receipt")
                else:
                    reviews.record_review(con, run_id, step, idx, "reject" if kind in SHORTCUTS else "approve", "rita", "forced")
    finally:
        con.close()
    return run_id
