-- The results store. One schema for SQLite and PostgreSQL: only TEXT, BIGINT and DOUBLE PRECISION
-- columns (sqlx's Any driver maps exactly these on both), times in milliseconds since the Unix epoch.

-- One row per turn the filter reported.
CREATE TABLE turns (
    turn_id     TEXT PRIMARY KEY,      -- lc_… from the filter
    response_id TEXT,                  -- the upstream's own id, when the answer carried one
    agent       TEXT NOT NULL,
    version     TEXT NOT NULL,
    person      TEXT,                  -- for erasure
    created_at  BIGINT NOT NULL        -- when the sidecar first stored it (retention)
);
CREATE INDEX turns_response_id ON turns (response_id);
CREATE INDEX turns_person ON turns (person);
CREATE INDEX turns_created_at ON turns (created_at);

-- One row per check result: stored once per (turn, check, attempt).
CREATE TABLE results (
    id              TEXT PRIMARY KEY,  -- rck_…
    turn_id         TEXT NOT NULL REFERENCES turns (turn_id) ON DELETE CASCADE,
    seq             BIGINT NOT NULL,   -- the order decided within the turn, from 1
    agent           TEXT NOT NULL,
    version         TEXT NOT NULL,
    name            TEXT NOT NULL,
    stage           TEXT NOT NULL,
    kind            TEXT NOT NULL,
    mode            TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    outcome         TEXT NOT NULL,
    score           DOUBLE PRECISION,
    reason          TEXT NOT NULL,
    judge_model     TEXT,
    passed_on_error BIGINT NOT NULL,   -- 0 or 1
    created_at      BIGINT NOT NULL,
    UNIQUE (turn_id, name, attempt),
    UNIQUE (turn_id, seq)
);
CREATE INDEX results_agent_check ON results (agent, name, created_at);
CREATE INDEX results_agent_created ON results (agent, created_at);

-- Background checks accepted and not judged yet. `request` holds the judged text: the row is deleted
-- once the result is stored. The turn's key is never stored (memory only).
CREATE TABLE pending_checks (
    turn_id    TEXT NOT NULL REFERENCES turns (turn_id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    request    TEXT NOT NULL,          -- the JudgeRequest as JSON
    alert_rate DOUBLE PRECISION,
    alert_over BIGINT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (turn_id, name)
);

-- The last UTC day (days since the epoch) an alert fired for an agent's check.
CREATE TABLE alert_state (
    agent          TEXT NOT NULL,
    check_name     TEXT NOT NULL,
    last_fired_day BIGINT NOT NULL,
    PRIMARY KEY (agent, check_name)
);

-- response.check_failed events waiting for delivery, one row per event and webhook.
CREATE TABLE event_outbox (
    id              TEXT NOT NULL,     -- evt_…
    webhook         TEXT NOT NULL,     -- the receiver's URL
    turn_id         TEXT NOT NULL,
    body            TEXT NOT NULL,     -- the event JSON: names and outcome, never text or reason
    attempts        BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (id, webhook)
);
CREATE INDEX event_outbox_due ON event_outbox (next_attempt_at);
