//! Flag parsing for service binaries: help and version print as usual; any other error is
//! one line on stderr and exit code 2.

use clap::Parser;
use clap::error::ErrorKind;

/// Parses `C` from the process's arguments and environment, or exits.
pub fn parse_or_exit<C: Parser>(program: &str) -> C {
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
