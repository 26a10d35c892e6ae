//! A ring of the newest `capacity` values, allocated whole when made: a series never grows
//! past what it was sized for, however long the server runs.

/// The newest values pushed, at most `capacity` of them.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    slots: Box<[T]>,
    /// Where the next value goes.
    head: usize,
    len: usize,
}

impl<T: Copy + Default> Ring<T> {
    /// An empty ring holding at most `capacity` values (at least one).
    pub(crate) fn new(capacity: usize) -> Ring<T> {
        Ring {
            slots: vec![T::default(); capacity.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// Adds the newest value, dropping the oldest when full.
    pub(crate) fn push(&mut self, value: T) {
        self.slots[self.head] = value;
        self.head = (self.head + 1) % self.slots.len();
        self.len = (self.len + 1).min(self.slots.len());
    }

    /// The newest `n` values (fewer if fewer were pushed), oldest first.
    pub(crate) fn newest(&self, n: usize) -> Vec<T> {
        let n = n.min(self.len);
        let cap = self.slots.len();
        (0..n)
            .map(|i| self.slots[(self.head + cap - n + i) % cap])
            .collect()
    }

    /// Bytes of its slots.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_newest_values_in_order() {
        let mut ring = Ring::<u32>::new(3);
        assert!(ring.newest(5).is_empty());
        for v in 1..=5 {
            ring.push(v);
        }
        assert_eq!(ring.len, 3);
        assert_eq!(ring.newest(5), vec![3, 4, 5]);
        assert_eq!(ring.newest(2), vec![4, 5]);
        assert_eq!(ring.bytes(), 3 * 4, "never grows past its capacity");
    }
}
