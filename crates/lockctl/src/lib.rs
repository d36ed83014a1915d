//! `lockctl`: fenced locks from the shell, over the SDK (`lock-client`), which is the only code
//! that speaks the lock HTTP surface (the workspace's module rule). The binary (`main.rs`) only
//! parses the command line, runs [`execute`] on a current-thread runtime and turns the outcome into
//! an exit code; flags, environment and exit codes: `lockctl --help` and the lockctl section of
//! `docs/contracts/C5-config-build-and-naming.md`.
//!
//! - `session open --owner ID [--ttl 10s]` / `session close SESSION`: a session kept across
//!   invocations. Nothing heartbeats it (lockctl exits after each command): it expires after
//!   its TTL, with its grants.
//! - `acquire KEY --session SESSION [--ttl 10s] [--wait 2s]`, `release KEY --session SESSION
//!   --token N`: one-shot acquire and release in such a session (`LockClient::acquire_as`,
//!   `release_as`).
//! - `inspect KEY` (who holds it), `revoke KEY` (with `LOCK_ADMIN_TOKEN`).
//! - `run KEY [--ttl 10s] [--wait 30s] [--grace 1.5s] -- CMD ARGS…` ([`run`]): hold KEY, with
//!   heartbeats, for as long as CMD runs; stop CMD the moment the SDK declares the lock lost.
//! - `fence-check KEY URL [--claim-url URL] [--bearer-env VAR]` ([`fence_check`]): the
//!   conformance kit for fenced resources: which of the fence's promises URL keeps.
//! - `credential NAME --roles … --secret-file PATH` ([`credential`]): a caller for a
//!   credentials file: the secret to the file, the line to stdout.

pub mod cli;
mod commands;
mod credential;
pub mod error;
mod fence_check;
pub mod output;
pub mod run;

use std::process::ExitCode;

use clap::error::ErrorKind;

pub use cli::Cli;
pub use error::{CtlError, code};

/// Runs the parsed command. `Ok` carries the exit code (0, or `run`'s CMD's own).
pub async fn execute(cli: Cli) -> Result<u8, CtlError> {
    use cli::{Command, SessionCommand};
    let global = &cli.global;
    match cli.command {
        Command::Session(SessionCommand::Open(args)) => commands::session_open(global, args).await,
        Command::Session(SessionCommand::Close(args)) => {
            commands::session_close(global, args).await
        }
        Command::Acquire(args) => commands::acquire(global, args).await,
        Command::Release(args) => commands::release(global, args).await,
        Command::Inspect(args) => commands::inspect(global, args).await,
        Command::Revoke(args) => commands::revoke(global, args).await,
        Command::Run(args) => run::run(global, args).await,
        Command::Elect(args) => run::run(global, args.into()).await,
        Command::Leader(args) => commands::leader(global, args).await,
        Command::Watch(args) => commands::watch(global, args).await,
        Command::FenceCheck(args) => fence_check::fence_check(global, args).await,
        Command::Credential(args) => credential::credential(global, args),
    }
}

/// What a command-line parse error becomes: `--help` and `--version` print and exit 0;
/// anything else is one line `lockctl: <error>` on stderr and exit 64 (`EX_USAGE`).
pub fn usage_exit(err: &clap::Error) -> ExitCode {
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = err.print();
        return ExitCode::SUCCESS;
    }
    let message = match err.kind() {
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => "a command is required".to_owned(),
        _ => first_paragraph(&err.to_string()),
    };
    eprintln!("lockctl: {message} (lockctl --help for usage)");
    ExitCode::from(code::USAGE)
}

/// The message of a rendered clap error on one line: its first paragraph (clap continues a
/// message on indented lines, e.g. the missing arguments), without `error: `.
fn first_paragraph(rendered: &str) -> String {
    let words: Vec<&str> = rendered
        .trim_start()
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = words.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    if line.is_empty() {
        "invalid arguments".into()
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line() {
        assert_eq!(
            first_paragraph(
                "error: the following required arguments were not provided:\n  <CMD>...\n\nUsage: lockctl run <KEY> -- <CMD>...\n"
            ),
            "the following required arguments were not provided: <CMD>..."
        );
        assert_eq!(first_paragraph(""), "invalid arguments");
    }
}
