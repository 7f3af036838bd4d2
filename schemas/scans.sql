-- Scanner results (agentrl.scan): what a named, versioned rule said about one trajectory, kept per
-- version so a changed rule is scanned again instead of reusing its old results. Derived data: a
-- rebuilt store has none until `agentrl scan RUN_ID --scanner ...` runs again. Written in bulk from
-- Arrow, idempotent per key (a rescan of the same version replaces its rows).
CREATE TABLE IF NOT EXISTS scan_results (
    run_id      VARCHAR NOT NULL,
    step        INTEGER NOT NULL,
    traj_idx    INTEGER NOT NULL,
    scanner     VARCHAR NOT NULL,          -- the scanner's name
    version     VARCHAR NOT NULL,          -- given by its author, else a hash of its source
    value       DOUBLE NOT NULL,           -- 1/0 for a yes/no rule, else its number; above 0 is a hit
    explanation VARCHAR,                   -- one line a reviewer reads
    refs        INTEGER[],                 -- the items (messages, calls, outputs) that decided it
    spec        VARCHAR,                   -- where it was loaded from (PATH:NAME, builtin:NAME)
    scanned_at  TIMESTAMP,                 -- UTC
    PRIMARY KEY (run_id, step, traj_idx, scanner, version)
);
