//! `lockctl` binary: parse, run the command on a current-thread runtime, exit with its code.
//! Everything else is in the library (`lockctl::execute`).

use std::process::ExitCode;

use clap::Parser;
use lockctl::{Cli, output};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return lockctl::usage_exit(&err),
    };
    let json = cli.global.json;
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| lockctl::CtlError::Failed(format!("start the runtime: {e}")))
        .and_then(|runtime| runtime.block_on(lockctl::execute(cli)));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            output::report(&err, json);
            ExitCode::from(err.exit_code())
        }
    }
}
