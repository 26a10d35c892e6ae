//! The nodes' heartbeats (`nodes`): each node writes its role and advertised addresses
//! and reads back the live nodes and the leader's addresses, which is how a standby
//! learns where to forward clients, and how `GET /v1/cluster` lists the cluster.

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::Row;

use super::conn::Conn;
use super::error::PgError;
use super::leadership::ClusterNode;
use super::view::{Addrs, Role};

/// How long a node's heartbeat row counts it as live.
const NODE_LIVE: &str = "10 seconds";

/// How long the leader keeps the row of a node it has not heard from: long enough for a
/// node restarted by its supervisor to find its own row, short enough that nodes gone for
/// good do not pile up.
const NODE_FORGOTTEN: &str = "1 hour";

/// What a heartbeat writes about this node.
pub(crate) struct Me<'a> {
    pub node: &'a str,
    pub role: Role,
    pub addrs: &'a Addrs,
}

/// The lease holder as the `leader` row names it, with the addresses its heartbeat
/// advertises.
#[derive(Debug)]
pub(crate) struct LeaderSeen {
    pub node: String,
    pub epoch: u64,
    /// Whether its lease still runs (on PostgreSQL's clock).
    pub live: bool,
    /// Empty when the holder has no `nodes` row.
    pub addrs: Addrs,
}

/// What a heartbeat read back.
#[derive(Debug)]
pub(crate) struct Beat {
    /// The live nodes, sorted by name, each with its role.
    pub nodes: Vec<ClusterNode>,
    /// The lease holder, if any node ever took the lease.
    pub leader: Option<LeaderSeen>,
}

/// Writes `me`'s heartbeat (role and addresses too) and reads back the live nodes and the
/// lease holder. With `prune` (the leader's), rows of nodes not seen for an hour go.
pub(crate) fn heartbeat(
    conn: &mut Conn,
    schema: &str,
    me: &Me<'_>,
    prune: bool,
    patience: Duration,
) -> Result<Beat, PgError> {
    let beat = format!(
        "INSERT INTO {schema}.nodes (node, seen_at, role, addrs) VALUES ($1, now(), $2,
             jsonb_strip_nulls(jsonb_build_object(
                 'beanstalk', $3::text, 'gearman', $4::text, 'http', $5::text))::text)
         ON CONFLICT (node) DO UPDATE
             SET seen_at = EXCLUDED.seen_at, role = EXCLUDED.role, addrs = EXCLUDED.addrs"
    );
    let forget =
        format!("DELETE FROM {schema}.nodes WHERE seen_at < now() - interval '{NODE_FORGOTTEN}'");
    // A node whose row says it leads but whose lease is gone is on its way out.
    let list = format!(
        "SELECT n.node, CASE WHEN n.node = l.node AND l.expires_at > now() THEN 'leader'
                             WHEN n.role = 'leader' THEN 'standby'
                             ELSE n.role END
         FROM {schema}.nodes n LEFT JOIN {schema}.leader l ON l.id = 1
         WHERE n.seen_at > now() - interval '{NODE_LIVE}'
         ORDER BY n.node"
    );
    let leader = format!(
        "SELECT l.node, l.epoch, l.expires_at > now(), {addrs}
         FROM {schema}.leader l LEFT JOIN {schema}.nodes n ON n.node = l.node
         WHERE l.id = 1",
        addrs = ADDRS_COLUMNS
    );
    let (runtime, link) = conn.parts();
    let done = runtime.block_on(async {
        let all = async {
            sqlx::query(&beat)
                .bind(me.node)
                .bind(me.role.as_str())
                .bind(me.addrs.beanstalk.as_deref())
                .bind(me.addrs.gearman.as_deref())
                .bind(me.addrs.http.as_deref())
                .execute(&mut *link)
                .await?;
            if prune {
                sqlx::query(&forget).execute(&mut *link).await?;
            }
            let nodes = sqlx::query(&list).fetch_all(&mut *link).await?;
            let leader = sqlx::query(&leader).fetch_optional(&mut *link).await?;
            Ok::<_, sqlx::Error>((nodes, leader))
        };
        tokio::time::timeout(patience, all).await
    });
    let (nodes, leader) = done
        .map_err(|_| PgError::retryable(format!("the heartbeat took over {patience:?}")))?
        .map_err(|e| conn.error(e))?;
    Ok(Beat {
        nodes: nodes
            .into_iter()
            .map(|row| ClusterNode {
                node: row.get(0),
                role: row.get(1),
            })
            .collect(),
        leader: leader.map(|row| LeaderSeen {
            node: row.get(0),
            epoch: row.get::<i64, _>(1) as u64,
            live: row.get(2),
            addrs: addrs_from(&row, 3),
        }),
    })
}

/// The advertised addresses of `nodes n` (NULL where a listener is off, or no row).
const ADDRS_COLUMNS: &str = "(n.addrs::jsonb)->>'beanstalk', (n.addrs::jsonb)->>'gearman', \
                             (n.addrs::jsonb)->>'http'";

fn addrs_from(row: &PgRow, first: usize) -> Addrs {
    Addrs {
        beanstalk: row.get(first),
        gearman: row.get(first + 1),
        http: row.get(first + 2),
    }
}
