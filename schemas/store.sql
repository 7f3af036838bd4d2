-- The DuckDB store of agentrl: one file, runs/agentrl.duckdb, written only by the dashboard
-- process (or `python -m agentrl ingest` when no dashboard runs). Applied at every connect;
-- every statement is idempotent. Column names are the storage contract of DESIGN.md.

CREATE TABLE IF NOT EXISTS runs (
    run_id      VARCHAR PRIMARY KEY,
    name        VARCHAR NOT NULL,
    kind        VARCHAR NOT NULL,          -- the engine (agentrl.engines.registry): 'tabular', 'trl', 'coding'
    scorer      VARCHAR NOT NULL,
    status      VARCHAR NOT NULL,          -- queued, running, succeeded, failed, cancelled
    config      JSON NOT NULL,             -- the full validated run config
    created_at  TIMESTAMP NOT NULL,        -- UTC
    started_at  TIMESTAMP,
    ended_at    TIMESTAMP,
    error       VARCHAR,
    pid         BIGINT,
    total_steps INTEGER,
    run_dir     VARCHAR,
    record_schema_version INTEGER          -- format of the run's records (agentrl.record.rows)
);
-- Stores made before the column existed get it here (idempotent).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS record_schema_version INTEGER;
-- What a script gave agentrl.init (wandb's and Trackio's words): a project, tags, notes, and the
-- summary it kept (the latest value of each metric, and what it set).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS project VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS tags VARCHAR[];
ALTER TABLE runs ADD COLUMN IF NOT EXISTS notes VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS summary JSON;
-- The runs one click on Launch started together (a pair, N seeds, or N seeds of a pair) share an
-- id: Compare's default is the newest such launch, never an unrelated run with an equal config.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS launch_group VARCHAR;

-- One row per training round / optimiser step, numbered from 1.
CREATE TABLE IF NOT EXISTS steps (
    run_id           VARCHAR NOT NULL,
    step             INTEGER NOT NULL,
    ts               TIMESTAMP NOT NULL,   -- UTC, when the step finished
    elapsed_s        DOUBLE,               -- seconds since the run started training
    success_rate     DOUBLE,
    violation_rate   DOUBLE,
    duplicate_rate   DOUBLE,
    mean_reward      DOUBLE,
    vetoed           INTEGER,              -- vetoed rollouts this step
    vetoed_updates   INTEGER,              -- audit: vetoed trajectories that got an update (must be 0)
    updates          INTEGER,
    clipped          INTEGER,
    clipped_by_epoch INTEGER[],
    transitions      INTEGER,
    metrics          MAP(VARCHAR, DOUBLE)  -- engine-specific extras (TRL's kl, entropy, ...)
);

-- One row per sampled trajectory.
CREATE TABLE IF NOT EXISTS trajectories (
    run_id           VARCHAR NOT NULL,
    step             INTEGER NOT NULL,
    traj_idx         INTEGER NOT NULL,     -- position in the step's batch
    task_id          VARCHAR NOT NULL,
    amount           INTEGER,
    states           VARCHAR[],
    actions          VARCHAR[],
    behavior_logps   DOUBLE[],             -- log-probability of each action when it was sampled
    advantages       DOUBLE[],             -- anchor-group advantage of each turn
    reward           DOUBLE,
    components       MAP(VARCHAR, DOUBLE), -- every reward term by name
    success          BOOLEAN,
    violation        BOOLEAN,
    duplicate_effect BOOLEAN,
    eligible         BOOLEAN,
    vetoed           BOOLEAN,
    updated          BOOLEAN,              -- received at least one update
    prompt           VARCHAR,              -- LM runs only
    completion       VARCHAR,              -- LM runs only
    verifier_reason  VARCHAR,              -- why the verifier scored it so (coding runs: the sandbox)
    extras           MAP(VARCHAR, VARCHAR), -- further per-completion columns a trainer logged (TRL's log_extra)
    behaviour        VARCHAR               -- what it did (agentrl.record.behaviour): filled in at ingest when a row has none
);
-- Stores made before the columns existed get them here (idempotent).
ALTER TABLE trajectories ADD COLUMN IF NOT EXISTS verifier_reason VARCHAR;
ALTER TABLE trajectories ADD COLUMN IF NOT EXISTS extras MAP(VARCHAR, VARCHAR);
ALTER TABLE trajectories ADD COLUMN IF NOT EXISTS behaviour VARCHAR;  -- filled by migration 'behaviours'

-- The policy's action distribution at each sensitive state; step 0 is the starting policy.
CREATE TABLE IF NOT EXISTS action_probs (
    run_id VARCHAR NOT NULL,
    step   INTEGER NOT NULL,
    state  VARCHAR NOT NULL,
    action VARCHAR NOT NULL,
    prob   DOUBLE NOT NULL
);

-- Greedy held-out evaluations; step 0 is the starting policy.
CREATE TABLE IF NOT EXISTS evals (
    run_id    VARCHAR NOT NULL,
    step      INTEGER NOT NULL,
    split     VARCHAR NOT NULL,
    task_id   VARCHAR NOT NULL,
    actions   VARCHAR[],
    success   BOOLEAN,
    violation BOOLEAN
);

-- The imitation ladder: the cloned policy over every state (stage 'cloned'), and after a DAgger
-- round the refitted one (stage 'dagger') with the labels that round added.
CREATE TABLE IF NOT EXISTS imitation_policy (
    run_id VARCHAR NOT NULL,
    stage  VARCHAR NOT NULL,
    state  VARCHAR NOT NULL,
    action VARCHAR NOT NULL,
    prob   DOUBLE NOT NULL
);

CREATE TABLE IF NOT EXISTS imitation_labels (
    run_id VARCHAR NOT NULL,
    stage  VARCHAR NOT NULL,
    idx    INTEGER NOT NULL,
    state  VARCHAR NOT NULL,
    action VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS hardware (
    run_id              VARCHAR NOT NULL,
    ts                  TIMESTAMP NOT NULL,
    step                INTEGER,
    rss_bytes           BIGINT,             -- resident memory of the run's process tree
    cpu_percent         DOUBLE,             -- of one core; 200 = two cores busy
    gpu_allocated_bytes BIGINT,
    gpu_reserved_bytes  BIGINT,
    gpu_total_bytes     BIGINT,
    sys_available_bytes BIGINT
);

CREATE TABLE IF NOT EXISTS budgets (
    run_id    VARCHAR NOT NULL,
    component VARCHAR NOT NULL,
    bytes     BIGINT NOT NULL,
    source    VARCHAR NOT NULL              -- 'estimate' or 'measured'
);

-- What a run noticed about itself while it trained: a hacking onset (agentrl.monitor), its
-- signal, the value there and the threshold it crossed.
CREATE TABLE IF NOT EXISTS events (
    run_id    VARCHAR NOT NULL,
    step      INTEGER NOT NULL,
    kind      VARCHAR NOT NULL,             -- 'onset'
    signal    VARCHAR NOT NULL,
    value     DOUBLE,
    threshold DOUBLE,
    message   VARCHAR
);

-- The mean of every reward component per step, kept at ingest in the transaction that adds the
-- step's trajectories (one row per run, step, component and commit: a step whose trajectories
-- came in two commits has two rows, so a reader sums `total` and `n`). Compare reads this
-- instead of unnesting every trajectory's `components` map. `rebuild` recreates it with the
-- trajectories; a store made before it existed gets it on its first read-write open
-- (migration 'step_components' in store_migrations).
CREATE TABLE IF NOT EXISTS step_components (
    run_id    VARCHAR NOT NULL,
    step      INTEGER NOT NULL,
    component VARCHAR NOT NULL,
    total     DOUBLE,                     -- sum of the component's values
    n         BIGINT NOT NULL             -- how many trajectories carried a value for it
);

-- The onset monitor's per-step tallies of the rollouts (`agentrl.monitor.signals.StepTally`), kept
-- at ingest in the transaction that adds the step's trajectories, one row per run, step and
-- commit, so the gate, Compare and the runs table read a row a step instead of every trajectory.
-- `best` is the commit's top reward (`top` counts its rollouts within 1e-9 of it); a step that came
-- in more than one commit is tallied from its trajectories instead. `rebuild` recreates it; an
-- older store gets it on its first read-write open (migration 'step_tallies').
CREATE TABLE IF NOT EXISTS step_tallies (
    run_id               VARCHAR NOT NULL,
    step                 INTEGER NOT NULL,
    n                    INTEGER NOT NULL,  -- rollouts
    taught               INTEGER NOT NULL,  -- flagged and not vetoed
    flagged              INTEGER NOT NULL,
    flagged_reward       DOUBLE NOT NULL,
    clean                INTEGER NOT NULL,
    clean_reward         DOUBLE NOT NULL,
    clean_success        INTEGER NOT NULL,
    clean_success_reward DOUBLE NOT NULL,
    best                 DOUBLE NOT NULL,
    top                  INTEGER NOT NULL,
    top_flagged          INTEGER NOT NULL
);

-- Per-step tallies of each behaviour (`agentrl.record.behaviour`), kept at ingest in the
-- transaction that adds the step's trajectories, one row per run, step, behaviour and commit (all
-- columns add up, so a step split over commits is summed). The Behaviours view, `agentrl
-- behaviours` and the gate's coverage check read these instead of every trajectory. `rebuild`
-- recreates it; an older store gets it, and its trajectories' behaviours, on its first
-- read-write open (migration 'behaviours').
CREATE TABLE IF NOT EXISTS step_behaviours (
    run_id       VARCHAR NOT NULL,
    step         INTEGER NOT NULL,
    behaviour    VARCHAR NOT NULL,
    n            INTEGER NOT NULL,          -- trajectories of the behaviour
    reward_total DOUBLE NOT NULL,           -- sum of their rewards (a null reward counts as 0)
    flagged      INTEGER NOT NULL,          -- of them flagged by the verifier (violation)
    success      INTEGER NOT NULL,          -- of them that succeeded
    code         INTEGER                    -- the behaviour's number in `behaviour_names` (always set by ingest)
);
-- A store made before the codes gets the column here and its values on its first read-write open
-- (migration 'behaviour_codes').
ALTER TABLE step_behaviours ADD COLUMN IF NOT EXISTS code INTEGER;

-- A number for each behaviour name of the store, given by ingest the first time the name is seen
-- (`run_behaviours` of the same rows first; names are never renumbered or removed). The
-- Behaviours view's step shares and the onset monitor's behaviour columns group and join
-- `step_behaviours` by these instead of by names of up to 500 characters: on the 10M-row bench
-- store the names were most of those queries' time.
CREATE TABLE IF NOT EXISTS behaviour_names (
    code      INTEGER NOT NULL,
    behaviour VARCHAR NOT NULL
);

-- Per run and behaviour: its first and last step and how many of its trajectories were flagged, kept at
-- ingest in the transaction that adds them, one row per run, behaviour and commit (a reader takes
-- the least first step, the greatest last step, and sums the rest). What the Behaviours view and the gate's coverage check
-- read of the whole run (the window's figures come from `step_behaviours` of the last steps).
-- `rebuild` recreates it; an older store gets it on its first read-write open (migration 'run_behaviours').
CREATE TABLE IF NOT EXISTS run_behaviours (
    run_id     VARCHAR NOT NULL,
    behaviour  VARCHAR NOT NULL,
    first_step INTEGER NOT NULL,
    last_step  INTEGER NOT NULL,
    n          BIGINT NOT NULL,            -- trajectories of the behaviour
    flagged    BIGINT NOT NULL             -- of them flagged by the verifier (violation)
);

-- Each action of a run's trajectories counted by (behaviour, state, action), kept at ingest in the
-- transaction that adds them, one row per run, behaviour, state, action and commit (all columns add
-- up). `state` is the recorded state before the action when the trajectory's states line up with
-- its actions, else '*'. The onset monitor's suspect actions (`agentrl.monitor.signals.SuspectMap`)
-- read these instead of unnesting every trajectory's actions: whether a use is suspect depends on
-- its behaviour (a fixture's, unverified) or its trajectory (flagged, counted here; rejected, the
-- few reviewed trajectories read one by one). `rebuild` recreates it; an older store gets it on its
-- first read-write open (migration 'behaviour_actions').
CREATE TABLE IF NOT EXISTS behaviour_actions (
    run_id    VARCHAR NOT NULL,
    behaviour VARCHAR,                     -- NULL only for trajectories that went in by SQL without one
    state     VARCHAR,
    action    VARCHAR,
    uses      BIGINT NOT NULL,
    flagged   BIGINT NOT NULL             -- of them in trajectories the verifier flagged (violation)
);

-- Data migrations applied to this store (what DDL alone cannot do: filling a new table).
CREATE TABLE IF NOT EXISTS store_migrations (
    name       VARCHAR PRIMARY KEY,
    applied_at TIMESTAMP NOT NULL
);

-- Ingest bookkeeping: a chunk file is taken once, in the same transaction as its rows.
CREATE TABLE IF NOT EXISTS ingested_files (
    path        VARCHAR PRIMARY KEY,        -- relative to the runs directory
    table_name  VARCHAR NOT NULL,
    run_id      VARCHAR NOT NULL,
    rows        BIGINT NOT NULL,
    ingested_at TIMESTAMP NOT NULL
);

-- Chunks that could not be read; retried only when the file changes.
CREATE TABLE IF NOT EXISTS ingest_errors (
    path      VARCHAR PRIMARY KEY,
    size      BIGINT,
    mtime_ns  BIGINT,
    error     VARCHAR NOT NULL,
    seen_at   TIMESTAMP NOT NULL
);

-- Human decisions, written by the dashboard only. Append-only: a decision is never updated in
-- place; the latest row of a trajectory is its current verdict, and every earlier one stays.
CREATE SEQUENCE IF NOT EXISTS review_ids;
CREATE TABLE IF NOT EXISTS reviews (
    review_id   BIGINT PRIMARY KEY DEFAULT nextval('review_ids'),
    run_id      VARCHAR NOT NULL,
    step        INTEGER NOT NULL,
    traj_idx    INTEGER NOT NULL,
    verdict     VARCHAR NOT NULL CHECK (verdict IN ('approve', 'reject')),
    note        VARCHAR,
    reviewer    VARCHAR NOT NULL,
    reviewed_at TIMESTAMP NOT NULL            -- UTC
);

-- Exploit fixtures: trajectories a reviewer rejected as exploits that must never teach. A copy of
-- the episode (its task, dataset row, tool calls and behaviour), so a fixture outlives the run it
-- came from; every run of the same task is checked against all of them, and a run launched later
-- vetoes their behaviours.
CREATE SEQUENCE IF NOT EXISTS fixture_ids;
CREATE TABLE IF NOT EXISTS fixtures (
    fixture_id    BIGINT PRIMARY KEY DEFAULT nextval('fixture_ids'),
    source_run_id VARCHAR NOT NULL,
    step          INTEGER NOT NULL,
    traj_idx      INTEGER NOT NULL,
    task_id       VARCHAR NOT NULL,
    amount        INTEGER NOT NULL,
    start_state   VARCHAR NOT NULL,
    actions       VARCHAR[] NOT NULL,
    note          VARCHAR NOT NULL,
    created_by    VARCHAR NOT NULL,
    created_at    TIMESTAMP NOT NULL,
    task          VARCHAR,                 -- the task spec of its run (agentrl.tasks.load_task); NULL: refund (older stores)
    behaviour     VARCHAR,                 -- what it did; a guarded run launched later vetoes every repeat of it
    row_json      JSON,                    -- the dataset row its environment was reset with
    calls         JSON,                    -- its tool calls in order, [{"name", "arguments"}], re-executed by the gate
    states        VARCHAR[]                -- the state before each action, when its run recorded them (a gym's)
);
-- Stores made before fixtures held any task's episode get the columns here (idempotent); amount
-- and start_state stay the refund task's columns (0 and '' for other tasks).
ALTER TABLE fixtures ADD COLUMN IF NOT EXISTS task VARCHAR;
ALTER TABLE fixtures ADD COLUMN IF NOT EXISTS behaviour VARCHAR;
ALTER TABLE fixtures ADD COLUMN IF NOT EXISTS row_json JSON;
ALTER TABLE fixtures ADD COLUMN IF NOT EXISTS calls JSON;
ALTER TABLE fixtures ADD COLUMN IF NOT EXISTS states VARCHAR[];

-- Promotion decisions: 'promote' (with the bundle it wrote) or 'rollback'. Append-only.
CREATE SEQUENCE IF NOT EXISTS promotion_ids;
CREATE TABLE IF NOT EXISTS promotions (
    promotion_id    BIGINT PRIMARY KEY DEFAULT nextval('promotion_ids'),
    run_id          VARCHAR NOT NULL,
    decision        VARCHAR NOT NULL CHECK (decision IN ('promote', 'rollback')),
    decided_by      VARCHAR NOT NULL,
    decided_at      TIMESTAMP NOT NULL,      -- UTC
    gate_passed     BOOLEAN,
    override_reason VARCHAR,                 -- required when a failing gate is promoted anyway
    reason          VARCHAR,                 -- required for a rollback
    bundle_path     VARCHAR,
    content_hash    VARCHAR,
    checks          JSON                     -- every gate check with its figure, as decided on
);
