//! The log's side of bodies kept only in the log: the places the writer published, and
//! reading a body back from one.

use std::io;

use jobyard_engine::{JobId, LogRef};

use super::backend::LogBackend;
use super::{with_shared, Log};
use crate::bodies::{BodyFiles, Located};

impl Log {
    /// Whether bodies are reported and read back ([`crate::LogOptions::bodies_in_log`]).
    pub fn bodies_in_log(&self) -> bool {
        with_shared!(self, shared => {
            shared.backend.bodies().is_some()

        })
    }

    /// Where bodies were written (or copied by compaction) since the last call: the
    /// engine may keep these places instead of the bodies. One atomic load when none.
    pub fn take_located(&self) -> Located {
        with_shared!(self, shared => {
            shared
                .backend
                .bodies()
                .map_or_else(Located::default, BodyFiles::take_located)

        })
    }

    /// Returns the `written` list of a [`Located`] the engine has finished with, so the
    /// writer's next places go into memory already allocated (see
    /// `BodyFiles::give_back`).
    pub fn give_back_located(&self, written: Vec<(JobId, LogRef)>) {
        with_shared!(self, shared => {
            if let Some(bodies) = shared.backend.bodies() {
                bodies.give_back(written);
            }

        })
    }

    /// Bodies read back from the log so far, and the `pread`s that read them (fewer when
    /// bodies are read in the order they were written: see `read_ahead`).
    pub fn body_read_stats(&self) -> (u64, u64) {
        with_shared!(self, shared => {
            shared
                .backend
                .bodies()
                .map_or((0, 0), BodyFiles::read_stats)

        })
    }

    /// Reads a body back from the log (one `pread`, or none when read ahead).
    pub fn read_body(&self, at: LogRef) -> io::Result<Vec<u8>> {
        with_shared!(self, shared => {
            match shared.backend.bodies() {
                Some(bodies) => bodies.read(at),
                None => Err(io::Error::other("bodies are not kept in the log")),
            }

        })
    }
}
