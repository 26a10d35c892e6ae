//! Fan-out and fan-in. A job entering a stage that declares children becomes one child
//! job per entry of its `children:<stage>:params` field (Guild's ParentWorker, done by the
//! server with no worker for the stage); each child's end writes the child's final state
//! into the parent's `children:<stage>:results` in the same transition, and the last one
//! moves the parent on. No parent worker waits and nothing polls.

use serde_json::{Map, Value};

use crate::flows::{uuid_v7, FlowJob, FlowStatus, Touched};
use crate::{Engine, Millis};

/// Most children one fan-out may create.
pub const MAX_CHILDREN: usize = 10_000;

impl Engine {
    /// Creates the children of the job's stage from its `children:<stage>:params`. A spec
    /// that names no declared child (or has a bad priority) fails the parent with that
    /// reason, creating none; an empty (or absent) list moves it on at once.
    pub(crate) fn fan_out(&mut self, id: &str, now: Millis, hops: u32, touched: &mut Touched) {
        touched.put(id);
        let parent = &self.flows.jobs[id];
        let stage = self
            .stage_of(parent)
            .cloned()
            .expect("a fanning-out stage is declared");
        let params_key = format!("children:{}:params", stage.name);
        let specs = match parent.fields.get(&params_key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(_) => {
                let msg = format!("{params_key} is not an array of child specs");
                return self.flow_finish(id, FlowStatus::Failed, Some(msg), now, hops, touched);
            }
        };
        if specs.len() > MAX_CHILDREN {
            let msg = format!("a stage fans out into at most {MAX_CHILDREN} children");
            return self.flow_finish(id, FlowStatus::Failed, Some(msg), now, hops, touched);
        }
        // Check every spec before creating any child: nothing half-applied.
        let mut planned = Vec::with_capacity(specs.len());
        for (n, spec) in specs.into_iter().enumerate() {
            let Value::Object(fields) = spec else {
                let msg = format!("child spec {n} of {params_key} is not an object");
                return self.flow_finish(id, FlowStatus::Failed, Some(msg), now, hops, touched);
            };
            let child_name = fields.get("childName").and_then(Value::as_str);
            let Some(child) = child_name.and_then(|c| stage.children.iter().find(|d| d.name == c))
            else {
                let msg = format!(
                    "child spec {n} of {params_key} names no child stage {} declares",
                    stage.name
                );
                return self.flow_finish(id, FlowStatus::Failed, Some(msg), now, hops, touched);
            };
            let priority = match fields.get("priority") {
                None | Some(Value::Null) => parent.priority.clamp(1, child.priorities),
                Some(p) => match p.as_u64() {
                    Some(p) if (1..=child.priorities as u64).contains(&p) => p as u32,
                    _ => {
                        let msg = format!(
                            "child spec {n} of {params_key}: priority is 1 to {}",
                            child.priorities
                        );
                        return self.flow_finish(
                            id,
                            FlowStatus::Failed,
                            Some(msg),
                            now,
                            hops,
                            touched,
                        );
                    }
                },
            };
            planned.push((child.name.clone(), priority, fields));
        }
        let (flow, correlation, retention_sec) = (
            parent.flow.clone(),
            parent.fields.get("correlationId").cloned(),
            parent.retention_sec,
        );
        let mut children = Vec::with_capacity(planned.len());
        for (child_name, priority, mut fields) in planned {
            let engine_id = self.next_id;
            self.next_id += 1;
            self.total_jobs += 1;
            let child_stage = format!("{}:{child_name}", stage.name);
            let child_id = format!("{child_stage}:{}", uuid_v7(now, engine_id));
            fields.insert("flowName".into(), child_stage.clone().into());
            fields.insert("priority".into(), priority.into());
            fields.insert("createdAtTimestamp".into(), now.into());
            if let Some(c) = &correlation {
                fields.entry("correlationId").or_insert_with(|| c.clone());
            }
            let job = FlowJob {
                id: child_id.clone(),
                flow: flow.clone(),
                engine_id,
                stage: child_stage,
                status: FlowStatus::Waiting,
                priority,
                token: 0,
                ready_at: 0,
                fields,
                parent: Some(id.to_string()),
                children: Vec::new(),
                pending_children: 0,
                idempotency_key: None,
                lookups: Vec::new(),
                created: now,
                ended: None,
                retention_sec,
            };
            self.flows.jobs.insert(child_id.clone(), job);
            self.flows.index(&child_id);
            self.flow_enqueue(&child_id, now);
            touched.put(&child_id);
            children.push(child_id);
        }
        let count = children.len();
        let job = self.flows.jobs.get_mut(id).expect("parent exists");
        job.fields.insert(
            format!("children:{}:jobs", stage.name),
            Value::Array(children.iter().cloned().map(Value::from).collect()),
        );
        job.fields.insert(
            format!("children:{}:results", stage.name),
            Value::Array(vec![Value::Null; count]),
        );
        job.children = children;
        job.pending_children = count as u32;
        job.status = FlowStatus::WaitingChildren;
        if count == 0 {
            self.move_on_from_children(id, now, hops, touched);
        }
    }

    /// A child ended (done, failed or deleted): its state goes into the parent's results
    /// and, when it was the last, the parent moves on, all in the caller's transition.
    pub(crate) fn fan_in(
        &mut self,
        parent: &str,
        child: &str,
        now: Millis,
        hops: u32,
        touched: &mut Touched,
    ) {
        let Some(child_job) = self.flows.jobs.get(child) else {
            return;
        };
        let mut result: Map<String, Value> = child_job.fields.clone();
        result.insert("id".into(), child.into());
        if !self.flows.state_has_room(parent, &result) {
            // Too big to keep whole in the parent: its outcome, and where to read the rest.
            result.retain(|k, _| matches!(k.as_str(), "id" | "done" | "failed" | "failedErrorMsg"));
            result.insert("resultTooLarge".into(), true.into());
        }
        let Some(job) = self.flows.jobs.get_mut(parent) else {
            return;
        };
        let Some(slot) = job.children.iter().position(|c| c == child) else {
            return;
        };
        if job.status != FlowStatus::WaitingChildren {
            return;
        }
        touched.put(parent);
        let key = format!("children:{}:results", job.stage);
        if let Some(Value::Array(results)) = job.fields.get_mut(&key) {
            if let Some(entry) = results.get_mut(slot) {
                if entry.is_null() {
                    *entry = Value::Object(result);
                    job.pending_children = job.pending_children.saturating_sub(1);
                }
            }
        }
        if job.pending_children == 0 {
            self.move_on_from_children(parent, now, hops, touched);
        }
    }

    /// Every child ended: the parent's stage counts as completed, and it moves to the
    /// stage's next (or finishes the flow).
    fn move_on_from_children(&mut self, id: &str, now: Millis, hops: u32, touched: &mut Touched) {
        let job = self.flows.jobs.get_mut(id).expect("parent exists");
        job.fields
            .insert("completed-queue".into(), job.stage.clone().into());
        let next = self
            .stage_of(&self.flows.jobs[id])
            .and_then(|s| s.next.clone().map(|n| (n, s.priority_diff)));
        match next {
            Some((next, diff)) => self.flow_advance(id, &next, diff, now, hops, touched),
            None => self.flow_finish(id, FlowStatus::Done, None, now, hops, touched),
        }
    }
}
