//! What lockctl prints. One line per record: with `--json` one JSON object, else
//! `key=value` pairs separated by spaces with values shell-quoted where needed, so that
//! `eval "$(lockctl session open --owner me)"` sets `$session_id` and `$ttl_ms`. `null`
//! fields are left out of the text form.

use std::io::Write;

use serde_json::Value;

use crate::error::CtlError;

/// The fields of one output line, in order.
pub type Fields = Vec<(&'static str, Value)>;

/// Renders `fields` as one line (without the newline).
pub fn render(fields: &[(&'static str, Value)], json: bool) -> String {
    if json {
        let body: Vec<String> = fields
            .iter()
            .map(|(key, value)| format!("{}:{value}", Value::from(*key)))
            .collect();
        return format!("{{{}}}", body.join(","));
    }
    fields
        .iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(key, value)| {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{key}={}", shell_quote(&text))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Prints one record on stdout.
pub fn print(fields: &[(&'static str, Value)], json: bool) {
    let line = render(fields, json);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// With `--json`, prints one event of `run` on stderr (its stdout is CMD's); the text form
/// prints no events, only the final error line, if any.
pub fn event(fields: &[(&'static str, Value)], json: bool) {
    if !json {
        return;
    }
    let line = render(fields, true);
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

/// Prints `err` as one line on stderr: `lockctl: message`, or with `--json`
/// `{"error":kind,"message":…,"exit_code":N}`.
pub fn report(err: &CtlError, json: bool) {
    let message = one_line(&err.to_string());
    let line = if json {
        render(
            &[
                ("error", err.kind().into()),
                ("message", message.into()),
                ("exit_code", err.exit_code().into()),
            ],
            true,
        )
    } else {
        format!("lockctl: {message}")
    };
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
}

/// `text` on one line: line breaks become spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` as a POSIX shell word: unchanged when it is made of safe characters only, else in
/// single quotes.
pub fn shell_quote(text: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "._:/@%+=,-".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        return text.to_owned();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_parse_and_keep_the_field_order() {
        let fields: Fields = vec![
            ("lock_key", "payout:42".into()),
            ("fencing_token", 7.into()),
            ("proof", Value::Null),
        ];
        let line = render(&fields, true);
        assert_eq!(
            line,
            r#"{"lock_key":"payout:42","fencing_token":7,"proof":null}"#
        );
        let parsed: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["fencing_token"], 7);
    }

    #[test]
    fn text_lines_are_shell_words() {
        let fields: Fields = vec![
            ("owner_id", "it's me".into()),
            ("ttl_ms", 10_000.into()),
            ("proof", Value::Null),
        ];
        assert_eq!(
            render(&fields, false),
            r"owner_id='it'\''s me' ttl_ms=10000"
        );
        assert_eq!(shell_quote("payout:42"), "payout:42");
        assert_eq!(shell_quote(""), "''");
    }
}
