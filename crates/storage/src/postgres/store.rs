//! Opening the PostgreSQL log: connect, make or check the tables, wait as a standby until
//! this node holds the leader's lease, and recover; then [`crate::Log::open_postgres`]
//! continues the log.

use std::sync::Arc;
use std::time::Duration;

use jobyard_engine::Change;

use super::backend::PgLog;
use super::conn::Conn;
use super::error::PgError;
use super::keeper::Keeper;
use super::leadership::Leadership;
use super::lease::{heartbeat, holder, try_take};
use super::recover::{recover, LogEnd};
use super::schema::{prepare, set_meta};
use super::target::PgTarget;
use crate::log::LogOptions;
use crate::recovery::RecoveryReport;

/// How often a standby looks whether the leader's lease has run out.
const STANDBY_POLL: Duration = Duration::from_millis(250);

/// A schema this node leads: it holds the lease (renewed by its keeper from now on).
pub struct PgStore {
    target: PgTarget,
    conn: Conn,
    leadership: Arc<Leadership>,
    keeper: Keeper,
    cluster_id: String,
}

impl PgStore {
    /// Connects, creates or checks the tables, and takes the leader's lease as `node`,
    /// waiting as a standby while another node holds it (until its lease runs out: the
    /// leader died, or stopped). Errors name the problem, never the password;
    /// [`PgError::is_retryable`] tells a PostgreSQL that is down from a wrong setting.
    pub fn open(target: &PgTarget, node: &str) -> Result<PgStore, PgError> {
        let mut conn = Conn::open(target)?;
        let cluster_id = prepare(&mut conn, target.schema())?;
        let leadership = Arc::new(wait_for_lease(&mut conn, target.schema(), node)?);
        // Renewed from the moment it is taken: recovering a long log must not let it lapse.
        let keeper = Keeper::start(target.clone(), leadership.clone())
            .map_err(|e| PgError::fatal(format!("cannot start the lease keeper: {e}")))?;
        set_meta(&mut conn, target.schema(), "holder", node)?;
        tracing::info!(
            "leading schema {} as {node} (epoch {})",
            target.schema(),
            leadership.epoch()
        );
        Ok(PgStore {
            target: target.clone(),
            conn,
            leadership,
            keeper,
            cluster_id,
        })
    }

    /// The id made with the tables: the same for every node of one server.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Where the log lives, for messages (no password).
    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// This node's leadership: its epoch, and whether it may hand out jobs.
    pub fn leadership(&self) -> &Arc<Leadership> {
        &self.leadership
    }

    /// Hands every change, in order, to `apply`: the newest complete snapshot, then every
    /// batch after it. The report's `next_segment` is the section the log continues with
    /// ([`crate::Log::open_postgres`]).
    pub fn recover(
        mut self,
        apply: impl FnMut(Change),
    ) -> Result<(PgRecovered, RecoveryReport), PgError> {
        let (report, end) = recover(&mut self.conn, self.target.schema(), apply)?;
        Ok((PgRecovered { store: self, end }, report))
    }
}

/// Takes the lease, waiting as a standby while another node's holds; says once who
/// leads, and heartbeats meanwhile so the leader lists this node.
fn wait_for_lease(conn: &mut Conn, schema: &str, node: &str) -> Result<Leadership, PgError> {
    let mut told = None;
    loop {
        if let Some((epoch, sent)) = try_take(conn, schema, node)? {
            return Ok(Leadership::new(node.to_string(), epoch, sent));
        }
        if let Some(leader) = holder(conn, schema)? {
            if told != Some(leader.epoch) {
                tracing::info!(
                    "standby: {} leads schema {schema} (epoch {}); taking over when its \
                     lease runs out",
                    leader.node,
                    leader.epoch
                );
                told = Some(leader.epoch);
            }
        }
        heartbeat(conn, schema, node, STANDBY_POLL * 4)?;
        std::thread::sleep(STANDBY_POLL);
    }
}

/// A schema read to its end by [`PgStore::recover`]: only such a one can be written.
pub struct PgRecovered {
    store: PgStore,
    end: LogEnd,
}

impl PgRecovered {
    /// The backend and its writer, continuing where recovery ended.
    pub(crate) fn into_backend(
        self,
        first_section: u64,
        options: &LogOptions,
    ) -> (PgLog, super::backend::PgWriter) {
        let PgRecovered { store, end } = self;
        PgLog::new(
            store.target,
            store.conn,
            (store.leadership, store.keeper),
            end,
            first_section,
            options,
        )
    }
}
