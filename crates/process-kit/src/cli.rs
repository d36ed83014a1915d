//! Flag parsing for service binaries: help and version print as usual; any other error is
//! one line on stderr and exit code 2. `PROGRAM --probe URL` is the container health check
//! every service image runs: one GET (HTTPS trusting `TLS_CA_FILE`), exit 0 on a 2xx answer,
//! else one line and exit 1.

use std::path::PathBuf;
#[cfg(feature = "runtime")]
use std::time::Duration;

use clap::Parser;
use clap::error::ErrorKind;

#[cfg(feature = "runtime")]
/// A probe's budget for connecting and for each read and write: under the health check's
/// own timeout (2 s in deploy/Dockerfile), so a hung service fails the probe, not the check.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1_500);

/// How a port a process serves speaks: the same settings on every service and on the
/// executors' metrics port (`tls_kit::ServerTls::chosen` decides from them).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeTls {
    /// PEM certificate chain (leaf first) this port presents; with `TLS_KEY_FILE`, it serves
    /// HTTPS. Both are read again on SIGHUP.
    #[arg(long = "tls.cert", env = "TLS_CERT_FILE")]
    pub cert: Option<PathBuf>,
    /// PEM private key of `TLS_CERT_FILE`.
    #[arg(long = "tls.key", env = "TLS_KEY_FILE")]
    pub key: Option<PathBuf>,
    /// Serve plain HTTP: credentials, session ids and proofs cross the network in clear. Only
    /// for loopback, tests and a network you trust completely; without it (and without a
    /// certificate) the process does not start.
    #[arg(long = "unsafe-plaintext-http", env = "UNSAFE_PLAINTEXT_HTTP")]
    pub unsafe_plaintext_http: bool,
}

/// Parses `C` from the process's arguments and environment, or exits; `--probe URL` runs the
/// probe and exits.
pub fn parse_or_exit<C: Parser>(program: &str) -> C {
    #[cfg(feature = "runtime")]
    if let [flag, url] = std::env::args().skip(1).collect::<Vec<_>>().as_slice()
        && flag == "--probe"
    {
        probe_and_exit(program, url);
    }
    match C::try_parse() {
        Ok(config) => config,
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            err.exit()
        }
        Err(err) => {
            let rendered = err.to_string();
            let first = rendered
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ");
            eprintln!("{program}: {first}");
            std::process::exit(2);
        }
    }
}

#[cfg(feature = "runtime")]
fn probe_and_exit(program: &str, url: &str) -> ! {
    let ca = std::env::var_os("TLS_CA_FILE").filter(|v| !v.is_empty());
    match tls_kit::probe(url, ca.as_deref().map(std::path::Path::new), PROBE_TIMEOUT) {
        Ok(status) if (200..300).contains(&status) => std::process::exit(0),
        Ok(status) => {
            eprintln!("{program}: probe {url}: answered {status}");
            std::process::exit(1)
        }
        Err(err) => {
            eprintln!("{program}: probe: {err}");
            std::process::exit(1)
        }
    }
}
