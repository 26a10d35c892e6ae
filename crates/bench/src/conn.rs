//! A TCP connection with a read buffer that hands out whole lines or frames without copying,
//! and a write buffer that goes out in one syscall. Loopback addresses only.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Resolves `addr` and refuses anything that is not a loopback address.
pub fn loopback(addr: &str) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .collect();
    match addrs.iter().find(|a| a.ip().is_loopback()) {
        Some(a) if addrs.iter().all(|a| a.ip().is_loopback()) => Ok(*a),
        _ => Err(format!(
            "{addr} is not a loopback address: this load generator only targets 127.0.0.0/8 or ::1"
        )),
    }
}

pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    pub out: Vec<u8>,
}

/// A range of the read buffer, valid until the next `fill`.
#[derive(Clone, Copy, Debug)]
pub struct Span(usize, usize);

impl Conn {
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            out: Vec::with_capacity(64 * 1024),
        })
    }

    /// Sends everything in `out`.
    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    /// Reads at least one more byte from the socket (EOF is an error).
    pub async fn fill(&mut self) -> io::Result<()> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let n = self.buf.len();
                self.buf.resize(n * 2, 0);
            }
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        self.end += n;
        Ok(())
    }

    pub fn get(&self, span: Span) -> &[u8] {
        &self.buf[span.0..span.1]
    }

    /// The next line already buffered, without its `\n` or `\r\n`.
    pub fn try_line(&mut self) -> Option<Span> {
        let avail = &self.buf[self.start..self.end];
        let nl = avail.iter().position(|&b| b == b'\n')?;
        let cr = usize::from(nl > 0 && avail[nl - 1] == b'\r');
        let span = Span(self.start, self.start + nl - cr);
        self.start += nl + 1;
        Some(span)
    }

    /// The next `n` bytes if already buffered.
    pub fn try_take(&mut self, n: usize) -> Option<Span> {
        if self.end - self.start < n {
            return None;
        }
        let span = Span(self.start, self.start + n);
        self.start += n;
        Some(span)
    }

    /// Waits for a whole line.
    pub async fn line(&mut self) -> io::Result<Span> {
        loop {
            if let Some(s) = self.try_line() {
                return Ok(s);
            }
            self.fill().await?;
        }
    }

    /// Waits for `n` bytes.
    pub async fn take(&mut self, n: usize) -> io::Result<Span> {
        loop {
            if let Some(s) = self.try_take(n) {
                return Ok(s);
            }
            self.fill().await?;
        }
    }

    /// Waits for one Gearman response frame: (type, data).
    pub async fn gearman_frame(&mut self) -> io::Result<(u32, Span)> {
        loop {
            if let Some(f) = self.try_gearman_frame()? {
                return Ok(f);
            }
            self.fill().await?;
        }
    }

    /// A whole Gearman response frame if already buffered.
    pub fn try_gearman_frame(&mut self) -> io::Result<Option<(u32, Span)>> {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 12 {
            return Ok(None);
        }
        if &avail[..4] != b"\0RES" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad Gearman response magic {:?}", &avail[..4]),
            ));
        }
        let kind = u32::from_be_bytes(avail[4..8].try_into().unwrap());
        let size = u32::from_be_bytes(avail[8..12].try_into().unwrap()) as usize;
        if avail.len() < 12 + size {
            return Ok(None);
        }
        let span = Span(self.start + 12, self.start + 12 + size);
        self.start += 12 + size;
        Ok(Some((kind, span)))
    }

    /// Appends one Gearman request frame to `out`; `args` are joined with NUL bytes.
    pub fn gearman_request(&mut self, kind: u32, args: &[&[u8]]) {
        let size: usize =
            args.iter().map(|a| a.len()).sum::<usize>() + args.len().saturating_sub(1);
        self.out.extend_from_slice(b"\0REQ");
        self.out.extend_from_slice(&kind.to_be_bytes());
        self.out.extend_from_slice(&(size as u32).to_be_bytes());
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                self.out.push(0);
            }
            self.out.extend_from_slice(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_accepted() {
        assert!(loopback("127.0.0.1:11300").is_ok());
        assert!(loopback("[::1]:4730").is_ok());
        assert!(loopback("10.0.0.1:11300").is_err());
        assert!(loopback("192.168.1.1:4730").is_err());
    }

    #[tokio::test]
    async fn frames_and_lines_survive_split_reads() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut req = [0u8; 12 + 5];
            s.read_exact(&mut req).await.unwrap();
            // A response frame cut in two writes, then a line.
            s.write_all(b"\0RES\0\0\0\x08\0\0\0\x03H:").await.unwrap();
            s.flush().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            s.write_all(b"1INSERTED 5\r\n").await.unwrap();
            req
        });
        let mut c = Conn::connect(addr).await.unwrap();
        c.gearman_request(18, &[b"f", b"", b"ab"]);
        c.flush().await.unwrap();
        let (kind, span) = c.gearman_frame().await.unwrap();
        assert_eq!((kind, c.get(span)), (8, &b"H:1"[..]));
        let line = c.line().await.unwrap();
        assert_eq!(c.get(line), b"INSERTED 5");
        let req = server.await.unwrap();
        assert_eq!(&req[..], b"\0REQ\0\0\0\x12\0\0\0\x05f\0\0ab");
    }
}
