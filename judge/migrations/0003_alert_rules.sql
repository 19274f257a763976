-- The operator pages show each alerting check's threshold and when its alert last fired.
--
-- `alert_rules`: the alert rule a check's latest result carried (its threshold), per agent and check,
-- written as results arrive. `alert_state.last_fired_at`: when the day's alert was claimed (ms since
-- the epoch); rows from before this migration have none until their next alert.

CREATE TABLE alert_rules (
    agent        TEXT NOT NULL,
    check_name   TEXT NOT NULL,
    failure_rate DOUBLE PRECISION NOT NULL,
    over_last    BIGINT NOT NULL,
    seen_at      BIGINT NOT NULL,
    PRIMARY KEY (agent, check_name)
);

ALTER TABLE alert_state ADD COLUMN last_fired_at BIGINT;
