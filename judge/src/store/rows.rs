//! Writing turns and results in few statements: a report's turns in one multi-row upsert, the turns
//! as stored with their next result numbers in one read, and every result in one multi-row insert
//! per [`ROWS_PER_STATEMENT`] (a statement is most of what a row costs). Placeholders are numbered
//! as each database reads them best ([`numbered`]).

use std::collections::{BTreeSet, HashMap, HashSet};

use livecheck_wire::{CheckResult, TurnReport};
use sqlx::{Any, Row, Transaction};

use super::results::{turn_from, Turn};
use super::StoreError;
use crate::ids;

// A NULL DOUBLE PRECISION is never bound: sqlx 0.8's Any driver binds it as a float4 NULL, and
// PostgreSQL's cached statement then refuses the next real (float8) value. `CASE WHEN flag = 1` instead.

/// Rows per multi-row statement: at most 19 parameters a row, well inside SQLite's 32,766 and
/// PostgreSQL's 65,535.
const ROWS_PER_STATEMENT: usize = 256;

/// `sql` written with `?` for every parameter, as the connection's database numbers them: SQLite
/// keeps `?` (sqlx looks each parameter's name up, and SQLite finds a named one by a linear walk,
/// so `$N` costs a statement of n parameters n² steps: `make bench-ingest` measured 1,520 µs a
/// report with 256 results a statement, 460 with 32, 250 with `?` and 256); PostgreSQL gets
/// `$1, $2, …` in order. No SQL text here holds a `?` otherwise.
fn numbered(conn: &sqlx::AnyConnection, sql: &str) -> String {
    if conn.backend_name().eq_ignore_ascii_case("sqlite") {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + sql.len() / 4);
    for (k, piece) in sql.split('?').enumerate() {
        if k > 0 {
            out.push('$');
            out.push_str(&k.to_string());
        }
        out.push_str(piece);
    }
    out
}

/// `(…), (…)`: `rows` copies of one row's placeholders, for a multi-row statement.
fn rows_of(rows: usize, row: &str) -> String {
    vec![format!("({row})"); rows].join(", ")
}

/// Creates the reports' turns, or adds a response id to one stored without it. A turn named by
/// several reports is written once, with the first report's fields and the first response id any
/// of them has (what writing them one after the other leaves).
pub(super) async fn upsert_turns(
    tx: &mut Transaction<'_, Any>,
    reports: &[&TurnReport],
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut turns: Vec<(&TurnReport, Option<&String>)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for report in reports {
        match at
            .get(report.turn_id.as_str())
            .and_then(|&i| turns.get_mut(i))
        {
            Some((_, response_id)) => {
                *response_id = response_id.or(report.response_id.as_ref());
            }
            None => {
                at.insert(&report.turn_id, turns.len());
                turns.push((report, report.response_id.as_ref()));
            }
        }
    }
    for chunk in turns.chunks(ROWS_PER_STATEMENT) {
        let sql = numbered(
            tx,
            &format!(
                "INSERT INTO turns (turn_id, response_id, agent, version, person, created_at) VALUES {} \
                 ON CONFLICT (turn_id) DO UPDATE SET response_id = COALESCE(turns.response_id, excluded.response_id)",
                rows_of(chunk.len(), "?, ?, ?, ?, ?, ?")
            ),
        );
        let mut query = sqlx::query(&sql);
        for (report, response_id) in chunk {
            query = query
                .bind(&report.turn_id)
                .bind(*response_id)
                .bind(&report.agent)
                .bind(&report.version)
                .bind(&report.person)
                .bind(now_ms);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Turns as stored, each with its version and its next result number (a turn not stored is
/// absent).
pub(super) async fn stored_turns<'a>(
    tx: &mut Transaction<'_, Any>,
    turn_ids: impl IntoIterator<Item = &'a str>,
) -> Result<HashMap<String, StoredTurn>, StoreError> {
    let ids: BTreeSet<&str> = turn_ids.into_iter().collect();
    let ids: Vec<&str> = ids.into_iter().collect();
    let mut turns = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(ROWS_PER_STATEMENT) {
        let sql = numbered(
            tx,
            &format!(
                "SELECT t.turn_id, t.response_id, t.agent, t.version, \
                 (SELECT COALESCE(MAX(r.seq), 0) + 1 FROM results r WHERE r.turn_id = t.turn_id) \
                 FROM turns t WHERE t.turn_id IN ({})",
                vec!["?"; chunk.len()].join(", ")
            ),
        );
        let mut query = sqlx::query(&sql);
        for id in chunk {
            query = query.bind(*id);
        }
        for row in query.fetch_all(&mut **tx).await? {
            let turn = turn_from(&row)?;
            let stored = StoredTurn {
                version: row.try_get(3)?,
                next_seq: row.try_get(4)?,
                turn,
            };
            turns.insert(stored.turn.turn_id.clone(), stored);
        }
    }
    Ok(turns)
}

/// A turn as stored, with its version and the number its next result takes.
pub(super) struct StoredTurn {
    pub(super) turn: Turn,
    pub(super) version: String,
    pub(super) next_seq: i64,
}

/// A result to store, with its turn and its number in the turn.
pub(super) struct ResultRow<'a> {
    pub(super) turn: &'a Turn,
    pub(super) version: &'a str,
    pub(super) result: &'a CheckResult,
    pub(super) seq: i64,
}

/// Stores a result unless the same (turn, check, attempt, call) is stored already; `true` when
/// stored. `seq` is the turn's next result number within this transaction, counted on here.
pub(super) async fn insert_result(
    tx: &mut Transaction<'_, Any>,
    turn: &Turn,
    version: &str,
    result: &CheckResult,
    seq: &mut i64,
) -> Result<bool, StoreError> {
    let row = ResultRow {
        turn,
        version,
        result,
        seq: *seq,
    };
    *seq += 1;
    Ok(insert_results(tx, std::slice::from_ref(&row))
        .await?
        .first()
        .copied()
        .unwrap_or(false))
}

/// Stores results unless the same (turn, check, attempt, call) is stored already, in one
/// multi-row statement per [`ROWS_PER_STATEMENT`]; says for each whether it was stored. Of a
/// result repeated within `rows` the first is stored. A number (`seq`) a result stored before
/// leaves unused is a gap, not a fault: `seq` only orders a turn's results (the pages' cursor).
///
/// Each row gets a fresh id here. A statement that stored every row of its chunk (nearly always)
/// says so in its count; only when it stored fewer are the chunk's ids looked up to tell which.
/// (`RETURNING id` told the same for every statement, but sqlx's SQLite driver hands each returned
/// row across threads on its own: ~30% of the sidecar's CPU per report, `make bench-ingest`.)
pub(super) async fn insert_results(
    tx: &mut Transaction<'_, Any>,
    rows: &[ResultRow<'_>],
) -> Result<Vec<bool>, StoreError> {
    let mut stored = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        // A NULL DOUBLE PRECISION is never bound (see above): the score goes with a flag.
        let ids: Vec<String> = chunk.iter().map(|_| ids::time_ordered("rck_")).collect();
        let sql = numbered(
            tx,
            &format!(
                "INSERT INTO results (id, turn_id, seq, agent, version, name, stage, kind, mode, attempt, \
                 outcome, score, reason, judge_model, passed_on_error, created_at, tool, tool_call) VALUES {} \
                 ON CONFLICT (turn_id, name, attempt, tool_call) DO NOTHING",
                rows_of(
                    chunk.len(),
                    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CASE WHEN ? = 1 THEN ? END, ?, ?, ?, ?, ?, ?"
                )
            ),
        );
        let mut query = sqlx::query(&sql);
        for (row, id) in chunk.iter().zip(&ids) {
            let result = &row.result;
            query = query
                .bind(id.as_str())
                .bind(&row.turn.turn_id)
                .bind(row.seq)
                .bind(&row.turn.agent)
                .bind(row.version)
                .bind(&result.name)
                .bind(result.stage.as_str())
                .bind(&result.kind)
                .bind(result.mode.as_str())
                .bind(i64::from(result.attempt))
                .bind(result.outcome.as_str())
                .bind(i64::from(result.score.is_some()))
                .bind(result.score.unwrap_or_default())
                .bind(&result.reason)
                .bind(&result.judge_model)
                .bind(i64::from(result.passed_on_error))
                .bind(i64::try_from(result.created_at_ms).unwrap_or(i64::MAX))
                .bind(&result.tool)
                .bind(i64::from(result.call.unwrap_or(0)));
        }
        let inserted = query.execute(&mut **tx).await?.rows_affected();
        if usize::try_from(inserted).is_ok_and(|n| n == chunk.len()) {
            stored.extend(std::iter::repeat_n(true, chunk.len()));
            continue;
        }
        let new_ids = ids_present(tx, &ids).await?;
        stored.extend(ids.iter().map(|id| new_ids.contains(id)));
    }
    Ok(stored)
}

/// Which of `ids` (at most [`ROWS_PER_STATEMENT`]) name a stored result.
async fn ids_present(
    tx: &mut Transaction<'_, Any>,
    ids: &[String],
) -> Result<HashSet<String>, StoreError> {
    let sql = numbered(
        tx,
        &format!(
            "SELECT id FROM results WHERE id IN ({})",
            vec!["?"; ids.len()].join(", ")
        ),
    );
    let mut query = sqlx::query(&sql);
    for id in ids {
        query = query.bind(id.as_str());
    }
    let mut present = HashSet::with_capacity(ids.len());
    for row in query.fetch_all(&mut **tx).await? {
        present.insert(row.try_get::<String, _>(0)?);
    }
    Ok(present)
}
