//! Free loopback ports.

use std::net::TcpListener;

/// A TCP port on 127.0.0.1 that was free a moment ago. Another process may take it before
/// the caller binds it; callers that start servers retry on a bind failure.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port on 127.0.0.1");
    listener
        .local_addr()
        .expect("local address of a bound listener")
        .port()
}
