-- What people add to runs, beside what runs record (applied at every connect, idempotent).

-- A run's colour, fixed the first time the dashboard sees the run: consecutive runs get
-- consecutive colours of the palette, and a run keeps its colour on every page for good.
CREATE TABLE IF NOT EXISTS run_colors (
    run_id      VARCHAR PRIMARY KEY,
    color_index INTEGER NOT NULL
);

-- Tags, a note and the archived flag of a run: editable (the latest edit counts), unlike reviews.
CREATE TABLE IF NOT EXISTS run_notes (
    run_id     VARCHAR PRIMARY KEY,
    tags       VARCHAR[] NOT NULL DEFAULT [],
    note       VARCHAR,
    archived   BOOLEAN NOT NULL DEFAULT false,
    updated_by VARCHAR,
    updated_at TIMESTAMP                     -- UTC
);
