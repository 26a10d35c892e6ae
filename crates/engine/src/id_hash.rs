//! Hashing for the integer ids the server hands out (job ids, session ids).
//!
//! The std maps hash with SipHash, which guards against clients choosing keys that collide.
//! A job or session id is never chosen by a client: the server hands them out from a
//! counter, so the guard buys nothing here, and SipHash costs a large share of each job's
//! lookups (put, reserve and delete each find the job; perf of pipelined puts showed the
//! job table's insert and find among the server's hottest functions). One 64 × 64 → 128-bit
//! multiply, its halves folded together, mixes every input bit into the low bits (which
//! pick the bucket) and the high ones (the tag), so ids a stride apart (a consumer of one
//! queue among eight sees every eighth id) still spread over the whole table.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// An odd constant with bits spread over the whole word (2^64 divided by the golden ratio).
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// Mixes one 64-bit id into a well-spread 64-bit hash.
#[inline]
pub fn mix(id: u64) -> u64 {
    let full = u128::from(id ^ MIX) * u128::from(MIX);
    (full as u64) ^ ((full >> 64) as u64)
}

/// The hasher: meant for one `u64`; anything else is folded in eight bytes at a time.
#[derive(Clone, Copy, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn write_u64(&mut self, id: u64) {
        self.0 = mix(self.0 ^ id);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`IdHasher`]s for the maps keyed by server-assigned ids.
#[derive(Clone, Copy, Default, Debug)]
pub struct IdHash;

impl BuildHasher for IdHash {
    type Hasher = IdHasher;

    #[inline]
    fn build_hasher(&self) -> IdHasher {
        IdHasher::default()
    }
}

/// A map keyed by a server-assigned id.
pub type IdMap<K, V> = HashMap<K, V, IdHash>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids a power of two apart must not pile into a fraction of the buckets.
    #[test]
    fn strided_ids_spread_over_the_low_and_high_bits() {
        for stride in [1u64, 2, 8, 64, 1024] {
            let buckets = 256;
            let mut low = vec![0u32; buckets];
            let mut high = vec![0u32; 128];
            for n in 0..(buckets as u64 * 64) {
                let h = mix(1_000_000 + n * stride);
                low[(h % buckets as u64) as usize] += 1;
                high[(h >> 57) as usize] += 1;
            }
            let (min, max) = (low.iter().min().unwrap(), low.iter().max().unwrap());
            assert!(
                *min >= 16 && *max <= 128,
                "stride {stride}: buckets {min}..{max}"
            );
            assert!(
                high.iter().all(|&c| c > 0),
                "stride {stride}: a tag never used"
            );
        }
    }

    #[test]
    fn a_map_keyed_by_ids_works_as_a_map() {
        let mut m: IdMap<u64, u64> = IdMap::default();
        for id in 0..10_000u64 {
            m.insert(id * 8, id);
        }
        assert_eq!(m.len(), 10_000);
        assert!((0..10_000u64).all(|id| m[&(id * 8)] == id));
        assert!(!m.contains_key(&1));
    }
}
