//! The tables in the schema, made at start, and the `meta` rows that say which jobyard
//! wrote them: a schema from a newer jobyard is refused rather than misread.

use sqlx::Row;

use super::conn::Conn;
use super::error::PgError;

/// The layout this jobyard writes. Raise it with every change to the tables, and teach
/// [`prepare`] to migrate from the one before.
/// Version 2 added the leader's lease (`leader`), the nodes' heartbeats (`nodes`) and the
/// epoch of each batch (`log.epoch`, 0 for batches written before).
/// Version 3 added each node's role and advertised addresses (`nodes.role`, `nodes.addrs`,
/// for standbys that forward clients), the notification standbys follow the log by
/// (`log_notify`), and transactional enqueue (`enqueue`, `enqueue_rejected`, `enqueue_notify`).
/// Version 4 partitioned `log` by section (`log_s<N>` for one section, `log_default` for
/// sections without their own), so a compaction drops whole partitions and gives their
/// files back instead of leaving dead rows (docs/postgres.md#compaction).
pub(crate) const SCHEMA_VERSION: i64 = 4;

/// Sections a compaction (or a leader's start) makes partitions for ahead of the writer,
/// so batches go into a partition a later compaction can drop whole; a batch of a section
/// without one goes to `log_default`, whose covered rows are deleted and vacuumed instead.
pub(crate) const PARTITIONS_AHEAD: u64 = 4;

/// Makes `log`'s partitions for sections `from..from + PARTITIONS_AHEAD` that do not exist.
/// One statement each, outside any transaction: a section the writer has already begun
/// has rows in `log_default`, so PostgreSQL refuses its partition; that is only logged,
/// and its rows are compacted by delete.
pub(crate) fn make_partitions_ahead(conn: &mut Conn, schema: &str, from: u64) {
    for section in from..from + PARTITIONS_AHEAD {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {schema}.log_s{section} PARTITION OF {schema}.log
                 FOR VALUES FROM ({section}) TO ({next})",
            next = section + 1
        );
        if let Err(e) = conn.execute(&sql) {
            tracing::debug!("no partition of its own for section {section}: {e}");
        }
    }
}

/// The channel a committed batch notifies (once per statement): standbys following the
/// log `LISTEN` on it instead of polling.
pub(crate) fn log_channel(schema: &str) -> String {
    format!("{schema}_log")
}

/// The channel an application's committed `INSERT INTO enqueue` notifies: the leader's
/// enqueue consumer `LISTEN`s on it instead of polling.
pub(crate) fn enqueue_channel(schema: &str) -> String {
    format!("{schema}_enqueue")
}

/// Creates the schema and its tables if they are not there (migrating a version 1
/// schema), and checks the version of one that is. Returns the cluster id (made with the
/// tables, kept for good). Nodes starting together take turns: the statements run in one
/// transaction under a transaction-level advisory lock.
pub(crate) fn prepare(conn: &mut Conn, schema: &str) -> Result<String, PgError> {
    conn.execute(&format!(
        "BEGIN;
         SELECT pg_advisory_xact_lock(hashtext('jobyard:{schema}'));
         CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.meta (
             key text PRIMARY KEY,
             value text NOT NULL);
         DO $migrate$ BEGIN
             IF EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = '{schema}' AND c.relname = 'log' AND c.relkind = 'r') THEN
                 ALTER TABLE {schema}.log ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
                 DROP TRIGGER IF EXISTS log_notify ON {schema}.log;
                 ALTER TABLE {schema}.log RENAME TO log_unpartitioned;
                 ALTER INDEX IF EXISTS {schema}.log_pkey RENAME TO log_unpartitioned_pkey;
                 ALTER INDEX IF EXISTS {schema}.log_section RENAME TO log_unpartitioned_section;
             END IF;
         END $migrate$;
         CREATE TABLE IF NOT EXISTS {schema}.log (
             pos bigint NOT NULL,
             section bigint NOT NULL,
             records bytea NOT NULL,
             epoch bigint NOT NULL DEFAULT 0,
             PRIMARY KEY (section, pos)) PARTITION BY RANGE (section);
         CREATE TABLE IF NOT EXISTS {schema}.log_default PARTITION OF {schema}.log DEFAULT;
         CREATE INDEX IF NOT EXISTS log_pos ON {schema}.log (pos);
         DO $migrate$ BEGIN
             IF to_regclass('{schema}.log_unpartitioned') IS NOT NULL THEN
                 INSERT INTO {schema}.log (pos, section, records, epoch)
                     SELECT pos, section, records, epoch FROM {schema}.log_unpartitioned;
                 DROP TABLE {schema}.log_unpartitioned;
             END IF;
         END $migrate$;
         CREATE TABLE IF NOT EXISTS {schema}.leader (
             id integer PRIMARY KEY CHECK (id = 1),
             node text NOT NULL,
             epoch bigint NOT NULL,
             expires_at timestamptz NOT NULL);
         CREATE TABLE IF NOT EXISTS {schema}.nodes (
             node text PRIMARY KEY,
             seen_at timestamptz NOT NULL);
         CREATE TABLE IF NOT EXISTS {schema}.snapshots (
             section bigint PRIMARY KEY,
             next_id bigint NOT NULL,
             start_pos bigint NOT NULL DEFAULT 0,
             complete boolean NOT NULL DEFAULT false);
         CREATE TABLE IF NOT EXISTS {schema}.snapshot_chunks (
             section bigint NOT NULL,
             chunk integer NOT NULL,
             records bytea NOT NULL,
             PRIMARY KEY (section, chunk));
         INSERT INTO {schema}.meta (key, value) VALUES
             ('schema_version', '{SCHEMA_VERSION}'),
             ('cluster_id', md5(random()::text || clock_timestamp()::text))
             ON CONFLICT (key) DO NOTHING;
         ALTER TABLE {schema}.nodes ADD COLUMN IF NOT EXISTS role text NOT NULL DEFAULT 'standby';
         ALTER TABLE {schema}.nodes ADD COLUMN IF NOT EXISTS addrs text NOT NULL DEFAULT '{{}}';
         CREATE OR REPLACE FUNCTION {schema}.log_notify() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_notify('{log_channel}', ''); RETURN NULL; END $$;
         CREATE OR REPLACE TRIGGER log_notify AFTER INSERT ON {schema}.log
             FOR EACH STATEMENT EXECUTE FUNCTION {schema}.log_notify();
         CREATE TABLE IF NOT EXISTS {schema}.enqueue (
             id bigserial PRIMARY KEY,
             queue text NOT NULL CHECK (octet_length(queue) BETWEEN 1 AND 200),
             body text NOT NULL DEFAULT '',
             body_bytes bytea,
             priority bigint NOT NULL DEFAULT 1024 CHECK (priority BETWEEN 0 AND 4294967295),
             delay_seconds integer NOT NULL DEFAULT 0 CHECK (delay_seconds >= 0),
             ttr_seconds integer NOT NULL DEFAULT 60 CHECK (ttr_seconds >= 0),
             unique_key text,
             created_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE IF NOT EXISTS {schema}.enqueue_rejected (
             id bigint PRIMARY KEY,
             queue text NOT NULL,
             body text NOT NULL,
             body_bytes bytea,
             priority bigint NOT NULL,
             delay_seconds integer NOT NULL,
             ttr_seconds integer NOT NULL,
             unique_key text,
             created_at timestamptz NOT NULL,
             rejected_at timestamptz NOT NULL DEFAULT now(),
             reason text NOT NULL);
         CREATE OR REPLACE FUNCTION {schema}.enqueue_notify() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_notify('{enqueue_channel}', ''); RETURN NULL; END $$;
         CREATE OR REPLACE TRIGGER enqueue_notify AFTER INSERT ON {schema}.enqueue
             FOR EACH STATEMENT EXECUTE FUNCTION {schema}.enqueue_notify();
         UPDATE {schema}.meta SET value = '{SCHEMA_VERSION}'
             WHERE key = 'schema_version' AND value IN ('1', '2', '3');
         COMMIT;",
        log_channel = log_channel(schema),
        enqueue_channel = enqueue_channel(schema),
    ))?;
    let version = meta_value(conn, schema, "schema_version")?;
    let version: i64 = version.trim().parse().map_err(|_| {
        PgError::fatal(format!(
            "schema {schema}: its schema_version {version:?} is not a number; is it jobyard's?"
        ))
    })?;
    if version > SCHEMA_VERSION {
        return Err(PgError::fatal(format!(
            "schema {schema} was written by a newer jobyard (schema version {version}; this \
             one knows up to {SCHEMA_VERSION}): upgrade jobyard, or use another --storage-schema"
        )));
    }
    meta_value(conn, schema, "cluster_id")
}

/// One `meta` value.
pub(crate) fn meta_value(conn: &mut Conn, schema: &str, key: &str) -> Result<String, PgError> {
    let sql = format!("SELECT value FROM {schema}.meta WHERE key = $1");
    let (runtime, link) = conn.parts();
    let row = runtime.block_on(sqlx::query(&sql).bind(key).fetch_optional(&mut *link));
    match row.map_err(|e| conn.error(e))? {
        Some(row) => Ok(row.get::<String, _>(0)),
        None => Err(PgError::fatal(format!(
            "schema {schema}: its meta table has no {key}; is it jobyard's?"
        ))),
    }
}

/// Sets one `meta` value.
pub(crate) fn set_meta(
    conn: &mut Conn,
    schema: &str,
    key: &str,
    value: &str,
) -> Result<(), PgError> {
    let sql = format!(
        "INSERT INTO {schema}.meta (key, value) VALUES ($1, $2)
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
    );
    let (runtime, link) = conn.parts();
    let done = runtime.block_on(sqlx::query(&sql).bind(key).bind(value).execute(&mut *link));
    done.map(|_| ()).map_err(|e| conn.error(e))
}
