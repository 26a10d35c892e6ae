//! Decision 4 of docs/wmp.md: a GIVE never yields a job outside the worker's roles.

use jobyard_wmp_wire::message::Give;

/// The queues a GIVE may be served from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Any queue (only from a remembered READY without `roles`); `prefer` (GIVE's `queue`)
    /// first if it has a ready job.
    Any {
        /// Try this queue first.
        prefer: Option<String>,
    },
    /// Only these queues, the preferred one (GIVE's `queue`, if allowed) first. Never empty.
    Only(Vec<String>),
    /// Nothing may be chosen: answer NO.
    Nothing,
}

/// The effective roles of a GIVE: its own `roles`; else the remembered READY's roles
/// (`Some(None)` = remembered without roles = any queue); else GIVE's `queue` alone; else
/// nothing. `remembered` is `None` when the manager has no READY for the path.
pub fn effective_roles(give: &Give, remembered: Option<Option<&[String]>>) -> Choice {
    let allowed: Option<Vec<String>> = match (&give.roles, remembered) {
        (Some(roles), _) => Some(roles.clone()),
        (None, Some(Some(roles))) => Some(roles.to_vec()),
        (None, Some(None)) => None,
        (None, None) => match &give.queue {
            Some(q) => Some(vec![q.clone()]),
            None => return Choice::Nothing,
        },
    };
    match allowed {
        None => Choice::Any {
            prefer: give.queue.clone(),
        },
        Some(mut queues) => {
            queues.dedup();
            if queues.is_empty() {
                return Choice::Nothing;
            }
            if let Some(q) = &give.queue {
                if let Some(i) = queues.iter().position(|r| r == q) {
                    let preferred = queues.remove(i);
                    queues.insert(0, preferred);
                }
            }
            Choice::Only(queues)
        }
    }
}
