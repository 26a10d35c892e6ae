//! Flows in the engine: every transition and its refusals, with the engine's injectable
//! clock (times are passed in, never slept), and one test per race of Guild Queues
//! (shared/reference/flows-guild-queues.md §5) showing it cannot happen here.

use jobyard_engine::flows::{FlowChange, FlowDefinition, FlowError, FlowLease, NewFlowJob};
use jobyard_engine::{Change, ConnId, EngineCore, Lease, Millis, ReserveOutcome, WaitMode};
use serde_json::{json, Map, Value};

const T0: Millis = 1_700_000_000_000;
const SEC: Millis = 1000;
const W1: ConnId = 1;
const W2: ConnId = 2;

/// An engine and every change it logged, so a test can "restart" by replaying them.
struct Server {
    e: EngineCore,
    log: Vec<Change>,
}

impl Server {
    fn new() -> Server {
        Server {
            e: EngineCore::new(),
            log: Vec::new(),
        }
    }

    fn flush(&mut self) {
        self.log.extend(self.e.take_changes());
        self.e.take_notices().for_each(drop);
    }

    fn define(&mut self, json: &str) {
        let def = FlowDefinition::parse_json(json.as_bytes()).expect("valid definition");
        self.e.define_flow(def);
        self.flush();
    }

    fn create(&mut self, flow: &str, priority: u32, params: Value) -> String {
        let (id, created) = self
            .e
            .create_flow_job(
                NewFlowJob {
                    flow: flow.into(),
                    priority,
                    params: obj(params),
                    idempotency_key: None,
                },
                T0,
            )
            .expect("created");
        assert!(created);
        self.flush();
        id
    }

    /// Leases from a stage without waiting.
    fn lease(&mut self, conn: ConnId, stage: &str, now: Millis) -> Option<FlowLease> {
        let queue = self.e.flow_stage_queue(stage);
        let q = self.e.queue_id_or_create(queue.as_bytes());
        let got = match self.e.reserve(
            conn,
            &[q],
            WaitMode::Best,
            Lease::JobTtr,
            Some(0),
            false,
            now,
        ) {
            ReserveOutcome::Reserved(id) => self.e.flow_hand_out(conn, id, None, now),
            _ => None,
        };
        self.flush();
        got
    }

    fn complete(&mut self, conn: ConnId, l: &FlowLease, result: Value) -> &'static str {
        let out = self
            .e
            .flow_complete(conn, &l.id, l.token, obj(result), T0)
            .expect("completed");
        self.flush();
        out.status
    }

    fn field(&self, id: &str, key: &str) -> Value {
        self.e
            .flow_job(id)
            .expect("job")
            .fields
            .get(key)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// A new engine rebuilt from the log, as a restart does.
    fn restarted(&self) -> Server {
        let mut e = EngineCore::new();
        for c in &self.log {
            e.replay(c.clone());
        }
        Server {
            e,
            log: self.log.clone(),
        }
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

const LINEAR: &str = r#"{"name":"lin","lookupAttributes":["userId","roleIds"],"retentionSec":60,
  "stages":[{"name":"prep","next":"check","attributesToGet":["userId"],"leaseMs":5000},
            {"name":"check","next":"result","maxRetries":1,"priorities":3,"leaseMs":5000},
            {"name":"result","leaseMs":5000}]}"#;

const FANOUT: &str = r#"{"name":"fan","stages":[
  {"name":"plan","next":"gather"},
  {"name":"gather","next":"report","children":[{"name":"req","attributesToGet":["n"]},{"name":"other"}]},
  {"name":"report","attributesToGet":["children:gather:results"]}]}"#;

#[test]
fn a_job_runs_through_three_stages_and_the_server_sets_done() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({"userId": "u1", "correlationId": "c-1"}));
    assert!(id.starts_with("lin:"));
    let l = s.lease(W1, "prep", T0).unwrap();
    assert_eq!(l.job["userId"], "u1");
    assert_eq!(l.job["correlationId"], "c-1");
    assert_eq!(l.job["retries"], 0);
    assert_eq!(s.complete(W1, &l, json!({"prepared": true})), "waiting");
    let l = s.lease(W1, "check", T0).unwrap();
    assert_eq!(s.complete(W1, &l, json!({"ok": 1})), "waiting");
    let l = s.lease(W1, "result", T0).unwrap();
    assert_eq!(s.complete(W1, &l, json!({})), "done");
    assert_eq!(s.field(&id, "done"), true);
    assert_eq!(s.field(&id, "prepared"), true);
    assert_eq!(s.field(&id, "completed-queue"), "result");
    assert_eq!(s.e.job_count(), 0, "no engine job left behind");
}

#[test]
fn creation_refuses_unknown_flows_and_bad_priorities_and_honours_idempotency_keys() {
    let mut s = Server::new();
    s.define(LINEAR);
    let new = |flow: &str, priority, key: Option<&str>| NewFlowJob {
        flow: flow.into(),
        priority,
        params: Map::new(),
        idempotency_key: key.map(String::from),
    };
    assert!(matches!(
        s.e.create_flow_job(new("nope", 1, None), T0),
        Err(FlowError::UnknownFlow(_))
    ));
    for bad in [0, 2] {
        assert_eq!(
            s.e.create_flow_job(new("lin", bad, None), T0),
            Err(FlowError::BadPriority {
                priority: bad,
                max: 1
            })
        );
    }
    assert!(!s.e.has_changes(), "a refusal logs nothing");
    let (a, fresh) = s.e.create_flow_job(new("lin", 1, Some("k")), T0).unwrap();
    let (b, again) = s.e.create_flow_job(new("lin", 1, Some("k")), T0).unwrap();
    assert!(fresh && !again);
    assert_eq!(a, b);
    s.flush();
    let r = s.restarted();
    let (c, _) = {
        let mut e = r.e;
        e.create_flow_job(new("lin", 1, Some("k")), T0).unwrap()
    };
    assert_eq!(a, c, "the key survives a restart");
}

#[test]
fn lookups_index_text_numbers_and_array_elements() {
    let mut s = Server::new();
    s.define(LINEAR);
    let a = s.create("lin", 1, json!({"userId": 42, "roleIds": [1, 2]}));
    let b = s.create("lin", 1, json!({"userId": "42", "roleIds": [2]}));
    let ids = |s: &Server, attr: &str, v: &str| -> Vec<String> {
        s.e.flow_jobs_by_lookup("lin", attr, v)
            .iter()
            .map(|j| j.id.clone())
            .collect()
    };
    assert_eq!(ids(&s, "userId", "42"), [a.clone(), b.clone()]);
    assert_eq!(ids(&s, "roleIds", "2"), [a.clone(), b.clone()]);
    assert_eq!(ids(&s, "roleIds", "1"), std::slice::from_ref(&a));
    assert!(ids(&s, "other", "1").is_empty());
    let r = s.restarted();
    assert_eq!(ids(&r, "roleIds", "2"), [a, b]);
}

/// Race 1: lease, lock and attribute read were three round trips. Here one operation
/// hands out the job, its projected attributes and its token; a crash after it brings the
/// job back waiting, and the next lease has a higher token.
#[test]
fn race_1_a_lease_is_one_step_and_a_crash_after_it_strands_nothing() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({"userId": "u"}));
    let first = s.lease(W1, "prep", T0).unwrap();
    assert_eq!(first.job["id"], Value::from(id.clone()));
    assert_eq!(first.deadline, T0 + 5 * SEC);
    let mut r = s.restarted();
    assert_eq!(r.e.flow_state(r.e.flow_job(&id).unwrap()), "waiting");
    let again = r.lease(W2, "prep", T0).unwrap();
    assert!(again.token > first.token);
}

/// Race 2: complete pushed to the next queue before learning the job was no longer owned.
/// Here a complete by a non-holder changes nothing, and a holder's complete moves the job
/// exactly once.
#[test]
fn race_2_complete_is_checked_before_anything_moves() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({}));
    let l = s.lease(W1, "prep", T0).unwrap();
    let refused =
        s.e.flow_complete(W2, &id, l.token, obj(json!({"x": 1})), T0);
    assert_eq!(refused, Err(FlowError::NotLeased(id.clone())));
    assert_eq!(s.field(&id, "x"), Value::Null);
    assert!(!s.e.has_changes());
    s.complete(W1, &l, json!({"x": 1}));
    assert_eq!(
        s.e.flow_counts("lin").unwrap()[1].waiting_by_priority[&1],
        1
    );
    let twice = s.e.flow_complete(W1, &id, l.token, obj(json!({})), T0);
    assert!(twice.is_err(), "a second complete is refused");
    assert_eq!(s.e.job_count(), 1, "the job is in exactly one queue");
}

/// Race 3: a worker that stalled past its lease could still complete. Here the lease
/// expiry bumps the token and the late complete is refused.
#[test]
fn race_3_a_late_complete_after_lease_expiry_is_refused() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({}));
    let stale = s.lease(W1, "prep", T0).unwrap();
    s.e.tick(T0 + 5 * SEC);
    s.flush();
    let late = s.e.flow_complete(
        W1,
        &id,
        stale.token,
        obj(json!({"late": true})),
        T0 + 6 * SEC,
    );
    assert!(
        matches!(late, Err(FlowError::StaleToken { .. })),
        "{late:?}"
    );
    assert_eq!(s.field(&id, "late"), Value::Null);
    // prep allows no retry: the expiry is the final failure, recorded as Guild records it.
    assert_eq!(s.field(&id, "failed"), true);
    assert_eq!(s.field(&id, "failedErrorMsg"), "prep lock time exceeded");
}

/// Race 4: two janitor ticks could both requeue a job. Here the expiry is the engine's own
/// timer: one requeue, one retry counted, and more ticks do nothing.
#[test]
fn race_4_an_expired_lease_is_requeued_exactly_once() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({}));
    let l = s.lease(W1, "prep", T0).unwrap();
    s.complete(W1, &l, json!({}));
    let l = s.lease(W1, "check", T0).unwrap();
    s.e.tick(T0 + 5 * SEC);
    s.e.tick(T0 + 5 * SEC);
    s.e.tick(T0 + 50 * SEC);
    s.flush();
    assert_eq!(s.field(&id, "retries:check"), 1);
    assert_eq!(s.e.job_count(), 1);
    let again = s.lease(W2, "check", T0 + 51 * SEC).unwrap();
    assert_eq!(again.job["retries"], 1);
    assert!(again.token > l.token + 1);
    assert!(s.lease(W1, "check", T0 + 51 * SEC).is_none());
}

/// Race 5: state expired a set time after creation, even in flight. Here a job in flight
/// is kept however old, and an ended one is purged a retention period after its end,
/// with its lookup entries.
#[test]
fn race_5_retention_counts_from_the_end_not_from_creation() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({"userId": "u"}));
    s.e.tick(T0 + 3600 * SEC);
    assert!(s.e.flow_job(&id).is_some(), "in flight: kept");
    let l = s.lease(W1, "prep", T0 + 3600 * SEC).unwrap();
    let end = T0 + 3601 * SEC;
    s.e.flow_complete(W1, &id, l.token, obj(json!({"nextQueue": null})), end)
        .unwrap();
    let l = s.lease(W1, "check", end).unwrap();
    s.e.flow_fail(W1, &id, l.token, "boom", end).unwrap();
    let l = s.lease(W1, "check", end).unwrap();
    s.e.flow_fail(W1, &id, l.token, "boom", end).unwrap();
    s.flush();
    assert_eq!(s.field(&id, "failedErrorMsg"), "boom");
    assert_eq!(s.e.next_deadline(), Some(end + 60 * SEC));
    s.e.tick(end + 59 * SEC);
    assert!(s.e.flow_job(&id).is_some());
    s.e.tick(end + 60 * SEC);
    s.flush();
    assert!(s.e.flow_job(&id).is_none());
    assert!(s.e.flow_jobs_by_lookup("lin", "userId", "u").is_empty());
    assert!(
        s.restarted().e.flow_job(&id).is_none(),
        "the purge is logged"
    );
}

/// Race 6: a parent worker polled its children every second for as long as they ran. Here
/// the children's ends move the parent on in their own transitions, with every child's
/// final state (failures included) in the parent's results.
#[test]
fn race_6_fan_in_needs_no_parent_worker_and_keeps_child_failures() {
    let mut s = Server::new();
    s.define(FANOUT);
    let id = s.create("fan", 1, json!({"correlationId": "c"}));
    let l = s.lease(W1, "plan", T0).unwrap();
    let specs =
        json!([{"childName": "req", "n": 1}, {"childName": "req", "n": 2}, {"childName": "other"}]);
    assert_eq!(
        s.complete(W1, &l, json!({"children:gather:params": specs})),
        "waiting_children"
    );
    let a = s.lease(W1, "gather:req", T0).unwrap();
    assert_eq!(a.job["n"], 1);
    assert_eq!(a.job["correlationId"], "c");
    assert!(a.id.starts_with("gather:req:"));
    let b = s.lease(W2, "gather:req", T0).unwrap();
    let c = s.lease(W1, "gather:other", T0).unwrap();
    s.complete(W1, &a, json!({"done": true, "out": "a"}));
    s.e.flow_fail(W2, &b.id, b.token, "child broke", T0)
        .unwrap();
    s.flush();
    assert_eq!(
        s.e.flow_state(s.e.flow_job(&id).unwrap()),
        "waiting_children"
    );
    let mut r = s.restarted();
    // Leases are not logged: after a restart the old one is gone and the child is
    // handed out again, under a higher token.
    assert!(r
        .e
        .flow_complete(W1, &c.id, c.token, Map::new(), T0)
        .is_err());
    let c = r.lease(W1, "gather:other", T0).unwrap();
    r.complete(W1, &c, json!({}));
    let report = r.lease(W1, "report", T0).unwrap();
    let results = report.job["children:gather:results"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0]["out"], "a");
    assert_eq!(results[1]["failedErrorMsg"], "child broke");
    assert_eq!(results[2]["done"], true);
}

/// A child spec naming no declared child fails the parent with that reason and creates
/// no child; an empty fan-out moves on at once.
#[test]
fn a_bad_child_spec_fails_the_parent_and_an_empty_one_moves_on() {
    let mut s = Server::new();
    s.define(FANOUT);
    let id = s.create("fan", 1, json!({}));
    let l = s.lease(W1, "plan", T0).unwrap();
    let bad = json!({"children:gather:params": [{"childName": "req"}, {"childName": "nope"}]});
    assert_eq!(s.complete(W1, &l, bad), "failed");
    assert!(s
        .field(&id, "failedErrorMsg")
        .as_str()
        .unwrap()
        .contains("names no child"));
    assert_eq!(s.e.job_count(), 0, "no child was created");
    let id = s.create("fan", 1, json!({}));
    let l = s.lease(W1, "plan", T0).unwrap();
    assert_eq!(
        s.complete(W1, &l, json!({"children:gather:params": []})),
        "waiting"
    );
    assert_eq!(s.e.flow_job(&id).unwrap().stage, "report");
}

/// Race 7: strict priorities were polled every 3 s. Here the best priority goes first,
/// and a waiting lease is served the moment a job arrives.
#[test]
fn race_7_best_priority_first_and_waiting_leases_are_served_at_once() {
    let mut s = Server::new();
    s.define(r#"{"name":"p","stages":[{"name":"only","priorities":3}]}"#);
    let low = s.create("p", 3, json!({}));
    let high = s.create("p", 1, json!({}));
    assert_eq!(s.lease(W1, "only", T0).unwrap().id, high);
    assert_eq!(s.lease(W1, "only", T0).unwrap().id, low);
    let queue = s.e.flow_stage_queue("only");
    let q = s.e.queue_id_or_create(queue.as_bytes());
    let waiting = s.e.reserve(
        W2,
        &[q],
        WaitMode::Best,
        Lease::JobTtr,
        Some(10_000),
        false,
        T0,
    );
    assert_eq!(waiting, ReserveOutcome::Waiting);
    let id = s.create("p", 2, json!({}));
    assert_eq!(
        s.e.flow_job(&id).map(|j| s.e.flow_state(j)),
        Some("leased"),
        "the waiting lease got the job in the create's own step"
    );
}

/// Race 8: positions lived in a monitor's map that never forgot. Here they are computed
/// from the queue itself, and a finished or deleted job has none.
#[test]
fn race_8_positions_come_from_the_queue_and_end_with_the_job() {
    let mut s = Server::new();
    s.define(r#"{"name":"p","stages":[{"name":"only","priorities":2}]}"#);
    let a = s.create("p", 2, json!({}));
    let b = s.create("p", 1, json!({}));
    assert_eq!(s.e.flow_position(&a).unwrap().position, Some(2));
    assert_eq!(s.e.flow_position(&b).unwrap().position, Some(1));
    let l = s.lease(W1, "only", T0).unwrap();
    assert_eq!(s.e.flow_position(&b).unwrap().state, "leased");
    assert_eq!(s.e.flow_position(&a).unwrap().position, Some(1));
    s.complete(W1, &l, json!({}));
    assert_eq!(s.e.flow_position(&b).unwrap().position, None);
    assert!(s.e.delete_flow_job(&a, T0));
    assert!(s.e.flow_position(&a).is_none());
}

/// Race 9: flows were compiled into the library. Here they are declared at run time and
/// survive a restart and a compaction (snapshot).
#[test]
fn race_9_flows_are_declared_at_run_time_and_survive_restart_and_snapshot() {
    let mut s = Server::new();
    s.define(LINEAR);
    s.define(FANOUT);
    let done = s.create("lin", 1, json!({}));
    for stage in ["prep", "check", "result"] {
        let l = s.lease(W1, stage, T0).unwrap();
        s.complete(W1, &l, json!({}));
    }
    let id = s.create("lin", 1, json!({"userId": "u"}));
    let l = s.lease(W1, "prep", T0).unwrap();
    s.complete(W1, &l, json!({"a": 1}));
    let r = s.restarted();
    assert_eq!(r.e.flow_definitions().count(), 2);
    let snap = r.e.snapshot();
    let mut fresh = EngineCore::new();
    snap.into_iter().for_each(|c| fresh.replay(c));
    assert_eq!(fresh.flow_definition("lin"), s.e.flow_definition("lin"));
    assert_eq!(fresh.flow_job(&id), s.e.flow_job(&id));
    assert_eq!(fresh.flow_job(&done).unwrap().fields["done"], true);
    assert!(fresh.next_id() >= s.e.next_id());
}

#[test]
fn delete_cascades_to_children_and_ends_their_leases() {
    let mut s = Server::new();
    s.define(FANOUT);
    let id = s.create("fan", 1, json!({}));
    let l = s.lease(W1, "plan", T0).unwrap();
    s.complete(
        W1,
        &l,
        json!({"children:gather:params": [{"childName": "req"}]}),
    );
    let child = s.lease(W2, "gather:req", T0).unwrap();
    assert!(s.e.delete_flow_job(&id, T0));
    s.flush();
    assert!(s.e.flow_job(&child.id).is_none());
    assert_eq!(s.e.job_count(), 0);
    let late =
        s.e.flow_complete(W2, &child.id, child.token, Map::new(), T0);
    assert!(matches!(late, Err(FlowError::NotFound(_))));
    assert!(!s.e.delete_flow_job(&id, T0));
    assert!(s.restarted().e.flow_job(&id).is_none());
}

#[test]
fn deleting_one_child_counts_as_its_failure_for_the_parent() {
    let mut s = Server::new();
    s.define(FANOUT);
    let id = s.create("fan", 1, json!({}));
    let l = s.lease(W1, "plan", T0).unwrap();
    s.complete(
        W1,
        &l,
        json!({"children:gather:params": [{"childName": "req"}]}),
    );
    let child = s.e.flow_job(&id).unwrap().children[0].clone();
    assert!(s.e.delete_flow_job(&child, T0));
    assert_eq!(s.e.flow_job(&id).unwrap().stage, "report");
}

#[test]
fn a_delay_resumes_by_the_engines_timer_and_needs_a_delayable_stage() {
    let mut s = Server::new();
    s.define(r#"{"name":"d","stages":[{"name":"a","next":"b"},{"name":"b","delayable":false}]}"#);
    let id = s.create("d", 1, json!({}));
    let l = s.lease(W1, "a", T0).unwrap();
    s.e.flow_delay(W1, &id, l.token, T0 + 10 * SEC, "rate limited", T0)
        .unwrap();
    s.flush();
    assert_eq!(s.field(&id, "delayReason"), "rate limited");
    assert!(s.lease(W1, "a", T0 + 9 * SEC).is_none());
    s.e.tick(T0 + 10 * SEC);
    let l = s.lease(W1, "a", T0 + 10 * SEC).unwrap();
    assert_eq!(l.job["delay"], true);
    s.complete(W1, &l, json!({}));
    let l = s.lease(W1, "b", T0 + 10 * SEC).unwrap();
    let refused = s.e.flow_delay(W1, &id, l.token, T0 + 20 * SEC, "no", T0);
    assert!(matches!(refused, Err(FlowError::Invalid(_))));
}

#[test]
fn failures_retry_with_backoff_then_record_the_failure() {
    let mut s = Server::new();
    s.define(r#"{"name":"r","stages":[{"name":"a","maxRetries":2,"backoffMs":1000}]}"#);
    let id = s.create("r", 1, json!({}));
    let l = s.lease(W1, "a", T0).unwrap();
    assert_eq!(
        s.e.flow_fail(W1, &id, l.token, "e1", T0).unwrap().status,
        "delayed"
    );
    assert!(s.lease(W1, "a", T0 + 999).is_none());
    s.e.tick(T0 + 1000);
    let l = s.lease(W1, "a", T0 + 1000).unwrap();
    assert_eq!(l.job["retries"], 1);
    s.e.flow_fail(W1, &id, l.token, "e2", T0 + 1000).unwrap();
    s.e.tick(T0 + 2999);
    assert!(
        s.lease(W1, "a", T0 + 2999).is_none(),
        "the second backoff is twice the first"
    );
    s.e.tick(T0 + 3000);
    let l = s.lease(W1, "a", T0 + 3000).unwrap();
    assert_eq!(
        s.e.flow_fail(W1, &id, l.token, "e3", T0).unwrap().status,
        "failed"
    );
    assert_eq!(s.field(&id, "failedQueue"), "a");
    assert_eq!(s.field(&id, "failedErrorMsg"), "e3");
    assert_eq!(s.field(&id, "done"), true);
}

#[test]
fn a_next_queue_the_flow_lacks_fails_the_job_with_that_reason() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({}));
    let l = s.lease(W1, "prep", T0).unwrap();
    let bad =
        s.e.flow_complete(W1, &id, l.token, obj(json!({"nextQueue": 5})), T0);
    assert!(
        matches!(bad, Err(FlowError::Invalid(_))),
        "not text: refused, nothing applied"
    );
    assert_eq!(
        s.complete(W1, &l, json!({"nextQueue": "update-membership"})),
        "failed"
    );
    assert!(s
        .field(&id, "failedErrorMsg")
        .as_str()
        .unwrap()
        .contains("update-membership"));
}

#[test]
fn next_queue_and_priority_diff_route_and_clamp() {
    let mut s = Server::new();
    s.define(
        r#"{"name":"x","stages":[{"name":"a","next":"b","priorityDiff":5},
        {"name":"b","priorities":3},{"name":"c","priorities":2}]}"#,
    );
    let id = s.create("x", 1, json!({}));
    let l = s.lease(W1, "a", T0).unwrap();
    s.complete(W1, &l, json!({}));
    assert_eq!(
        s.e.flow_job(&id).unwrap().priority,
        3,
        "1 + 5 kept within b's 3 levels"
    );
    let l = s.lease(W1, "b", T0).unwrap();
    s.complete(W1, &l, json!({"nextQueue": "c"}));
    let job = s.e.flow_job(&id).unwrap();
    assert_eq!((job.stage.as_str(), job.priority), ("c", 2));
}

#[test]
fn a_heartbeat_extends_the_lease_and_needs_the_current_token() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({}));
    let l = s.lease(W1, "prep", T0).unwrap();
    assert_eq!(
        s.e.flow_heartbeat(W1, &id, l.token, Some(20 * SEC), T0 + 4 * SEC),
        Ok(T0 + 24 * SEC)
    );
    s.e.tick(T0 + 10 * SEC);
    assert_eq!(s.e.flow_state(s.e.flow_job(&id).unwrap()), "leased");
    assert!(s.e.flow_heartbeat(W1, &id, l.token + 1, None, T0).is_err());
}

#[test]
fn the_limiter_delays_jobs_past_the_reservoir_to_their_window_per_group() {
    let mut s = Server::new();
    s.define(
        r#"{"name":"l","stages":[{"name":"a",
            "limiter":{"reservoir":2,"intervalMs":1000,"groupJobKey":"g"}}]}"#,
    );
    let t = T0 + 100; // inside the window [T0, T0 + 1000)
    let ids: Vec<String> = (0..5)
        .map(|_| s.create("l", 1, json!({"g": "x"})))
        .collect();
    let other = s.create("l", 1, json!({"g": "y"}));
    // A lease the limiter refuses answers with no job (the job was delayed instead).
    let handed: Vec<String> = (0..10)
        .filter_map(|_| s.lease(W1, "a", t))
        .map(|l| l.id)
        .collect();
    // Two of group x, and the one of group y, which counts apart.
    assert_eq!(handed, [ids[0].clone(), ids[1].clone(), other]);
    // The other three were delayed, in the same step as the refused hand-out: the first
    // two to the next window, the third to the one after.
    let ready: Vec<Value> = ids[2..]
        .iter()
        .map(|id| s.field(id, "delayReadyTimestamp"))
        .collect();
    assert_eq!(
        ready,
        [json!(T0 + 1000), json!(T0 + 1000), json!(T0 + 2000)]
    );
    assert_eq!(s.field(&ids[2], "delayReason"), "rate limited");
    s.e.tick(T0 + 1000);
    let next: Vec<String> = (0..10)
        .filter_map(|_| s.lease(W1, "a", T0 + 1000))
        .map(|l| l.id)
        .collect();
    assert_eq!(next, [ids[2].clone(), ids[3].clone()]);
    assert_eq!(
        s.field(&ids[2], "delay"),
        Value::Null,
        "cleared once handed out"
    );
    s.e.tick(T0 + 2000);
    assert_eq!(s.lease(W1, "a", T0 + 2000).unwrap().id, ids[4]);
}

/// Compaction weighs the log against what the live jobs take: flow jobs count, and stop
/// counting once purged or deleted.
#[test]
fn live_bytes_count_flow_jobs_until_they_are_gone() {
    let mut s = Server::new();
    s.define(LINEAR);
    assert_eq!(s.e.live_bytes(), 0);
    let id = s.create("lin", 1, json!({"userId": "x".repeat(1000)}));
    let one = s.e.live_bytes();
    assert!(one > 1000, "{one}");
    assert_eq!(
        s.restarted().e.live_bytes(),
        one,
        "the same after a restart"
    );
    s.create("lin", 1, json!({}));
    assert!(s.e.live_bytes() > one);
    s.e.delete_flow_job(&id, T0);
    assert!(s.e.live_bytes() < one);
    match s.log.last() {
        Some(Change::Flow(bytes)) => {
            assert!(jobyard_engine::flows::FlowChange::decode(bytes).is_some())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_fan_out_has_at_most_ten_thousand_children() {
    let mut s = Server::new();
    s.define(FANOUT);
    for (n, status) in [(10_000, "waiting_children"), (10_001, "failed")] {
        s.create("fan", 1, json!({}));
        let l = s.lease(W1, "plan", T0).unwrap();
        let specs: Vec<Value> = (0..n).map(|_| json!({"childName": "other"})).collect();
        assert_eq!(
            s.complete(W1, &l, json!({"children:gather:params": specs})),
            status
        );
    }
}

#[test]
fn a_job_makes_at_most_a_thousand_lookup_entries() {
    let mut s = Server::new();
    s.define(LINEAR);
    let new = |n: usize| NewFlowJob {
        flow: "lin".into(),
        priority: 1,
        params: obj(json!({ "roleIds": (0..n).collect::<Vec<_>>() })),
        idempotency_key: None,
    };
    assert!(s.e.create_flow_job(new(1000), T0).is_ok());
    assert!(matches!(
        s.e.create_flow_job(new(1001), T0),
        Err(FlowError::Invalid(_))
    ));
}

/// A flow job's engine job moves only by flow transitions: a beanstalkd delete or bury,
/// a plain finish or route of it is refused, so its record can never be left behind.
#[test]
fn plain_operations_refuse_a_flow_jobs_engine_job() {
    let mut s = Server::new();
    s.define(LINEAR);
    let id = s.create("lin", 1, json!({}));
    let engine_id = s.e.flow_job(&id).unwrap().engine_id;
    assert!(s.e.is_flow_engine_job(engine_id));
    assert!(!s.e.bury_job(engine_id));
    assert!(!s.e.delete(W1, engine_id));
    let l = s.lease(W1, "prep", T0).unwrap();
    let q = s.e.queue_id_or_create(b"elsewhere");
    assert!(!s.e.route(W1, engine_id, q, 1, None, T0));
    assert!(!s.e.bury(W1, engine_id, 1));
    assert!(!s.e.finish(
        W1,
        engine_id,
        jobyard_engine::JobEnd::ok(Default::default())
    ));
    assert_eq!(s.complete(W1, &l, json!({})), "waiting");
}

/// A snapshot is copied while work goes on ("fuzzy"): the records written after its cut are
/// replayed over it. Whatever moved between the cut and the copy, the result is the live
/// engine's flows.
#[test]
fn a_fuzzy_snapshot_plus_the_records_after_its_cut_rebuilds_the_flows() {
    let mut s = Server::new();
    s.define(LINEAR);
    s.define(FANOUT);
    let a = s.create("lin", 1, json!({"userId": "a"}));
    let b = s.create("lin", 1, json!({"userId": "b"}));
    let fan = s.create("fan", 1, json!({}));
    let l = s.lease(W1, "prep", T0).unwrap();
    s.complete(W1, &l, json!({"step": 1}));
    // The cut: the log from here on is the new segment.
    let order = s.e.snapshot_order();
    let cut = s.log.len();
    let l = s.lease(W1, "check", T0).unwrap();
    s.complete(W1, &l, json!({"step": 2}));
    assert!(s.e.delete_flow_job(&b, T0));
    let l = s.lease(W1, "plan", T0).unwrap();
    s.complete(
        W1,
        &l,
        json!({"children:gather:params": [{"childName": "req"}]}),
    );
    let late = s.create("lin", 1, json!({"userId": "late"}));
    s.flush();
    // The copy, after those changes; then more changes, as compaction copies in chunks.
    let mut snap = Vec::new();
    for chunk in order.chunks(2) {
        snap.extend(s.e.snapshot_of(chunk));
        let l = s.lease(W2, "gather:req", T0);
        if let Some(l) = l {
            s.complete(W2, &l, json!({"child": true}));
        }
    }
    let mut rebuilt = EngineCore::new();
    for c in snap.into_iter().chain(s.log[cut..].iter().cloned()) {
        rebuilt.replay(c);
    }
    for id in [&a, &fan, &late] {
        assert_eq!(rebuilt.flow_job(id), s.e.flow_job(id), "{id}");
    }
    assert!(rebuilt.flow_job(&b).is_none());
    assert_eq!(rebuilt.flow_definitions().count(), 2);
    assert_eq!(
        rebuilt.flow_counts("fan").unwrap(),
        s.e.flow_counts("fan").unwrap()
    );
}

/// A job state is bounded: a result that would pass the bound fails the job with the
/// reason, and a child's state that would is kept in its parent as a summary.
#[test]
fn the_job_state_is_bounded() {
    let mut s = Server::new();
    s.define(r#"{"name":"big","stages":[{"name":"a","next":"a"}]}"#);
    let id = s.create("big", 1, json!({}));
    let chunk = "x".repeat(4 << 20);
    let mut last = "";
    for n in 0..6 {
        let l = s.lease(W1, "a", T0).unwrap();
        last = s.complete(W1, &l, json!({ format!("f{n}"): chunk }));
        if last == "failed" {
            assert_eq!(n, 3, "three chunks fit in 16 MiB, a fourth does not");
            break;
        }
    }
    assert_eq!(last, "failed");
    assert!(s
        .field(&id, "failedErrorMsg")
        .as_str()
        .unwrap()
        .contains("larger than"));

    s.define(FANOUT);
    let parent = s.create("fan", 1, json!({"pad": "y".repeat(15 << 20)}));
    let l = s.lease(W1, "plan", T0).unwrap();
    s.complete(
        W1,
        &l,
        json!({"children:gather:params": [{"childName": "other"}]}),
    );
    let c = s.lease(W1, "gather:other", T0).unwrap();
    s.complete(W1, &c, json!({ "out": "z".repeat(2 << 20) }));
    let results = s.field(&parent, "children:gather:results");
    assert_eq!(results[0]["resultTooLarge"], true);
    assert_eq!(results[0]["done"], true);
    assert_eq!(s.e.flow_job(&parent).unwrap().stage, "report");
}

#[test]
fn a_next_queue_may_not_name_a_child_stage() {
    let mut s = Server::new();
    s.define(FANOUT);
    let id = s.create("fan", 1, json!({}));
    let l = s.lease(W1, "plan", T0).unwrap();
    assert_eq!(
        s.complete(W1, &l, json!({"nextQueue": "gather:req"})),
        "failed"
    );
    assert!(s
        .field(&id, "failedErrorMsg")
        .as_str()
        .unwrap()
        .contains("gather:req"));
}

/// A delay or a retry backoff that runs out while the server is down makes the job ready at
/// the first tick after the restart; one still running keeps its time.
#[test]
fn delays_are_kept_across_a_restart() {
    let mut s = Server::new();
    s.define(r#"{"name":"d","stages":[{"name":"a","maxRetries":1,"backoffMs":60000}]}"#);
    let soon = s.create("d", 1, json!({}));
    let later = s.create("d", 1, json!({}));
    let l = s.lease(W1, "a", T0).unwrap();
    s.e.flow_delay(W1, &soon, l.token, T0 + 5 * SEC, "r", T0)
        .unwrap();
    let l = s.lease(W1, "a", T0).unwrap();
    s.e.flow_fail(W1, &later, l.token, "e", T0).unwrap();
    s.flush();
    let mut r = s.restarted();
    assert!(r.lease(W2, "a", T0 + 4 * SEC).is_none());
    r.e.tick(T0 + 10 * SEC);
    assert_eq!(r.lease(W2, "a", T0 + 10 * SEC).unwrap().id, soon);
    assert!(
        r.lease(W2, "a", T0 + 10 * SEC).is_none(),
        "the backoff has 50 s to go"
    );
    r.e.tick(T0 + 60 * SEC);
    assert_eq!(r.lease(W2, "a", T0 + 60 * SEC).unwrap().id, later);
}

/// A worker waiting in a lease is fenced in the transition that makes a job ready for it
/// (one log write for both), its hand-out only describes the lease, and the token survives
/// a restart; a lease made any other way is fenced at its hand-out as before.
#[test]
fn a_waiting_worker_is_fenced_in_the_transition_that_readies_its_job() {
    let mut s = Server::new();
    s.define(r#"{"name":"f","stages":[{"name":"a","next":"b","leaseMs":7000},{"name":"b"}]}"#);
    let wait_on = |s: &mut Server, conn: ConnId, stage: &str| {
        let queue = s.e.flow_stage_queue(stage);
        let q = s.e.queue_id_or_create(queue.as_bytes());
        let got = s.e.reserve(
            conn,
            &[q],
            WaitMode::Best,
            Lease::JobTtr,
            Some(10_000),
            false,
            T0,
        );
        assert_eq!(got, ReserveOutcome::Waiting);
    };
    wait_on(&mut s, W1, "a");
    let id = s.create("f", 1, json!({}));
    let token = s.e.flow_job(&id).unwrap().token;
    assert_eq!(token, 1, "fenced by the create's own step");
    let engine_id = s.e.flow_job(&id).unwrap().engine_id;
    let lease =
        s.e.flow_hand_out(W1, engine_id, None, T0)
            .expect("handed out");
    assert_eq!((lease.token, lease.deadline), (1, T0 + 7000));
    assert!(
        s.e.take_changes().next().is_none(),
        "the hand-out logs nothing more"
    );
    s.flush();
    assert_eq!(s.restarted().e.flow_job(&id).unwrap().token, 1);
    // The next stage's waiting worker is fenced by the complete.
    wait_on(&mut s, W2, "b");
    assert_eq!(s.complete(W1, &lease, json!({})), "leased");
    assert_eq!(s.e.flow_job(&id).unwrap().token, 2);
    let second =
        s.e.flow_hand_out(W2, engine_id, None, T0)
            .expect("handed out");
    assert_eq!(second.token, 2);
    // A plain lease (no wait) is fenced at its hand-out.
    let other = s.create("f", 1, json!({}));
    let third = s.lease(W1, "a", T0).expect("leased");
    assert_eq!((third.id.as_str(), third.token), (other.as_str(), 1));
}

/// Snapshot records of the flow jobs in `snap`, by the id of the job each puts.
fn flow_records(snap: &[Change]) -> std::collections::HashMap<String, bytes::Bytes> {
    let mut out = std::collections::HashMap::new();
    for change in snap {
        let Change::Flow(bytes) = change else {
            continue;
        };
        if let Some(FlowChange::Jobs { put, .. }) = FlowChange::decode(bytes) {
            if let [job] = &put[..] {
                out.insert(job.id.clone(), bytes.clone());
            }
        }
    }
    out
}

/// Every compaction copies the finished jobs retention keeps. Encoding each afresh made
/// the server's CPU per flow grow with the finished flows it retains, so a finished job's
/// snapshot record is the one kept when it ended: two snapshots share the same bytes for
/// it (nothing was encoded), and those bytes are still exactly the job. A job in flight is
/// encoded afresh (its token moves without its record).
#[test]
fn snapshots_reuse_the_records_of_finished_jobs_instead_of_encoding_them_again() {
    let mut s = Server::new();
    s.define(LINEAR);
    let done: Vec<String> = (0..3)
        .map(|n| s.create("lin", 1, json!({ "userId": format!("u{n}") })))
        .collect();
    for stage in ["prep", "check", "result"] {
        for _ in &done {
            let l = s.lease(W1, stage, T0).unwrap();
            s.complete(W1, &l, json!({ stage: true }));
        }
    }
    let open = s.create("lin", 1, json!({"userId": "open"}));
    let l = s.lease(W1, "prep", T0).unwrap();
    s.complete(W1, &l, json!({}));
    for engine in [&s.e, &s.restarted().e] {
        let (first, second) = (
            flow_records(&engine.snapshot()),
            flow_records(&engine.snapshot()),
        );
        for id in &done {
            assert_eq!(engine.flow_job(id).unwrap().status.as_str(), "done");
            assert_eq!(
                first[id].as_ptr(),
                second[id].as_ptr(),
                "{id} encoded again"
            );
            let fresh = FlowChange::Jobs {
                put: vec![engine.flow_job(id).unwrap().clone()],
                gone: Vec::new(),
            };
            assert_eq!(
                &first[id][..],
                &fresh.encode()[..],
                "{id}'s kept record is stale"
            );
        }
        assert_ne!(first[&open].as_ptr(), second[&open].as_ptr());
        let mut rebuilt = EngineCore::new();
        engine
            .snapshot()
            .into_iter()
            .for_each(|c| rebuilt.replay(c));
        for id in done.iter().chain([&open]) {
            assert_eq!(rebuilt.flow_job(id), engine.flow_job(id), "{id}");
        }
    }
    // Purged jobs leave no record behind in the next snapshot.
    s.e.tick(T0 + 61 * SEC);
    let after = flow_records(&s.e.snapshot());
    assert!(done.iter().all(|id| !after.contains_key(id)));
    assert!(after.contains_key(&open));
}
