-- Tool-call checks: a result names the tool its call was for and which call of the answer it is, and
-- a turn keeps one result per check, attempt AND call. Results of every other check have call 0, so
-- they stay stored once per (turn, check, attempt) exactly as before.
--
-- SQLite cannot drop a table constraint, so `results` is rebuilt: a new table, every row copied
-- (call 0, no tool), the old table dropped, the new one renamed, its indexes made again. The same SQL
-- runs on PostgreSQL (transactional DDL there too); the constraints are named so that the names stay
-- the same on both and do not depend on the temporary table's name.

CREATE TABLE results_v2 (
    id              TEXT CONSTRAINT results_key PRIMARY KEY,  -- rck_…
    turn_id         TEXT NOT NULL CONSTRAINT results_turn REFERENCES turns (turn_id) ON DELETE CASCADE,
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
    tool            TEXT,              -- tool-call checks: the tool's name (never its arguments)
    tool_call       BIGINT NOT NULL DEFAULT 0, -- tool-call checks: the answer's call, from 1; else 0
    CONSTRAINT results_once UNIQUE (turn_id, name, attempt, tool_call),
    CONSTRAINT results_order UNIQUE (turn_id, seq)
);

INSERT INTO results_v2 (id, turn_id, seq, agent, version, name, stage, kind, mode, attempt, outcome,
                        score, reason, judge_model, passed_on_error, created_at, tool_call)
SELECT id, turn_id, seq, agent, version, name, stage, kind, mode, attempt, outcome,
       score, reason, judge_model, passed_on_error, created_at, 0
FROM results;

DROP TABLE results;
ALTER TABLE results_v2 RENAME TO results;

CREATE INDEX results_agent_check ON results (agent, name, created_at);
CREATE INDEX results_agent_created ON results (agent, created_at);
