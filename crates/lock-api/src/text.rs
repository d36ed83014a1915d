//! Text a person will read (an owner id, a revoke's reason, a beneficiary's name): one rule
//! for what it may not hold, stated by Unicode property, so a character added to Unicode
//! later is judged by its properties, not by a list someone forgot to update.

use icu_properties::props::BinaryProperty;
use icu_properties::props::{DefaultIgnorableCodePoint, EnumeratedProperty, GeneralCategory};

/// Why a character may not appear in text a person reads: what an operator or a payer reads
/// must be what was sent, and two texts that look alike must be alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unreadable {
    /// General category `Cc`: C0 and C1 control codes (line feeds, escapes).
    Control,
    /// `Cf`: format characters (zero-width spaces and joiners, bidirectional controls, tags,
    /// the byte-order mark, interlinear annotation marks, deprecated format characters).
    Format,
    /// `Zl` and `Zp`: the line and paragraph separators.
    Separator,
    /// `Co`: private use (each font draws what it likes).
    PrivateUse,
    /// `Cn`: unassigned code points and noncharacters (no one knows how they will render).
    Unassigned,
    /// `Default_Ignorable_Code_Point`: drawn as nothing when not supported (variation
    /// selectors, the combining grapheme joiner, Hangul fillers).
    DefaultIgnorable,
}

impl Unreadable {
    /// What a refusal says of the character.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Control => "a control character",
            Self::Format => "an invisible format character",
            Self::Separator => "a line or paragraph separator",
            Self::PrivateUse => "a private-use character",
            Self::Unassigned => "an unassigned code point",
            Self::DefaultIgnorable => "a character that renders as nothing",
        }
    }
}

/// Why `c` may not appear in text a person reads, if it may not.
pub fn unreadable(c: char) -> Option<Unreadable> {
    let by_category = match GeneralCategory::for_char(c) {
        GeneralCategory::Control => Some(Unreadable::Control),
        GeneralCategory::Format => Some(Unreadable::Format),
        GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator => {
            Some(Unreadable::Separator)
        }
        GeneralCategory::PrivateUse => Some(Unreadable::PrivateUse),
        GeneralCategory::Unassigned | GeneralCategory::Surrogate => Some(Unreadable::Unassigned),
        _ => None,
    };
    by_category
        .or_else(|| DefaultIgnorableCodePoint::for_char(c).then_some(Unreadable::DefaultIgnorable))
}

/// Whether `c` must not appear in text a person reads ([`unreadable`]).
pub fn is_hidden_char(c: char) -> bool {
    unreadable(c).is_some()
}

/// The first character of `text` a person could not read, with its position (in
/// characters) and why.
pub fn first_unreadable(text: &str) -> Option<(usize, char, Unreadable)> {
    text.chars()
        .enumerate()
        .find_map(|(at, c)| unreadable(c).map(|why| (at, c, why)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::check_readable;
    use icu_properties::CodePointMapData;
    use icu_properties::CodePointSetData;

    fn every_char() -> impl Iterator<Item = char> {
        (0..=0x10FFFFu32).filter_map(char::from_u32)
    }

    /// Each property the rule names, from the Unicode data itself: every character of it is
    /// refused, for that reason (or a category reason, for characters of both).
    #[test]
    fn every_character_of_each_named_property_is_refused() {
        let categories = CodePointMapData::<GeneralCategory>::new();
        let table = [
            (GeneralCategory::Control, Unreadable::Control),
            (GeneralCategory::Format, Unreadable::Format),
            (GeneralCategory::LineSeparator, Unreadable::Separator),
            (GeneralCategory::ParagraphSeparator, Unreadable::Separator),
            (GeneralCategory::PrivateUse, Unreadable::PrivateUse),
            (GeneralCategory::Unassigned, Unreadable::Unassigned),
        ];
        for (category, reason) in table {
            let mut seen = 0;
            for c in every_char().filter(|c| categories.get(*c) == category) {
                assert_eq!(
                    unreadable(c),
                    Some(reason),
                    "U+{:04X} ({category:?})",
                    c as u32
                );
                seen += 1;
            }
            assert!(seen > 0, "{category:?} has characters");
        }
        let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
        let mut seen = 0;
        for c in every_char().filter(|c| ignorable.contains(*c)) {
            assert!(
                unreadable(c).is_some(),
                "U+{:04X} (Default_Ignorable)",
                c as u32
            );
            seen += 1;
        }
        assert!(seen > 1_000, "{seen}");
    }

    /// And nothing else: letters, marks, numbers, punctuation, symbols and spaces of every
    /// script pass, so names and reasons in any language can be written.
    #[test]
    fn every_other_character_is_readable() {
        let categories = CodePointMapData::<GeneralCategory>::new();
        let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
        let mut readable = 0;
        for c in every_char() {
            let named = matches!(
                categories.get(c),
                GeneralCategory::Control
                    | GeneralCategory::Format
                    | GeneralCategory::LineSeparator
                    | GeneralCategory::ParagraphSeparator
                    | GeneralCategory::PrivateUse
                    | GeneralCategory::Unassigned
            ) || ignorable.contains(c);
            assert_eq!(unreadable(c).is_some(), named, "U+{:04X}", c as u32);
            readable += usize::from(!named);
        }
        assert!(readable > 100_000, "{readable}");
        for text in [
            "Zoë Müller-Øster",
            "渡辺 さくら",
            "Андрей",
            "محمد",
            "incident #42: disk",
            "ℕ ≥ 5 ✓",
        ] {
            assert_eq!(check_readable("name", text), Ok(()), "{text}");
        }
    }

    /// The characters found accepted in reasons and beneficiaries: each is refused now.
    #[test]
    fn the_characters_that_slipped_through_are_refused() {
        let slipped = [
            ('\u{E0068}', Unreadable::Format),   // TAG LATIN SMALL LETTER H
            ('\u{2028}', Unreadable::Separator), // LINE SEPARATOR
            ('\u{2029}', Unreadable::Separator), // PARAGRAPH SEPARATOR
            ('\u{206A}', Unreadable::Format),    // INHIBIT SYMMETRIC SWAPPING
            ('\u{3164}', Unreadable::DefaultIgnorable), // HANGUL FILLER
            ('\u{115F}', Unreadable::DefaultIgnorable), // HANGUL CHOSEONG FILLER
            ('\u{FE0F}', Unreadable::DefaultIgnorable), // VARIATION SELECTOR-16
            ('\u{034F}', Unreadable::DefaultIgnorable), // COMBINING GRAPHEME JOINER
            ('\u{FFF9}', Unreadable::Format),    // INTERLINEAR ANNOTATION ANCHOR
            ('\u{180B}', Unreadable::DefaultIgnorable), // MONGOLIAN FREE VARIATION SELECTOR ONE
        ];
        for (c, reason) in slipped {
            assert_eq!(unreadable(c), Some(reason), "U+{:04X}", c as u32);
            let text = format!("pay{c}ee");
            let refused = check_readable("beneficiary", &text).unwrap_err();
            assert_eq!(refused.field, "beneficiary");
            let named = format!("character 3 is U+{:04X}", c as u32);
            assert!(refused.reason.contains(&named), "{refused:?}");
        }
    }
}
