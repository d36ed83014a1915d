//! JSON bodies on the answers hyper's HTTP/1 parser writes by itself.
//!
//! When a request cannot be parsed (a malformed method, path, header or version: 400; a URI
//! too long: 414; headers too large: 431), hyper answers before any of our layers run, with
//! an empty body. This connection wrapper recognises exactly that answer on its way out — a
//! 400, 414 or 431 head with `content-length: 0` and nothing after it, which no handler of
//! ours can produce because every error we write carries a JSON body — and writes our
//! `{"code","message"}` answer in its place. Everything else passes through untouched. Every
//! served port wraps its connections in it: the services' accept loop (service-kit) and the
//! executor's metrics port.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The answers this wrapper writes: status, reason phrase, the error code of the services'
/// `{"code","message"}` body (lock-api's `ErrorCode` wire names; service-kit tests that they
/// agree) and its message. Messages hold no character JSON would escape.
pub const PARSE_ERROR_ANSWERS: [(u16, &str, &str, &str); 3] = [
    (
        400,
        "Bad Request",
        "INVALID_ARGUMENT",
        "request: the request line or a header could not be parsed (malformed method, path, header or version)",
    ),
    (
        414,
        "URI Too Long",
        "URI_TOO_LONG",
        "request: the URI is longer than this server accepts",
    ),
    (
        431,
        "Request Header Fields Too Large",
        "HEADERS_TOO_LARGE",
        "request: the headers are larger than this server accepts",
    ),
];

/// The head hyper writes for a parse error carries this header and no body.
const EMPTY_BODY_HEADER: &[u8] = b"\r\ncontent-length: 0\r\n";

/// A connection whose parser-level error answers leave as JSON.
#[derive(Debug)]
pub struct JsonParseErrors<S> {
    inner: S,
    /// A replacement answer still to be written, and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> JsonParseErrors<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            pending: None,
        }
    }
}

/// Our answer in place of `head`, when `head` is one of hyper's bodiless parse-error answers.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    if !head.starts_with(b"HTTP/1.1 4") || !head.ends_with(b"\r\n\r\n") || head.len() < 12 {
        return None;
    }
    let status = std::str::from_utf8(&head[9..12])
        .ok()?
        .parse::<u16>()
        .ok()?;
    let (status, reason, code, message) = PARSE_ERROR_ANSWERS
        .into_iter()
        .find(|(answers, ..)| *answers == status)?;
    let head_lower = head.to_ascii_lowercase();
    if !head_lower
        .windows(EMPTY_BODY_HEADER.len())
        .any(|w| w == EMPTY_BODY_HEADER)
    {
        return None;
    }
    let body = format!(r#"{{"code":"{code}","message":"{message}"}}"#);
    Some(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncWrite + Unpin> JsonParseErrors<S> {
    /// Writes what is left of a replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written >= bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` in place of hyper's parse-error answer, if it is one.
    fn substitute(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Option<Poll<io::Result<usize>>> {
        let answer = replacement(buf)?;
        self.pending = Some((answer, 0));
        // The waker is registered if the socket is full; hyper flushes next.
        Some(match self.poll_pending(cx) {
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            _ => Poll::Ready(Ok(buf.len())),
        })
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonParseErrors<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(done) = this.substitute(cx, buf) {
            return done;
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (nonempty.next(), nonempty.next()) {
            if let Some(done) = this.substitute(cx, only) {
                return done;
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bodiless_parse_error_heads_are_replaced() {
        let hyper_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 05:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(replacement(hyper_431).expect("replaced")).expect("utf-8");
        assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
        assert!(out.contains("content-type: application/json"), "{out}");
        assert!(out.ends_with(r#""code":"HEADERS_TOO_LARGE","message":"request: the headers are larger than this server accepts"}"#), "{out}");
        // Our own JSON errors, successes and other statuses pass through.
        assert_eq!(replacement(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 60\r\n\r\n"), None);
        assert_eq!(
            replacement(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            None
        );
        assert_eq!(
            replacement(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"),
            None
        );
        assert_eq!(
            replacement(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}"),
            None
        );
    }
}
