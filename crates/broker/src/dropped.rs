//! The bodies a turn of the engine let go of, freed after its lock is released.
//!
//! Freed there rather than under the lock, so other connections do not wait for a turn's
//! worth of `free`s. The list that carries them is kept per thread and used again: freeing
//! it each turn (a block of kilobytes) after the bodies made glibc's malloc sweep the
//! bodies just freed out of its fast bins at once, so the next puts' small allocations took
//! its slow path (docs/performance.md, the put cost).

use std::cell::Cell;

use jobyard_engine::{EngineCore, KEEP_DROPPED_LIST};

thread_local! {
    static SPARE: Cell<Vec<Box<[u8]>>> = const { Cell::new(Vec::new()) };
}

/// Bodies to free once the engine's lock is let go: declare it after the lock guard, so
/// that it drops after it.
#[derive(Default)]
pub(crate) struct DroppedBodies(Vec<Box<[u8]>>);

impl DroppedBodies {
    /// Takes the bodies the engine let go of this turn, into the thread's spare list.
    pub(crate) fn take_from(&mut self, engine: &mut EngineCore) {
        if self.0.capacity() == 0 {
            self.0 = SPARE.try_with(Cell::take).unwrap_or_default();
        }
        engine.move_dropped_bodies(&mut self.0);
    }
}

impl Drop for DroppedBodies {
    fn drop(&mut self) {
        if self.0.capacity() == 0 {
            return;
        }
        self.0.clear();
        if self.0.capacity() <= KEEP_DROPPED_LIST {
            let list = std::mem::take(&mut self.0);
            // During the thread's teardown the list is simply freed.
            let _ = SPARE.try_with(|spare| spare.set(list));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_used_again_by_the_same_thread() {
        let mut first = DroppedBodies::default();
        first.0.reserve(100);
        first.0.push(vec![1u8; 100].into_boxed_slice());
        let at = first.0.as_ptr();
        drop(first);
        let mut engine = EngineCore::new();
        let mut next = DroppedBodies::default();
        next.take_from(&mut engine);
        assert!(
            next.0.is_empty(),
            "the bodies were freed with the first turn"
        );
        assert_eq!(next.0.as_ptr(), at, "the same memory, not a new list");
        assert!(next.0.capacity() >= 100);
    }

    #[test]
    fn a_very_large_list_is_not_kept() {
        let mut big = DroppedBodies::default();
        big.0.reserve(KEEP_DROPPED_LIST + 1);
        drop(big);
        let mut next = DroppedBodies::default();
        next.take_from(&mut EngineCore::new());
        assert_eq!(next.0.capacity(), 0);
    }
}
