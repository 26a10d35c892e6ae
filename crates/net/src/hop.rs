//! Serving a connection with the adaptive model: on the runtime the [`Placement`] names,
//! moving to the other one whenever the placement changes.

use std::io;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::connection::{Conn, Exit, Link};
use crate::gate::Slot;
use crate::placement::{Placement, Where};
use crate::protocol::Protocol;

/// A socket that can leave one runtime's reactor and join another's. Held in its std form
/// (non-blocking) between runtimes.
pub(crate) trait Movable: Sized + Send + 'static {
    type Rd: AsyncRead + Unpin + Send;
    type Wr: AsyncWrite + Unpin + Send;
    /// Registers with the reactor of the runtime this is called on.
    fn register(self) -> io::Result<(Self::Rd, Self::Wr)>;
    /// Deregisters from its reactor.
    fn deregister(rd: Self::Rd, wr: Self::Wr) -> io::Result<Self>;
}

impl Movable for std::net::TcpStream {
    type Rd = tokio::net::tcp::OwnedReadHalf;
    type Wr = tokio::net::tcp::OwnedWriteHalf;
    fn register(self) -> io::Result<(Self::Rd, Self::Wr)> {
        Ok(tokio::net::TcpStream::from_std(self)?.into_split())
    }
    fn deregister(rd: Self::Rd, wr: Self::Wr) -> io::Result<Self> {
        rd.reunite(wr).map_err(io::Error::other)?.into_std()
    }
}

impl Movable for UnixStream {
    type Rd = tokio::net::unix::OwnedReadHalf;
    type Wr = tokio::net::unix::OwnedWriteHalf;
    fn register(self) -> io::Result<(Self::Rd, Self::Wr)> {
        Ok(tokio::net::UnixStream::from_std(self)?.into_split())
    }
    fn deregister(rd: Self::Rd, wr: Self::Wr) -> io::Result<Self> {
        rd.reunite(wr).map_err(io::Error::other)?.into_std()
    }
}

/// Spawns the connection on the runtime where connections belong now. `slot` is its place
/// at the gate, given back when the connection ends.
pub(crate) fn place<P: Protocol, S: Movable>(
    conn: Conn<P>,
    socket: S,
    placement: Arc<Placement>,
    slot: Slot,
) {
    let here = placement.current();
    placement
        .handle(here)
        .clone()
        .spawn(serve_here(conn, socket, placement, here, slot));
}

async fn serve_here<P: Protocol, S: Movable>(
    mut conn: Conn<P>,
    socket: S,
    placement: Arc<Placement>,
    here: Where,
    slot: Slot,
) {
    match turn(&mut conn, socket, &placement, here).await {
        Ok(Some(socket)) => {
            placement.count_move();
            place(conn, socket, placement, slot);
        }
        Ok(None) => conn.close(Ok(())),
        Err(e) => conn.close(Err(e)),
    }
}

/// Serves the connection on this runtime until it ends (`None`) or must move (its socket,
/// deregistered).
async fn turn<P: Protocol, S: Movable>(
    conn: &mut Conn<P>,
    socket: S,
    placement: &Placement,
    here: Where,
) -> io::Result<Option<S>> {
    let (rd, wr) = socket.register()?;
    let mut link = Link {
        rd,
        wr,
        conn,
        placed: Some((placement, here)),
    };
    match link.run().await? {
        Exit::Closed => Ok(None),
        Exit::Move => S::deregister(link.rd, link.wr).map(Some),
    }
}
