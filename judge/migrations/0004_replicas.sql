-- Several sidecars on one database (issue 52). Additive only, like every migration from here on: a
-- replica still running the previous version reads and writes the new schema as it did the old one
-- (new columns are nullable, new tables are ignored by it), so a rolling upgrade never stops it.

-- Every sidecar process on this database, by a random id taken at start. A replica is alive while
-- `alive_until` is in the future: it renews that lease every third of it, and deletes its row when it
-- stops cleanly. Work claimed by a replica that is no longer alive is taken over by the others.
CREATE TABLE replicas (
    id          TEXT PRIMARY KEY,      -- rep_…
    alive_until BIGINT NOT NULL,       -- ms since the epoch
    started_at  BIGINT NOT NULL
);

-- `key_holder`: the replica that holds the turn's key in memory (the key itself is never stored);
-- NULL when the report came without one. Only that replica judges the check while it is alive.
-- `claimed_by`: the replica judging it now; the one that may store its result.
ALTER TABLE pending_checks ADD COLUMN key_holder TEXT;
ALTER TABLE pending_checks ADD COLUMN claimed_by TEXT;

-- `claimed_by`: the replica delivering this event now.
ALTER TABLE event_outbox ADD COLUMN claimed_by TEXT;

-- The operator pages' login sessions, shared by every replica: the SHA-256 of the session id (the
-- cookie's value is never stored), the session's CSRF token and when it ends.
CREATE TABLE sessions (
    digest     TEXT PRIMARY KEY,       -- hex
    csrf       TEXT NOT NULL,
    expires_at BIGINT NOT NULL         -- ms since the epoch
);
CREATE INDEX sessions_expires ON sessions (expires_at);
