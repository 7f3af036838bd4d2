"""The promotion gate: the checks a run must pass before its policy is promoted, the bundle a
promotion writes, and the append-only promotion record (rollback included).

Review page / CLI -> **gate** -> queries, review, store. Every check carries the figure it was
decided on, and the figures are saved with the decision, so a promotion can be audited later
without re-running anything. A promotion or rollback is also appended to the decisions log on
disk (`agentrl.store.decisions`), so a rebuilt store keeps it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from agentrl.analysis import behaviours
from agentrl.engines.registry import PolicySupport, get_engine, resolve_entry
from agentrl.monitor.kept import kept_onset
from agentrl.store import decisions, queries
from agentrl.review.gate_settings import GateError, GateSettings  # noqa: F401 - re-exported
from agentrl.review.reviews import ReviewError, check_fixtures, fixture_episode, load_run_task
from agentrl.record.rundir import utc_now
from agentrl.scorers import SCORER_VERSION

BUNDLE_DIR = "bundle"


@dataclass(frozen=True)
class GateCheck:
    name: str
    passed: bool
    figure: str  # the number the check was decided on, as a person reads it
    detail: str = ""


@dataclass(frozen=True)
class GateReport:
    run_id: str
    checks: list[GateCheck] = field(default_factory=list)
    # The review coverage's sample: one trajectory per high-reward behaviour (step, traj_idx,
    # task_id, actions, reward, violation, eligible, verdict, behaviour, top_share, reviewed); None
    # when the run has no policy to review.
    sample: pd.DataFrame | None = field(default=None, compare=False)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if not c.passed]

    def to_json(self) -> str:
        sample = [] if self.sample is None else [
            {"step": int(r.step), "traj_idx": int(r.traj_idx), "verdict": r.verdict, "behaviour": r.behaviour}
            for r in self.sample.itertuples()]
        return json.dumps({"passed": self.passed, "checks": [asdict(c) for c in self.checks], "sample": sample},
                          sort_keys=True)


def checks_table(report: GateReport) -> pd.DataFrame:
    """The report as a table: check, result ('pass' or 'FAIL'), figure, detail."""
    return pd.DataFrame([{"check": c.name, "result": "pass" if c.passed else "FAIL", "figure": c.figure,
                          "detail": c.detail} for c in report.checks], columns=["check", "result", "figure", "detail"])


def probe_rows(con, run: dict) -> list[dict]:
    """The exploit probes of the run's task (its Task contract's `exploit_probes`) plus the dataset
    row of every stored fixture of that task, as `fixture-N:<task_id>` (for a policy the gate
    replays itself: the tabular engine's)."""
    spec, task = load_run_task(run)
    rows = [dict(row) for row in task.exploit_probes()]
    seen = {str(r.get("task_id")) for r in rows}
    for _, f in queries.all_fixtures(con, task=spec).iterrows():
        row, _ = fixture_episode(f)
        row = dict(row, task_id=f"fixture-{int(f['fixture_id'])}:{f['task_id']}")
        if row["task_id"] not in seen:
            rows.append(row)
            seen.add(row["task_id"])
    return rows


def _probe_check(con, run: dict, run_dir: Path, policy: PolicySupport) -> GateCheck:
    name = "zero violations on exploit probes"
    if policy.replay_probes is not None:
        artifact = run_dir / policy.artifact
        if not artifact.exists():
            return GateCheck(name, False, "no final policy", f"{artifact} is missing (did the run finish?)")
        replay = resolve_entry(policy.replay_probes)
        results = replay(run_dir, json.loads(run["config"]), probe_rows(con, run))
        bad = [r for r in results if r.violation]
        return GateCheck(name, not bad, f"{len(bad)} of {len(results)} probes violate",
                         "; ".join(f"{r.task_id}: {', '.join(r.actions)}" for r in bad))
    # The run played the built-in probes itself at its end (evals split 'probe').
    probes = queries.probe_evals(con, run["run_id"])
    if probes.empty:
        return GateCheck(name, False, "no probe results", "the run recorded no exploit-probe evaluation")
    bad = probes[probes["violation"]]
    return GateCheck(name, bad.empty, f"{len(bad)} of {len(probes)} probes violate",
                     "; ".join(f"{r.task_id}: {', '.join(r.actions)}" for r in bad.itertuples()))


def _fixture_check(con, run: dict) -> GateCheck:
    """Every fixture of the run's task, replayed through the task, is vetoed by the run's scorer
    (with the fixtures its config lists)."""
    name = f"scorer '{run['scorer']}' rejects every exploit fixture"
    try:
        fixtures = check_fixtures(con, run["scorer"], run)
    except ReviewError as error:
        return GateCheck(name, False, "fixtures not replayed", str(error))
    admitted = [f for f in fixtures if f.eligible]
    return GateCheck(name, not admitted, f"{len(admitted)} of {len(fixtures)} fixtures admitted as eligible",
                     "; ".join(f"fixture {f.fixture_id} ({f.task_id}: {f.behaviour or ', '.join(f.actions)})" for f in admitted))


def review_coverage(con, run_id: str, settings: GateSettings) -> tuple[GateCheck, pd.DataFrame]:
    """Review by behaviour: every behaviour holding at least `min_share` of the top-reward quarter
    of the last K steps (`agentrl.analysis.behaviours`) has a reviewed trajectory, and no behaviour
    with a rejected trajectory is still let teach by the run's scorer (eligible, not vetoed, in the
    window). The sample is one trajectory per high-reward behaviour (a reviewed one where there is one)."""
    table = behaviours.behaviour_table(con, run_id, last=settings.last_steps, min_share=settings.min_share)
    high = table[table["high_reward"]]
    unreviewed = high[~high["reviewed"]]
    taught_rejected = table[(table["rejected"] > 0) & (table["taught"] > 0)]
    name = (f"every high-reward behaviour reviewed (≥ {settings.min_share:.0%} of the top-reward quarter, "
            f"last {settings.last_steps} steps), none rejected still taught")
    figure = (f"{len(high) - len(unreviewed)} of {len(high)} high-reward behaviours reviewed, "
              f"{len(taught_rejected)} rejected behaviours taught")
    detail = "; ".join([f"unreviewed: {b}" for b in unreviewed["behaviour"]]
                       + [f"rejected but taught: {b}" for b in taught_rejected["behaviour"]])
    since = queries.last_step(con, run_id) - settings.last_steps
    sample = queries.behaviour_representatives(con, run_id, list(high["behaviour"]), step_min=since + 1,
                                               reviewed_anywhere=True) if len(high) \
        else pd.DataFrame(columns=["step", "traj_idx", "task_id", "actions", "reward", "violation", "eligible", "verdict",
                                   "behaviour"])
    if len(sample):
        sample = sample.merge(high[["behaviour", "top_share", "reviewed"]], on="behaviour", how="left") \
            .sort_values(["top_share", "behaviour"], ascending=[False, True]).reset_index(drop=True)
    passed = len(high) > 0 and unreviewed.empty and taught_rejected.empty
    return GateCheck(name, passed, figure, detail), sample


def _onset_on(cursor, run_id: str):
    try:
        return kept_onset(cursor, run_id)
    finally:
        cursor.close()


def evaluate_gate(con, runs_dir: Path, run_id: str, settings: GateSettings = GateSettings()) -> GateReport:
    """Every gate check of one run, each with its figure. The "no hacking onset" check is read on a
    cursor of its own beside the others: computed, it is the slowest of them (on the bench store
    about 100 ms, the rest together about 55 ms). Its thread ends with the call."""
    from concurrent.futures import ThreadPoolExecutor

    run = queries.get_run(con, run_id)
    if run is None:
        raise GateError(f"no run {run_id!r} in the store")
    engine = get_engine(run["kind"])
    if engine.policy is None:
        return GateReport(run_id, [GateCheck("has a policy", False, "scoring run",
                                             f"a {engine.kind} run trains no policy; there is nothing to promote")])
    with ThreadPoolExecutor(1, thread_name_prefix="agentrl-gate-onset") as onset_reader:
        onset_read = onset_reader.submit(_onset_on, con.cursor(), run_id)
        try:
            checks, sample = _checks_beside_the_onset(con, runs_dir, run, engine, settings)
        finally:
            onset = onset_read.result()
    checks.append(GateCheck("no hacking onset", onset is None, "none" if onset is None else f"onset at step {onset.step}",
                            "" if onset is None else onset.message))
    return GateReport(run_id, checks, sample=sample)


def _checks_beside_the_onset(con, runs_dir: Path, run: dict, engine, settings: GateSettings) -> tuple[list[GateCheck], object]:
    run_id = run["run_id"]
    checks: list[GateCheck] = []
    if run["status"] != "succeeded":
        checks.append(GateCheck("run finished", False, run["status"], "only a run that finished can be promoted"))

    held_out = queries.held_out_evals(con, run_id)
    n = len(held_out)
    successes = int(held_out["success"].sum()) if n else 0
    rate = successes / n if n else 0.0
    checks.append(GateCheck(f"held-out success ≥ {settings.min_success:.0%}", n > 0 and rate >= settings.min_success,
                            f"{successes} of {n} tasks ({rate:.0%})" if n else "no held-out evaluation"))
    violating = held_out[held_out["violation"]] if n else held_out
    checks.append(GateCheck("zero held-out violations", n > 0 and violating.empty,
                            f"{len(violating)} of {n} tasks violate",
                            "; ".join(f"{r.task_id}: {', '.join(r.actions)}" for r in violating.itertuples())))

    checks.append(_probe_check(con, run, Path(runs_dir) / run_id, engine.policy))

    checks.append(_fixture_check(con, run))

    coverage, sample = review_coverage(con, run_id, settings)
    checks.append(coverage)

    totals = queries.run_totals(con, run_id)
    checks.append(GateCheck("vetoed-updates audit counter is 0", totals["vetoed_updates"] == 0,
                            f"{totals['vetoed_updates']} vetoed updates"))

    from agentrl.scan.gating import scanner_recall_checks  # each enforced scanner's held-out recall

    checks += [GateCheck(c.name, c.passed, c.figure, c.detail) for c in scanner_recall_checks(con, run, settings.min_scanner_recall)]
    return checks, sample


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def config_hash(config_json: str) -> str:
    """Hash of the config's canonical JSON (sorted keys), so equal configs hash equal."""
    canonical = json.dumps(json.loads(config_json), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Bundle:
    path: Path
    content_hash: str
    files: dict[str, str]  # relative path -> sha256


def write_bundle(con, runs_dir: Path, run_id: str, report: GateReport) -> Bundle:
    """Write `runs/<run_id>/bundle/`: the policy, the config, scorer name and version, the config
    hash, the evaluation evidence and a content hash over every file. Written beside and then
    swapped in, so a reader never sees half a bundle."""
    run = queries.get_run(con, run_id)
    run_dir = Path(runs_dir) / run_id
    final = run_dir / BUNDLE_DIR
    staging = run_dir / f".{BUNDLE_DIR}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    policy = get_engine(run["kind"]).policy
    artifact = run_dir / policy.artifact if policy is not None else None
    if artifact is not None and artifact.is_file():
        shutil.copy2(artifact, staging / artifact.name)
    elif artifact is not None and artifact.is_dir():
        shutil.copytree(artifact, staging / artifact.name)
    else:
        shutil.rmtree(staging)
        what = artifact.name if artifact is not None else "a policy"
        raise GateError(f"run {run_id} saved no policy ({what}); nothing to promote")
    (staging / "config.json").write_text(json.dumps(json.loads(run["config"]), indent=2, sort_keys=True) + "\n")
    evidence = {
        "held_out": queries.held_out_evals(con, run_id).assign(actions=lambda d: d["actions"].map(list)).to_dict("records"),
        "totals": queries.run_totals(con, run_id),
        "gate": json.loads(report.to_json()),
    }
    (staging / "evidence.json").write_text(json.dumps(evidence, indent=2, sort_keys=True, default=str) + "\n")
    files = {str(p.relative_to(staging)): _sha256(p) for p in sorted(staging.rglob("*")) if p.is_file()}
    content_hash = hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in sorted(files.items())).encode()).hexdigest()
    manifest = {
        "run_id": run_id, "kind": run["kind"], "scorer": run["scorer"], "scorer_version": SCORER_VERSION,
        "config_hash": config_hash(run["config"]), "files": files, "content_hash": content_hash,
        "written_at": utc_now().isoformat() + "Z",
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    return Bundle(final, content_hash, files)


# A promotion or rollback checks the run's state, writes the bundle and records the decision as
# one step: two browser sessions pressing Promote at once (threads of the dashboard) both found the
# run not promoted, wrote the bundle through one staging folder (crashing each other) and recorded
# two promotions. One lock for the process is enough: only one process holds the store to write.
_promotion_decisions = threading.RLock()


def current_state(con, run_id: str) -> str:
    """'promoted' when the run's latest decision is a promotion, else 'not promoted'."""
    history = queries.promotions(con, run_id)
    return "promoted" if not history.empty and history.iloc[-1]["decision"] == "promote" else "not promoted"


def promote(con, runs_dir: Path, run_id: str, decided_by: str, settings: GateSettings = GateSettings(),
            override_reason: str | None = None) -> int:
    """Promote a run: re-check the gate, write the bundle, append the record. A failing gate is
    refused unless `override_reason` says why it is promoted anyway."""
    decided_by = (decided_by or "").strip()
    if not decided_by:
        raise GateError("enter your name; every promotion is recorded with who decided it")
    report = evaluate_gate(con, runs_dir, run_id, settings)
    override_reason = (override_reason or "").strip() or None
    if not report.passed and override_reason is None:
        names = ", ".join(c.name for c in report.failed)
        raise GateError(f"the gate fails ({names}); promote only with a recorded reason for overriding it")
    with _promotion_decisions:
        if current_state(con, run_id) == "promoted":
            raise GateError(f"run {run_id} is already promoted; roll it back first to promote it again")
        bundle = write_bundle(con, runs_dir, run_id, report)
        with decisions.recording(con) as written:  # the store and the decisions log, together
            promotion_id = queries.append_promotion(
                con, run_id, "promote", decided_by, utc_now(), report.passed,
                None if report.passed else override_reason, None, str(bundle.path), bundle.content_hash, report.to_json(),
            )
            written.append(("promotions", promotion_id))
    return promotion_id


def rollback(con, run_id: str, decided_by: str, reason: str) -> int:
    """Record that a promoted run is rolled back (the bundle stays on disk as evidence)."""
    decided_by = (decided_by or "").strip()
    reason = (reason or "").strip()
    if not decided_by:
        raise GateError("enter your name; every rollback is recorded with who decided it")
    if not reason:
        raise GateError("a rollback needs a reason")
    with _promotion_decisions:
        if current_state(con, run_id) != "promoted":
            raise GateError(f"run {run_id} is not promoted; there is nothing to roll back")
        with decisions.recording(con) as written:
            promotion_id = queries.append_promotion(con, run_id, "rollback", decided_by, utc_now(), None, None, reason,
                                                    None, None, None)
            written.append(("promotions", promotion_id))
    return promotion_id
