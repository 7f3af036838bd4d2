"""Commands of the Review page, with its rules and its records: `gate` (each check with its
figure, `--json`), `review list|show|approve|reject|fixture`, `promote` and `rollback`.

CLI -> **review_commands** -> review.reviews, review.gate -> store. A decision is appended to the
same log the dashboard writes (who, when, why); a reject or a fixture needs a note, a failing gate
is promoted only with `--override REASON`, a rollback needs `--reason`. The store is written by
one process at a time: with the dashboard running, make the decision on the Review page.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json

from agentrl.cli.common import UsageError, add_runs_dir, runs_dir_of
from agentrl.record.rundir import DB_FILENAME


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name on this system: --reviewer is then required
        return ""


def _gate_options(parser: argparse.ArgumentParser) -> None:
    from agentrl.review.gate_settings import GateSettings  # not the gate itself: it loads pandas

    defaults = GateSettings()
    parser.add_argument("--min-success", type=float, default=defaults.min_success, help="held-out success at least this (0..1)")
    parser.add_argument("--last-steps", type=int, default=defaults.last_steps,
                        help=f"review coverage: the run's last this-many steps (default {defaults.last_steps}) ...")
    parser.add_argument("--min-share", type=float, default=defaults.min_share,
                        help=f"... where every behaviour holding this share of the top-reward quarter must be reviewed "
                             f"(default {defaults.min_share})")
    parser.add_argument("--min-scanner-recall", type=float, default=defaults.min_scanner_recall,
                        help=f"each scanner the run enforced reaches this held-out recall against reviews "
                             f"(default {defaults.min_scanner_recall})")


def _trajectory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", help="the run (see `python -m agentrl runs`)")
    parser.add_argument("trajectory", help="STEP/IDX, as `review list` and the Review page's URL name it (e.g. 30/8)")


def _decider(parser: argparse.ArgumentParser, flag: str = "--reviewer") -> None:
    parser.add_argument(flag, default=_user(), help="who decides; recorded with the decision (default: your user name)")


def register(sub: argparse._SubParsersAction) -> None:
    gate = sub.add_parser("gate", help="evaluate a run's promotion gate: each check with its figure")
    gate.add_argument("run_id", help="the run to evaluate")
    gate.add_argument("--json", action="store_true", help="print the report as JSON (checks and the reviewed sample)")
    _gate_options(gate)
    add_runs_dir(gate)
    gate.set_defaults(func=cmd_gate)

    review = sub.add_parser("review", help="review trajectories: list, show, approve, reject, fixture")
    actions = review.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="a run's trajectories by reward, violations first among equals")
    listing.add_argument("run_id", help="the run")
    listing.add_argument("--last", type=int, default=3, help="from the last N steps (default 3)")
    listing.add_argument("--top", type=int, default=10, help="how many (default 10)")
    listing.add_argument("--verdict", choices=["unreviewed", "approve", "reject"], help="only trajectories with this latest verdict")
    listing.add_argument("--violation", choices=["yes", "no"], help="only violating (yes) or clean (no) trajectories")
    listing.add_argument("--json", action="store_true", help="print the rows as JSON")
    add_runs_dir(listing)
    listing.set_defaults(func=cmd_review_list)

    show = actions.add_parser("show", help="one trajectory's transcript, reward components, flags and reviews")
    _trajectory(show)
    add_runs_dir(show)
    show.set_defaults(func=cmd_review_show)

    for verdict, helptext in (("approve", "approve a trajectory"), ("reject", "reject a trajectory (a note is required)")):
        decide = actions.add_parser(verdict, help=helptext)
        _trajectory(decide)
        _decider(decide)
        decide.add_argument("--note", help="why" + (" (required)" if verdict == "reject" else ""))
        if verdict == "reject":
            decide.add_argument("--fixture", action="store_true",
                                help="also store it as an exploit fixture: runs of its task launched later veto its behaviour")
        add_runs_dir(decide)
        decide.set_defaults(func=cmd_review_decide, verdict=verdict)

    fixture = actions.add_parser("fixture", help="reject a trajectory and store it as an exploit fixture that must never teach")
    _trajectory(fixture)
    _decider(fixture)
    fixture.add_argument("--note", required=True, help="what it exploits")
    add_runs_dir(fixture)
    fixture.set_defaults(func=cmd_review_fixture)

    promote = sub.add_parser("promote", help="promote a run whose gate passes: write its bundle, record the decision")
    promote.add_argument("run_id", help="the run to promote")
    _decider(promote, "--by")
    promote.add_argument("--override", help="promote a failing gate anyway, recording this reason")
    _gate_options(promote)
    add_runs_dir(promote)
    promote.set_defaults(func=cmd_promote)

    rollback = sub.add_parser("rollback", help="record that a promoted run is rolled back")
    rollback.add_argument("run_id", help="the promoted run")
    _decider(rollback, "--by")
    rollback.add_argument("--reason", required=True, help="why it is rolled back")
    add_runs_dir(rollback)
    rollback.set_defaults(func=cmd_rollback)


@contextlib.contextmanager
def _store(args: argparse.Namespace):
    """The store, with every pending chunk ingested first (the dashboard would have), closed after."""
    from agentrl.store.db import connect
    from agentrl.store.ingest import Ingestor

    runs_dir = runs_dir_of(args)
    if not (runs_dir / DB_FILENAME).is_file():
        raise UsageError(f"no store in {runs_dir}; run `python -m agentrl ingest --runs-dir {runs_dir}` first")
    con = connect(runs_dir)
    try:
        Ingestor(con, runs_dir, log=lambda message: None).ingest()
        yield con, runs_dir
    finally:
        con.close()


def _known_run(con, run_id: str) -> dict:
    from agentrl.store import queries

    run = queries.get_run(con, run_id)
    if run is None:
        raise UsageError(f"no run {run_id!r} in the store; see `python -m agentrl runs`")
    return run


def _key(text: str) -> tuple[int, int]:
    from agentrl.review.transcript import parse_key

    parsed = parse_key(text)
    if parsed is None:
        raise UsageError(f"trajectory {text!r}: give STEP/IDX, e.g. 30/8")
    return parsed


def _settings(args: argparse.Namespace):
    from agentrl.review.gate import GateError, GateSettings

    try:
        return GateSettings(min_success=args.min_success, last_steps=args.last_steps, min_share=args.min_share,
                            min_scanner_recall=args.min_scanner_recall)
    except GateError as error:
        raise UsageError(str(error)) from None


def _print_table(frame) -> None:
    print(frame.to_string(index=False) if not frame.empty else "(none)")


def _report_json(report) -> str:
    payload = json.loads(report.to_json())
    payload["run_id"] = report.run_id
    if report.sample is not None:
        payload["sample"] = json.loads(report.sample.assign(actions=report.sample["actions"].map(list)).to_json(orient="records"))
    return json.dumps(payload, indent=2, sort_keys=True)


def cmd_gate(args: argparse.Namespace) -> int:
    from agentrl.review import gate, reviews

    with _store(args) as (con, runs_dir):
        _known_run(con, args.run_id)
        try:
            report = gate.evaluate_gate(con, runs_dir, args.run_id, _settings(args))
        except gate.GateError as error:
            raise UsageError(str(error)) from None
        if args.json:
            print(_report_json(report))
        else:
            for check in report.checks:
                print(f"{'pass' if check.passed else 'FAIL'}  {check.name}: {check.figure}" + (f" ({check.detail})" if check.detail else ""))
            if report.sample is not None:
                print(f"\nthe gate's sample: one trajectory per high-reward behaviour ({len(report.sample)}):")
                _print_table(reviews.trajectory_table(report.sample))
            print(f"\ngate {'passes' if report.passed else 'fails'}; run state: {gate.current_state(con, args.run_id)}")
    return 0 if report.passed else 1


def cmd_review_list(args: argparse.Namespace) -> int:
    from agentrl.review import reviews
    from agentrl.store import queries

    if args.last < 1 or args.top < 1:
        raise UsageError("--last and --top must be at least 1")
    with _store(args) as (con, _):
        _known_run(con, args.run_id)
        _, last = queries.step_range(con, args.run_id)
        flags = {} if args.violation is None else {"violation": args.violation == "yes"}
        found = queries.find_trajectories(con, args.run_id, step_min=last - args.last + 1, step_max=last, flags=flags,
                                          verdict=args.verdict, limit=args.top)
        table = reviews.trajectory_table(found)
        if args.json:
            print(table.to_json(orient="records", indent=2))
        else:
            _print_table(table)
    return 0


def cmd_review_show(args: argparse.Namespace) -> int:
    from agentrl.review import transcript
    from agentrl.store import queries

    step, idx = _key(args.trajectory)
    with _store(args) as (con, _):
        _known_run(con, args.run_id)
        record = queries.trajectory(con, args.run_id, step, idx)
        if record is None:
            raise UsageError(f"run {args.run_id} has no trajectory {args.trajectory}")
        print(f"step {step}, trajectory {idx}: {record['task_id']} (amount {record['amount']}), reward {record['reward']:.3f}")
        print("flags: " + ", ".join(f"{f.name}={'yes' if f.value else 'no'}{' (!)' if f.bad else ''}" for f in transcript.flags(record)))
        _print_table(transcript.turn_table(record))
        if record.get("prompt") or record.get("completion"):
            print()
            for turn in transcript.chat_turns(record.get("prompt"), record.get("completion")).itertuples():
                print(f"{turn.role:>9}{'*' if turn.generated else ' '} {turn.message}")
        print()
        _print_table(transcript.components_table(record))
        if record.get("verifier_reason"):
            print(f"verifier: {record['verifier_reason']}")
        history = queries.review_history(con, args.run_id, step, idx)
        if not history.empty:
            print()
            _print_table(history)
    return 0


def _decide(args: argparse.Namespace, decision) -> object:
    """Run `decision(con, runs_dir)` on the store for a known run; a refused decision (a rule of
    the Review page) is one line and exit status 2."""
    from agentrl.review import gate, reviews

    with _store(args) as (con, runs_dir):
        _known_run(con, args.run_id)
        try:
            return decision(con, runs_dir)
        except (reviews.ReviewError, gate.GateError) as error:
            raise UsageError(str(error)) from None


def cmd_review_decide(args: argparse.Namespace) -> int:
    from agentrl.review import reviews

    if getattr(args, "fixture", False):
        if not (args.note or "").strip():
            raise UsageError("a reject needs a note saying what is wrong with the trajectory")
        return cmd_review_fixture(args)
    step, idx = _key(args.trajectory)
    review_id = _decide(args, lambda con, _: reviews.record_review(con, args.run_id, step, idx, args.verdict,
                                                                    args.reviewer, args.note))
    done = {"approve": "approved", "reject": "rejected"}[args.verdict]
    print(f"{done} step {step} #{idx} of {args.run_id} (review {review_id}, by {args.reviewer})")
    return 0


def cmd_review_fixture(args: argparse.Namespace) -> int:
    from agentrl.review import reviews

    step, idx = _key(args.trajectory)
    fixture_id = _decide(args, lambda con, _: reviews.mark_exploit(con, args.run_id, step, idx, args.reviewer, args.note))
    print(f"rejected step {step} #{idx} of {args.run_id} and stored it as exploit fixture {fixture_id} (by {args.reviewer})")
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    from agentrl.review import gate

    settings = _settings(args)
    promotion_id = _decide(args, lambda con, runs_dir: gate.promote(con, runs_dir, args.run_id, args.by, settings,
                                                                    args.override))
    print(f"promoted {args.run_id} (record {promotion_id}); bundle in {runs_dir_of(args) / args.run_id / gate.BUNDLE_DIR}")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from agentrl.review import gate

    promotion_id = _decide(args, lambda con, _: gate.rollback(con, args.run_id, args.by, args.reason))
    print(f"rolled back {args.run_id} (record {promotion_id})")
    return 0
