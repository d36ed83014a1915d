//! Free text a person will read (a beneficiary's name, a revoke's reason): what it may not
//! hold, in one place.

/// Whether `c` must not appear in text a person reads: control characters, and the
/// characters that render as nothing or reorder text (zero-width spaces and joiners, the
/// bidirectional embeddings, overrides and isolates, the word joiner, the byte-order mark,
/// the soft hyphen): what an operator reads must be what was sent.
pub fn is_hidden_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
}
