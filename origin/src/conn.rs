//! The origin's listener: plain TCP, with a per-connection hook that lets a handler put raw bytes
//! on the wire in place of its response.
//!
//! hyper never writes more body than a response's `content-length` declares (it cuts the body
//! short), so `x-origin-fault: overlong` cannot be expressed as an axum response. Instead the
//! handler hands the exact bytes to this connection's [`ConnTap`] (reachable through
//! `ConnectInfo<Conn>`); the next time hyper writes, [`TapIo`] sends those bytes, closes the
//! write side and silently discards what hyper writes from then on (the placeholder response,
//! which carries `connection: close`, so hyper ends the connection itself).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use axum::body::Bytes;
use axum::extract::connect_info::{Connected, IntoMakeServiceWithConnectInfo};
use axum::extract::ConnectInfo;
use axum::middleware::AddExtension;
use axum::serve::{IncomingStream, Listener, Serve};
use axum::Router;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Raw bytes waiting to replace the next response written on one connection.
#[derive(Clone, Default)]
pub struct ConnTap(Arc<Mutex<Option<Bytes>>>);

impl ConnTap {
    /// The next bytes hyper writes on this connection (the head of the response being built)
    /// are replaced by `raw`, after which the connection is closed.
    pub fn replace_next_response(&self, raw: Bytes) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(raw);
    }

    fn take(&self) -> Option<Bytes> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl fmt::Debug for ConnTap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConnTap")
    }
}

/// What a handler knows about its connection (`ConnectInfo<Conn>`).
#[derive(Clone, Debug)]
pub struct Conn {
    pub tap: ConnTap,
}

/// A TCP listener whose connections carry a [`ConnTap`] (and `TCP_NODELAY`).
pub struct TapListener(pub TcpListener);

impl Listener for TapListener {
    type Io = TapIo<TcpStream>;
    type Addr = Conn;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // axum's own accept loop (it retries and backs off on errors).
        let (stream, _remote) = Listener::accept(&mut self.0).await;
        let _ = stream.set_nodelay(true);
        let tap = ConnTap::default();
        (TapIo::new(stream, tap.clone()), Conn { tap })
    }

    /// An unattached tap: the listener itself has no connection.
    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr().map(|_| Conn {
            tap: ConnTap::default(),
        })
    }
}

impl Connected<IncomingStream<'_, TapListener>> for Conn {
    fn connect_info(stream: IncomingStream<'_, TapListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// `axum::serve` on a [`TapListener`], with `ConnectInfo<Conn>` in every request.
pub fn serve(
    listener: TcpListener,
    app: Router,
) -> Serve<
    TapListener,
    IntoMakeServiceWithConnectInfo<Router, Conn>,
    AddExtension<Router, ConnectInfo<Conn>>,
> {
    axum::serve(
        TapListener(listener),
        app.into_make_service_with_connect_info::<Conn>(),
    )
}

enum Replace {
    /// Nothing armed: bytes pass through.
    Off,
    /// Sending the replacement (what is left of it).
    Sending(Bytes),
    /// Sent and the write side closed: writes are discarded, reads see end of stream.
    Done,
}

/// A connection's I/O with its [`ConnTap`] applied.
pub struct TapIo<T> {
    inner: T,
    tap: ConnTap,
    state: Replace,
}

impl<T> TapIo<T> {
    pub fn new(inner: T, tap: ConnTap) -> Self {
        TapIo {
            inner,
            tap,
            state: Replace::Off,
        }
    }
}

impl<T: AsyncWrite + Unpin> TapIo<T> {
    /// Sends an armed replacement, if any; ready once nothing is left to send.
    fn poll_replace(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match &mut self.state {
                Replace::Off => match self.tap.take() {
                    Some(raw) => self.state = Replace::Sending(raw),
                    None => return Poll::Ready(Ok(())),
                },
                Replace::Sending(rest) => {
                    while !rest.is_empty() {
                        let n = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
                        if n == 0 {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        let _ = rest.split_to(n);
                    }
                    ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
                    ready!(Pin::new(&mut self.inner).poll_shutdown(cx))?;
                    self.state = Replace::Done;
                }
                Replace::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TapIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.state, Replace::Done) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TapIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_replace(cx))?;
        match this.state {
            Replace::Done => Poll::Ready(Ok(buf.len())),
            _ => Pin::new(&mut this.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replace(cx))?;
        match this.state {
            Replace::Done => Poll::Ready(Ok(())),
            _ => Pin::new(&mut this.inner).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replace(cx))?;
        match this.state {
            Replace::Done => Poll::Ready(Ok(())),
            _ => Pin::new(&mut this.inner).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn passes_through_until_armed_then_replaces_and_closes() {
        let (a, mut b) = tokio::io::duplex(1024);
        let tap = ConnTap::default();
        let mut io = TapIo::new(a, tap.clone());
        io.write_all(b"first ").await.unwrap();
        io.flush().await.unwrap();
        tap.replace_next_response(Bytes::from_static(b"raw bytes"));
        // What hyper writes from now on never reaches the peer.
        io.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        io.flush().await.unwrap();
        io.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"first raw bytes");
        // Reads on the replaced connection see its end.
        let mut buf = [0u8; 8];
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn unarmed_is_transparent() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut io = TapIo::new(a, ConnTap::default());
        io.write_all(b"hello").await.unwrap();
        b.write_all(b"back").await.unwrap();
        let mut buf = [0u8; 4];
        io.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"back");
        io.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
    }
}
