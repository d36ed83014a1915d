//! `--probe URL`: one GET of a service's own health route, for the health check of an image
//! that holds nothing but the service (no curl, no openssl; busybox's own TLS offers no
//! cipher suite rustls accepts). Blocking, std and rustls only: a probe is a process of its
//! own that lives for one request. HTTPS trusts the deployment's CA (`TLS_CA_FILE`), so the
//! probe checks the certificate the service presents as every client does.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use rustls_pki_types::ServerName;

use crate::{TlsError, read_certs};

/// The most of an answer a probe reads: its status line is all it needs.
const ANSWER_MAX_BYTES: u64 = 64 * 1024;

/// GETs `url` (`http://` or `https://host:port/path`) once within `timeout` for connecting
/// and for each read and write, and returns the answer's status code.
pub fn probe(url: &str, ca_file: Option<&Path>, timeout: Duration) -> Result<u16, TlsError> {
    let fail = |message: String| TlsError::new(url, message);
    let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        (None, None) => return Err(fail("expected http:// or https://".into())),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, "/"),
    };
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| fail(format!("{authority}: {e}")))?
        .next()
        .ok_or_else(|| fail(format!("{authority}: no address")))?;
    let tcp = TcpStream::connect_timeout(&addr, timeout).map_err(|e| fail(e.to_string()))?;
    tcp.set_read_timeout(Some(timeout))
        .and_then(|()| tcp.set_write_timeout(Some(timeout)))
        .map_err(|e| fail(e.to_string()))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    if https {
        let ca = ca_file.ok_or_else(|| {
            fail("TLS_CA_FILE is not set: an HTTPS probe trusts the deployment's CA".into())
        })?;
        let mut roots = RootCertStore::empty();
        for cert in read_certs(ca)? {
            roots
                .add(cert)
                .map_err(|e| TlsError::new(ca.display().to_string(), e))?;
        }
        let config = ClientConfig::builder_with_provider(crate::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from(host.to_owned()).map_err(|e| fail(e.to_string()))?;
        let connection =
            ClientConnection::new(Arc::new(config), name).map_err(|e| fail(e.to_string()))?;
        let mut stream = StreamOwned::new(connection, tcp);
        stream
            .write_all(request.as_bytes())
            .map_err(|e| fail(e.to_string()))?;
        read_answer(&mut stream, &mut answer).map_err(fail)?;
    } else {
        let mut tcp = tcp;
        tcp.write_all(request.as_bytes())
            .map_err(|e| fail(e.to_string()))?;
        read_answer(&mut tcp, &mut answer).map_err(fail)?;
    }
    status_of(&answer).ok_or_else(|| fail("no HTTP status line in the answer".into()))
}

/// Reads until the peer closes, or the cap; a close without TLS's close_notify still leaves
/// what arrived (the status line is all a probe needs).
fn read_answer(stream: &mut impl Read, answer: &mut Vec<u8>) -> Result<(), String> {
    match stream.take(ANSWER_MAX_BYTES).read_to_end(answer) {
        Ok(_) => Ok(()),
        Err(_) if status_of(answer).is_some() => Ok(()),
        Err(err) => Err(err.to_string()),
    }
}

/// The status code of an HTTP/1.x answer's first line.
fn status_of(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    words.next().filter(|w| w.starts_with("HTTP/1."))?;
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_line_is_read_and_anything_else_is_not() {
        assert_eq!(
            status_of(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
            Some(200)
        );
        assert_eq!(
            status_of(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_of(b"\x15\x03\x03"), None);
        assert_eq!(status_of(b""), None);
    }

    #[test]
    fn a_url_it_cannot_use_is_an_error_naming_it() {
        let err = probe("ftp://x", None, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("ftp://x"), "{err}");
        let err = probe("https://127.0.0.1:1/health", None, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    }
}
