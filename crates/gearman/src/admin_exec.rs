//! Executes admin text commands with gearmand's output formats.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use jobyard_engine::{ConnId, JobState, QueueId};
use jobyard_net::Step as Outcome;

use crate::admin::{parse, unknown_reply, Admin};
use crate::functions::{ensure_function, level, total_jobs};
use crate::handle;
use crate::jobs::{fail_job, shown_unique};
use crate::Server;

/// Runs one admin line; replies go into `out`.
pub(crate) fn run(server: &Arc<Server>, conn: ConnId, line: &[u8], out: &mut BytesMut) -> Outcome {
    let server = server.clone();
    let cfg = &server.config;
    let cmd = parse(line);
    match cmd {
        Admin::Reply(text) => out.put_slice(text.as_bytes()),
        Admin::Unknown(word) => out.put_slice(&unknown_reply(&word)),
        // One token after OK: tools parse it. jobyard's own version has its own command.
        Admin::Version => out.put_slice(format!("OK {}\n", crate::PROTOCOL_VERSION).as_bytes()),
        Admin::JobyardVersion => {
            out.put_slice(format!("OK {}\n", env!("CARGO_PKG_VERSION")).as_bytes())
        }
        Admin::GetPid => out.put_slice(format!("OK {}\n", std::process::id()).as_bytes()),
        Admin::Verbose => out.put_slice(format!("OK {}\n", cfg.verbose_level).as_bytes()),
        Admin::Shutdown { graceful } => {
            if !cfg.allow_shutdown {
                out.put_slice(&unknown_reply(b"shutdown"));
            } else {
                tracing::info!(
                    conn,
                    protocol = "gearman",
                    graceful,
                    "admin `shutdown`: stopping the server"
                );
                out.put_slice(b"OK\r\n");
                server.request_shutdown();
            }
        }
        Admin::Status => {
            let txn = server.broker.lock();
            let reg = server.registry();
            let mut names: Vec<Bytes> = reg.functions.keys().cloned().collect();
            for q in txn.queues() {
                let busy = q.ready_len() + q.delayed_len() + q.buried_len() + q.reserved as usize;
                if busy > 0 && !reg.functions.contains_key(&q.name) {
                    names.push(q.name.clone());
                }
            }
            names.sort();
            for name in names {
                let (total, running) = match txn.queue_id(&name) {
                    Some(q) => (total_jobs(&txn, q), txn.queue(q).reserved as usize),
                    None => (0, 0),
                };
                out.put_slice(&name);
                let workers = reg.workers_for(&name);
                out.put_slice(format!("\t{total}\t{running}\t{workers}\n").as_bytes());
            }
            out.put_slice(b".\n");
        }
        Admin::PriorityStatus => {
            // Counted a chunk at a time, outside one long hold of the engine lock.
            let ids = server.broker.lock().job_ids();
            let mut counts: HashMap<QueueId, [u64; 3]> = HashMap::new();
            server.broker.for_each_job(&ids, |_, job| {
                if job.state != JobState::Reserved {
                    counts.entry(job.queue).or_default()[level(job.pri)] += 1;
                }
            });
            let txn = server.broker.lock();
            let reg = server.registry();
            let mut names: Vec<Bytes> = reg.functions.keys().cloned().collect();
            for q in txn.queues() {
                if !reg.functions.contains_key(&q.name)
                    && q.ready_len() + q.delayed_len() + q.buried_len() > 0
                {
                    names.push(q.name.clone());
                }
            }
            names.sort();
            for name in names {
                let c = txn
                    .queue_id(&name)
                    .and_then(|q| counts.get(&q).copied())
                    .unwrap_or_default();
                out.put_slice(&name);
                let workers = reg.workers_for(&name);
                out.put_slice(format!("\t{}\t{}\t{}\t{workers}\n", c[0], c[1], c[2]).as_bytes());
            }
            out.put_slice(b".\n");
        }
        Admin::Workers => {
            let reg = server.registry();
            let mut conns: Vec<_> = reg.conns.iter().collect();
            conns.sort_by_key(|(id, _)| **id);
            for (_, c) in conns {
                let mut line = format!("{} {} ", c.fd, c.ip).into_bytes();
                line.extend_from_slice(&c.client_id);
                line.extend_from_slice(b" :");
                for a in c.abilities.iter().rev() {
                    line.push(b' ');
                    line.extend_from_slice(a);
                }
                line.push(b'\n');
                out.put_slice(&line);
            }
            out.put_slice(b".\n");
        }
        Admin::ShowJobs => {
            let mut ids = server.broker.lock().job_ids();
            ids.sort_unstable();
            let mut text = String::new();
            server.broker.for_each_job(&ids, |_, j| {
                let running = (j.state == JobState::Reserved) as u32;
                let retries = j.reserves.saturating_sub(running);
                let _ = writeln!(
                    text,
                    "{}:{}\t{retries}\t0\t{}",
                    cfg.handle_prefix, j.id, j.durable as u8
                );
            });
            out.put_slice(text.as_bytes());
            out.put_slice(b".\n");
        }
        Admin::ShowUniqueJobs => {
            let mut ids = server.broker.lock().job_ids();
            ids.sort_unstable();
            server.broker.for_each_job(&ids, |engine, j| {
                out.put_slice(shown_unique(engine.unique_of(j.id)));
                out.put_u8(b'\n');
            });
            out.put_slice(b".\n");
        }
        Admin::MaxQueue(name, limits) => {
            let mut txn = server.broker.lock();
            let mut reg = server.registry();
            if reg.functions.contains_key(&name) || txn.queue_id(&name).is_some() {
                ensure_function(&mut txn, &mut reg, &name);
                let f = reg.functions.get_mut(&name).expect("just ensured");
                f.limits = limits
                    .unwrap_or([0; 3])
                    .map(|n| n.clamp(0, u32::MAX as i64) as u32);
            }
            out.put_slice(b"OK\r\n");
        }
        Admin::CancelJob(h) => {
            let mut txn = server.broker.lock();
            let mut reg = server.registry();
            match handle::parse(&cfg.handle_prefix, &h).filter(|id| txn.job(*id).is_some()) {
                Some(id) => {
                    fail_job(&server, &mut txn, &mut reg, id);
                    drop(reg);
                    out.put_slice(b"OK\r\n");
                    return Outcome::Done(txn.commit());
                }
                None => out.put_slice(b"ERR UNKNOWN_JOB\r\n"),
            }
        }
        Admin::CreateFunction(name) => {
            let mut txn = server.broker.lock();
            let mut reg = server.registry();
            ensure_function(&mut txn, &mut reg, &name);
            out.put_slice(b"OK\r\n");
        }
        Admin::DropFunction(name) => {
            let mut txn = server.broker.lock();
            let mut reg = server.registry();
            let found = reg
                .functions
                .keys()
                .find(|k| k.eq_ignore_ascii_case(&name))
                .cloned();
            let reply: &[u8] = match found {
                None => b"ERR function not found\r\n",
                Some(key) => {
                    let q = txn.queue_id(&key).expect("gearman functions are pinned");
                    if reg.workers_for(&key) > 0 || txn.queue(q).reserved > 0 {
                        b"ERR there are still connected workers or executing clients\r\n"
                    } else if total_jobs(&txn, q) > 0 {
                        b"ERR there are still queued jobs\r\n"
                    } else {
                        reg.functions.remove(&key);
                        txn.unpin(q);
                        b"OK\r\n"
                    }
                }
            };
            out.put_slice(reply);
        }
    }
    Outcome::Done(0)
}
