//! Queue operations: naming, references that keep a queue alive, pauses, lease limits
//! (each logged as the queue's whole policy: see `policy.rs`).

use bytes::Bytes;

use crate::jobs::whole_secs_left;
use crate::queue::{Queue, QueueId};
use crate::timers::Timer;
use crate::{Engine, Millis, PAUSED_FOREVER};

impl Engine {
    /// The queue of that name, if it exists. Never creates one.
    pub fn queue_id(&self, name: &[u8]) -> Option<QueueId> {
        self.by_name.get(name).copied()
    }

    /// The queue of that name, created if needed.
    pub fn queue_id_or_create(&mut self, name: &[u8]) -> QueueId {
        if let Some(q) = self.queue_id(name) {
            return q;
        }
        let name = Bytes::copy_from_slice(name);
        let queue = Queue::new(name.clone());
        let q = match self.free_queue_slots.pop() {
            Some(q) => {
                self.queues[q as usize] = Some(queue);
                q
            }
            None => {
                self.queues.push(Some(queue));
                (self.queues.len() - 1) as QueueId
            }
        };
        self.by_name.insert(name, q);
        self.order.push(q);
        q
    }

    /// A queue by id. Panics on an id that does not exist: ids come from this engine.
    pub fn queue(&self, q: QueueId) -> &Queue {
        self.queues[q as usize].as_ref().expect("live queue id")
    }

    pub(crate) fn queue_mut(&mut self, q: QueueId) -> &mut Queue {
        self.queues[q as usize].as_mut().expect("live queue id")
    }

    /// Live queues in listing order.
    pub fn queues(&self) -> impl Iterator<Item = &Queue> + '_ {
        self.order.iter().map(|&q| self.queue(q))
    }

    pub fn queue_count(&self) -> usize {
        self.order.len()
    }

    /// Registers a producer (beanstalkd `use`) of the queue; keeps it alive.
    pub fn add_producer(&mut self, q: QueueId) {
        self.queue_mut(q).producers += 1;
    }
    pub fn remove_producer(&mut self, q: QueueId) {
        self.queue_mut(q).producers -= 1;
        self.drop_queue_if_unreferenced(q);
    }
    /// Registers a consumer (beanstalkd `watch`, Gearman `CAN_DO`); keeps it alive.
    pub fn add_consumer(&mut self, q: QueueId) {
        self.queue_mut(q).consumers += 1;
    }
    pub fn remove_consumer(&mut self, q: QueueId) {
        self.queue_mut(q).consumers -= 1;
        self.drop_queue_if_unreferenced(q);
    }
    /// Keeps a queue alive with no jobs or clients (beanstalkd's `default`, Gearman functions).
    pub fn pin(&mut self, q: QueueId) {
        self.queue_mut(q).pins += 1;
    }
    pub fn unpin(&mut self, q: QueueId) {
        self.queue_mut(q).pins -= 1;
        self.drop_queue_if_unreferenced(q);
    }

    pub(crate) fn drop_queue_if_unreferenced(&mut self, q: QueueId) {
        if !self.queue(q).is_unreferenced() {
            return;
        }
        let queue = self.queues[q as usize].take().expect("live queue id");
        if queue.paused_until > 0 && queue.paused_until != PAUSED_FOREVER {
            self.timers.remove(queue.paused_until, Timer::Unpause(q));
        }
        self.log_forgotten_policy(&queue);
        self.by_name.remove(&queue.name);
        if let Some(pos) = self.order.iter().position(|&x| x == q) {
            self.order.swap_remove(pos);
        }
        self.free_queue_slots.push(q);
    }

    /// Pauses handing out jobs from a queue for `secs` seconds (0 resumes now). Logged
    /// with its end time, so it outlasts a restart.
    pub fn pause(&mut self, q: QueueId, secs: u32, now: Millis) {
        let before = self.queue(q).policy();
        self.cancel_unpause(q);
        let until = now + secs as Millis * 1000;
        let queue = self.queue_mut(q);
        queue.cmd_pause += 1;
        queue.pause_secs = secs;
        if secs == 0 {
            queue.paused_until = 0;
            queue.pause_secs = 0;
            self.to_serve.push(q);
        } else {
            queue.paused_until = until;
            self.timers.add(until, Timer::Unpause(q));
        }
        self.policy_changed(q, before);
        self.serve_waiters(now);
    }

    /// Pauses a queue until [`Engine::resume`] (an operator's pause, jobd's `pause`).
    /// Jobs are still accepted; none is handed out. Logged, so it outlasts a restart.
    pub fn pause_forever(&mut self, q: QueueId) {
        let before = self.queue(q).policy();
        self.cancel_unpause(q);
        let queue = self.queue_mut(q);
        queue.cmd_pause += 1;
        queue.pause_secs = u32::MAX;
        queue.paused_until = PAUSED_FOREVER;
        self.policy_changed(q, before);
    }

    /// Ends a pause of either kind now, and hands out what waiters can take.
    pub fn resume(&mut self, q: QueueId, now: Millis) {
        let before = self.queue(q).policy();
        self.cancel_unpause(q);
        let queue = self.queue_mut(q);
        queue.paused_until = 0;
        queue.pause_secs = 0;
        self.policy_changed(q, before);
        self.to_serve.push(q);
        self.serve_waiters(now);
        self.drop_queue_if_unreferenced(q);
    }

    pub(crate) fn cancel_unpause(&mut self, q: QueueId) {
        let old = self.queue(q).paused_until;
        if old > 0 && old != PAUSED_FOREVER {
            self.timers.remove(old, Timer::Unpause(q));
        }
    }

    /// Whole seconds until a paused queue resumes (0 when not paused).
    pub fn pause_left_secs(&self, q: QueueId, now: Millis) -> u64 {
        whole_secs_left(self.queue(q).paused_until, now)
    }

    /// Limits how many jobs of a queue may be leased at once (0: no limit): a jobd
    /// target's concurrency, a flow stage's or WMP queue's. The engine enforces it where it
    /// picks a job, so every protocol's reserve respects it, and serves waiters again when a
    /// lease ends or the limit grows. Logged as part of the queue's policy.
    pub fn set_lease_limit(&mut self, q: QueueId, limit: u32, now: Millis) {
        let before = self.queue(q).policy();
        self.queue_mut(q).lease_limit = limit;
        self.policy_changed(q, before);
        self.to_serve.push(q);
        self.serve_waiters(now);
    }
}
