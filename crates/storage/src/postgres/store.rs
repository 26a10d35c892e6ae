//! Opening the PostgreSQL log: connect, make or check the tables, then follow the log as
//! a standby (`follow`) until this node takes the leader's lease, read the last batches,
//! and hand the engine's state over to [`crate::Log::open_postgres`], which continues the
//! log as its leader.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backend::PgLog;
use super::conn::Conn;
use super::error::PgError;
use super::follow::{Follower, Replica};
use super::keeper::Keeper;
use super::leadership::Leadership;
use super::lease::try_take;
use super::nodes::{heartbeat, Beat, Me};
use super::recover::{clean_up, LogEnd};
use super::schema::{prepare, set_meta};
use super::target::PgTarget;
use super::view::{Addrs, ClusterView, Role};
use super::wake::Wake;
use crate::log::LogOptions;
use crate::recovery::RecoveryReport;

/// How often a standby tries to take the lease (and heartbeats).
const STANDBY_POLL: Duration = Duration::from_millis(250);

/// How often a standby reads the log without a notification: covers one lost while its
/// listening connection was made again.
const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// The longest a standby's heartbeat may take before its connection counts as lost.
const BEAT_PATIENCE: Duration = Duration::from_secs(1);

/// The longest wait between two attempts of a standby to reach PostgreSQL again after
/// losing it: short, since the leader may be gone too and a standby that noticed
/// PostgreSQL's return late would take over late (a refused connection costs little).
const MAX_RECONNECT_BACKOFF: Duration = Duration::from_secs(2);

/// A standby's connection and its notifications, made and lost together.
struct Link {
    conn: Conn,
    wake: Wake,
}

impl Link {
    fn open(target: &PgTarget) -> Result<Link, PgError> {
        let conn = Conn::open(target)?;
        let wake = Wake::listen(&conn, target)?;
        Ok(Link { conn, wake })
    }
}

/// A node connected to its storage, not leading yet.
pub struct PgStore {
    target: PgTarget,
    node: String,
    advertise: Addrs,
    view: Arc<ClusterView>,
    cluster_id: String,
    /// `None` while PostgreSQL is lost.
    link: Option<Link>,
}

impl PgStore {
    /// Connects, creates or checks the tables, and listens for the leader's commits, as
    /// `node` advertising `advertise`. Errors name the problem, never the password;
    /// [`PgError::is_retryable`] tells a PostgreSQL that is down from a wrong setting.
    pub fn connect(
        target: &PgTarget,
        node: &str,
        advertise: &Addrs,
        view: Arc<ClusterView>,
    ) -> Result<PgStore, PgError> {
        let mut conn = Conn::open(target)?;
        let cluster_id = prepare(&mut conn, target.schema())?;
        // Listening before anything is read: no commit after the first read is missed.
        let wake = Wake::listen(&conn, target)?;
        Ok(PgStore {
            target: target.clone(),
            node: node.to_string(),
            advertise: advertise.clone(),
            view,
            cluster_id,
            link: Some(Link { conn, wake }),
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

    /// Follows the log into `replica` as a standby (loading the newest snapshot, then
    /// applying each batch as it commits) and tries to take the lease every 250 ms; once
    /// it has, reads the batches the old leader committed last and returns the log's end
    /// for the writer. Keeps the cluster view current meanwhile. A PostgreSQL lost while
    /// following is reconnected to, with backoff, keeping what was applied; only a
    /// setting or a log that cannot be read is an error.
    pub fn follow_until_leading(
        mut self,
        replica: &mut impl Replica,
    ) -> Result<PgRecovered, PgError> {
        let mut follower = Follower::new(self.target.schema());
        let leadership = loop {
            match self.follow(&mut follower, replica) {
                Ok(leadership) => break leadership,
                Err(e) if e.is_retryable() => self.reconnect(&e, &mut follower)?,
                Err(e) => return Err(e),
            }
        };
        self.take_over(follower, leadership, replica)
    }

    /// Follows until this node takes the lease.
    fn follow(
        &mut self,
        follower: &mut Follower,
        replica: &mut impl Replica,
    ) -> Result<Leadership, PgError> {
        let schema = self.target.schema().to_string();
        let link = self.link.as_mut().expect("connected before following");
        if !follower.loaded() {
            self.view.update(|s| s.role = Role::Starting);
            let started = Instant::now();
            follower.load(&mut link.conn, replica)?;
            tracing::info!(
                "loaded {} records of schema {schema}'s newest snapshot in {:?}; following \
                 its log",
                follower.records(),
                started.elapsed()
            );
        }
        let mut told = None;
        let mut more = true;
        let mut next_try = Instant::now();
        let mut next_poll = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_try {
                if let Some((epoch, sent)) = try_take(&mut link.conn, &schema, &self.node)? {
                    return Ok(Leadership::new(self.node.clone(), epoch, sent));
                }
                let me = Me {
                    node: &self.node,
                    role: Role::Standby,
                    addrs: &self.advertise,
                };
                let beat = heartbeat(&mut link.conn, &schema, &me, false, BEAT_PATIENCE)?;
                see(&self.view, &schema, beat, &mut told);
                next_try = now + STANDBY_POLL;
            }
            let noticed = link.wake.take();
            if more || noticed.is_some() || now >= next_poll {
                more = !follower.read(&mut link.conn, replica, noticed, Some(next_try))?;
                self.view.set_behind_since(follower.behind_since());
                next_poll = Instant::now() + FALLBACK_POLL;
                continue;
            }
            link.wake.wait(&link.conn, next_try.min(next_poll));
        }
    }

    /// Makes the connection again after `lost`, with backoff, keeping the follower's
    /// place; counts the follower as behind meanwhile.
    fn reconnect(&mut self, lost: &PgError, follower: &mut Follower) -> Result<(), PgError> {
        self.link = None;
        follower.lost_sight(Instant::now());
        self.view.set_behind_since(follower.behind_since());
        tracing::warn!("standby: lost PostgreSQL ({lost}); connecting again");
        let mut delay = STANDBY_POLL;
        loop {
            std::thread::sleep(delay);
            match Link::open(&self.target) {
                Ok(link) => {
                    tracing::info!("standby: reconnected to PostgreSQL; following the log");
                    self.link = Some(link);
                    return Ok(());
                }
                Err(e) if e.is_retryable() => {
                    delay = (delay * 2).min(MAX_RECONNECT_BACKOFF);
                    tracing::warn!("{e}; trying again in {delay:?}");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// This node has just taken the lease: renew it from now on, read the batches the
    /// old leader committed last (the takeover's fence guarantees it appends nothing
    /// more), tidy what a compaction left, and return the log's end.
    fn take_over(
        mut self,
        mut follower: Follower,
        leadership: Leadership,
        replica: &mut impl Replica,
    ) -> Result<PgRecovered, PgError> {
        let schema = self.target.schema().to_string();
        let leadership = Arc::new(leadership);
        let epoch = leadership.epoch();
        // Renewed from the moment it is taken: reading the tail must not let it lapse.
        let keeper = Keeper::start(
            self.target.clone(),
            leadership.clone(),
            self.view.clone(),
            self.advertise.clone(),
        )
        .map_err(|e| PgError::fatal(format!("cannot start the lease keeper: {e}")))?;
        let Link { mut conn, wake } = self.link.take().expect("connected when taking over");
        drop(wake);
        set_meta(&mut conn, &schema, "holder", &self.node)?;
        // Listed as the leader at once, not a renewal later: standbys forward to it.
        let me = Me {
            node: &self.node,
            role: Role::Leader,
            addrs: &self.advertise,
        };
        let beat = heartbeat(&mut conn, &schema, &me, false, BEAT_PATIENCE)?;
        let started = Instant::now();
        let (records, batches) = (follower.records(), follower.batches());
        follower.read(&mut conn, replica, None, None)?;
        clean_up(&mut conn, &schema, epoch)?;
        tracing::info!(
            "took over schema {schema} as {} (epoch {epoch}): replayed {} records in {} \
             batches at takeover in {:?} ({} records applied in all while following)",
            self.node,
            follower.records() - records,
            follower.batches() - batches,
            started.elapsed(),
            follower.records()
        );
        let (end, report) = follower.into_end(&mut conn)?;
        self.view.set_behind_since(None);
        self.view.update(|s| {
            s.role = Role::Leader;
            s.epoch = epoch;
            s.leader = Some(self.node.clone());
            s.leader_addrs = self.advertise.clone();
            s.nodes = beat.nodes;
        });
        tracing::info!("leading schema {schema} as {} (epoch {epoch})", self.node);
        Ok(PgRecovered {
            leading: Leading {
                target: self.target,
                conn,
                leadership,
                keeper,
            },
            end,
            report,
        })
    }
}

/// Updates the view from a standby's heartbeat, and says once per epoch who leads.
fn see(view: &ClusterView, schema: &str, beat: Beat, told: &mut Option<u64>) {
    if let Some(leader) = &beat.leader {
        if *told != Some(leader.epoch) {
            tracing::info!(
                "standby: {} leads schema {schema} (epoch {}); following its log, and \
                 taking over when its lease runs out",
                leader.node,
                leader.epoch
            );
            *told = Some(leader.epoch);
        }
    }
    view.update(|s| {
        s.role = Role::Standby;
        s.nodes = beat.nodes;
        match beat.leader {
            Some(leader) => {
                s.epoch = leader.epoch;
                // A lease run out: nobody leads until a standby takes it.
                s.leader = leader.live.then_some(leader.node);
                s.leader_addrs = if leader.live {
                    leader.addrs
                } else {
                    Addrs::default()
                };
            }
            None => {
                s.leader = None;
                s.leader_addrs = Addrs::default();
            }
        }
    });
}

/// What a node that has just taken the lease continues with.
struct Leading {
    target: PgTarget,
    conn: Conn,
    leadership: Arc<Leadership>,
    keeper: Keeper,
}

/// A schema this node leads, read to its end: only such a one can be written
/// ([`crate::Log::open_postgres`]).
pub struct PgRecovered {
    leading: Leading,
    end: LogEnd,
    report: RecoveryReport,
}

impl PgRecovered {
    /// What the engine was rebuilt from: records applied, the next id, and the section
    /// the log continues with (`next_segment`).
    pub fn report(&self) -> &RecoveryReport {
        &self.report
    }

    /// This node's leadership: its epoch, and whether it may hand out jobs.
    pub fn leadership(&self) -> &Arc<Leadership> {
        &self.leading.leadership
    }

    /// The backend and its writer, continuing where the follower ended.
    pub(crate) fn into_backend(
        self,
        first_section: u64,
        options: &LogOptions,
    ) -> (PgLog, super::backend::PgWriter) {
        let PgRecovered { leading, end, .. } = self;
        PgLog::new(
            leading.target,
            leading.conn,
            (leading.leadership, leading.keeper),
            end,
            first_section,
            options,
        )
    }
}
