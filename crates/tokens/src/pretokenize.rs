//! A byte scanner that splits text exactly as `bpe_openai::o200k_base().split` does.
//!
//! Why it exists: o200k counting is "pretokenize with a regex, then BPE each piece". In
//! `bpe-openai` the regex is a Unicode-aware `regex-automata` meta regex run once per piece
//! (anchored, with a look-ahead emulation), and on ordinary English, code and tool output it
//! costs more than the BPE itself. For ASCII the pattern reduces to a handful of byte classes,
//! so a hand-written scanner decides the same pieces for a fraction of the cost.
//!
//! Exactness is the whole point, so the scanner never guesses: whenever deciding where the
//! current piece ends would require classifying a non-ASCII character (is `é` a lowercase
//! letter? is U+00A0 whitespace? is `ſ` an `s` under case folding?), it *bails* and the crate's
//! own regex produces that one piece. The regex match at a position depends only on the text
//! from that position on (`$` is end of text), so asking the crate for the first piece of
//! `text[pos..]` gives exactly the piece its iterator would produce at `pos`, and the scanner
//! resumes after it.
//!
//! The o200k pattern (alternatives in priority order; leftmost-first, i.e. backtracking
//! preference) and what each means for ASCII (`U` = `A-Z`, `L` = `a-z`, `D` = `0-9`,
//! `W` = whitespace `\t \n \x0B \x0C \r ' '`, `P` = every other ASCII byte, `C` = contraction):
//!
//! 1. `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C?`
//! 2. `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*C?`
//!    Together: an optional prefix byte that is neither `\r`, `\n`, a letter nor a digit, then
//!    the maximal run of `U` followed by the maximal run of `L` (at least one letter), then
//!    `'s|'t|'re|'ve|'m|'ll|'d` matched case-insensitively if present.
//! 3. `\p{N}{1,3}`: one to three digits.
//! 4. ` ?[^\s\p{L}\p{N}]+[\r\n/]*`: an optional space, the maximal run of `P`, then the
//!    maximal run of `\r`, `\n`, `/`.
//! 5. `\s*[\r\n]+`: a whitespace run that contains a line break, up to and including its last
//!    `\r`/`\n`.
//! 6. `\s+$`: a whitespace run that ends the text.
//! 7. `\s+(?!\S)` (the crate writes `\s+\s` and drops the last character): a whitespace run of
//!    two or more followed by non-whitespace, minus its last character (which then prefixes
//!    the next word or punctuation).
//! 8. `\s+`: the single whitespace character left.

/// What the scanner decided for the piece starting at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The piece ends at this byte offset (exclusive; always after an ASCII byte, so always a
    /// `char` boundary).
    End(usize),
    /// The piece's extent depends on a non-ASCII character: ask the regex.
    Bail,
}

// Byte classes.
const UPPER: u8 = 1;
const LOWER: u8 = 2;
const DIGIT: u8 = 3;
/// `\r` and `\n`.
const NEWLINE: u8 = 4;
/// `' '` (the only whitespace pattern 4 may start with).
const SPACE: u8 = 5;
/// `\t`, `\x0B`, `\x0C`: whitespace that is neither a space nor a line break.
const OTHER_WS: u8 = 6;
/// Every other ASCII byte: punctuation, symbols, control characters.
const PUNCT: u8 = 7;
/// Any byte of a multi-byte UTF-8 sequence.
const NON_ASCII: u8 = 8;

static CLASS: [u8; 256] = build_classes();

const fn build_classes() -> [u8; 256] {
    let mut t = [NON_ASCII; 256];
    let mut b = 0usize;
    while b < 128 {
        let c = b as u8;
        t[b] = match c {
            b'A'..=b'Z' => UPPER,
            b'a'..=b'z' => LOWER,
            b'0'..=b'9' => DIGIT,
            b'\r' | b'\n' => NEWLINE,
            b' ' => SPACE,
            b'\t' | 0x0B | 0x0C => OTHER_WS,
            _ => PUNCT,
        };
        b += 1;
    }
    t
}

/// The class of the byte at `i`, or `None` at the end of the text.
#[inline(always)]
fn class_at(s: &[u8], i: usize) -> Option<u8> {
    s.get(i).map(|&b| CLASS[b as usize])
}

#[inline(always)]
fn is_ws(class: u8) -> bool {
    matches!(class, NEWLINE | SPACE | OTHER_WS)
}

/// Decides the piece that starts at `pos` (`pos < s.len()`, a piece boundary).
#[inline]
pub(crate) fn next_piece(s: &[u8], pos: usize) -> Step {
    let Some(c) = class_at(s, pos) else {
        return Step::Bail;
    };
    match c {
        UPPER | LOWER => letters(s, pos),
        DIGIT => digits(s, pos),
        NEWLINE => whitespace(s, pos),
        SPACE | OTHER_WS | PUNCT => {
            // Patterns 1/2 with the prefix byte: the next byte must start a letter run.
            match class_at(s, pos + 1) {
                Some(UPPER | LOWER) => return letters(s, pos + 1),
                Some(NON_ASCII) => return Step::Bail,
                _ => {}
            }
            match c {
                PUNCT => punctuation(s, pos),
                SPACE if class_at(s, pos + 1) == Some(PUNCT) => punctuation(s, pos + 1),
                _ => whitespace(s, pos),
            }
        }
        _ => Step::Bail,
    }
}

/// Patterns 1/2 from `i`, the first letter: uppercase run, lowercase run, contraction.
#[inline]
fn letters(s: &[u8], i: usize) -> Step {
    let i = run_end(s, i, b'A', b'Z');
    let i = run_end(s, i, b'a', b'z');
    match s.get(i) {
        None => Step::End(i),
        Some(&b) if b >= 0x80 => Step::Bail,
        Some(b'\'') => contraction(s, i),
        Some(_) => Step::End(i),
    }
}

/// The end of the run of bytes in `lo..=hi` (an ASCII range) that starts at `i`.
///
/// Words are the bulk of the text, and a byte-at-a-time loop pays a mispredicted branch at the
/// end of every one; this tests eight bytes at a time (SWAR) and finds the first byte outside
/// the range with one `trailing_zeros`.
#[inline(always)]
fn run_end(s: &[u8], mut i: usize, lo: u8, hi: u8) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    let splat = |b: u8| u64::from_le_bytes([b; 8]);
    // For a byte y < 0x80, y + (0x80 - lo) has its high bit set iff y >= lo; no carry can
    // leave the byte because y + 0x80 - lo <= 0xFF for lo >= 1.
    let (at_least_lo, above_hi) = (splat(0x80 - lo), splat(0x7F - hi));
    while let Some(chunk) = s.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let w = u64::from_le_bytes(w);
        let y = w & LOW7;
        // High bit of each byte: in range and ASCII.
        let inside = (y.wrapping_add(at_least_lo)) & !(y.wrapping_add(above_hi)) & !w & HIGH;
        if inside != HIGH {
            return i + ((!inside & HIGH).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while matches!(s.get(i), Some(&b) if (lo..=hi).contains(&b)) {
        i += 1;
    }
    i
}

/// The optional `(?i:'s|'t|'re|'ve|'m|'ll|'d)` after a letter run ending at `i` (`s[i]` is
/// the apostrophe).
fn contraction(s: &[u8], i: usize) -> Step {
    let lower = |j: usize| s.get(j).map(|b| b.to_ascii_lowercase());
    match s.get(i + 1) {
        // Case folding maps non-ASCII characters onto ASCII ones (U+017F LATIN SMALL LETTER
        // LONG S folds to `s`): never guess.
        Some(&b) if b >= 0x80 => return Step::Bail,
        None => return Step::End(i),
        Some(_) => {}
    }
    match lower(i + 1) {
        Some(b's' | b't' | b'm' | b'd') => Step::End(i + 2),
        Some(first @ (b'r' | b'v' | b'l')) => {
            let second = if first == b'l' { b'l' } else { b'e' };
            match s.get(i + 2) {
                Some(&b) if b >= 0x80 => Step::Bail,
                _ if lower(i + 2) == Some(second) => Step::End(i + 3),
                _ => Step::End(i),
            }
        }
        _ => Step::End(i),
    }
}

/// Pattern 3: up to three digits.
#[inline]
fn digits(s: &[u8], pos: usize) -> Step {
    let mut i = pos;
    while i < pos + 3 {
        match class_at(s, i) {
            Some(DIGIT) => i += 1,
            Some(NON_ASCII) => return Step::Bail,
            _ => break,
        }
    }
    Step::End(i)
}

/// Pattern 4 from `i`, the first punctuation byte (after the optional space).
#[inline]
fn punctuation(s: &[u8], mut i: usize) -> Step {
    while class_at(s, i) == Some(PUNCT) {
        i += 1;
    }
    if class_at(s, i) == Some(NON_ASCII) {
        // Could be more punctuation (`—`, `…`), which the run would swallow.
        return Step::Bail;
    }
    while matches!(s.get(i), Some(b'\r' | b'\n' | b'/')) {
        i += 1;
    }
    Step::End(i)
}

/// Patterns 5–8 for the whitespace run starting at `pos`.
#[inline]
fn whitespace(s: &[u8], pos: usize) -> Step {
    let mut i = pos;
    let mut last_newline = None;
    loop {
        match class_at(s, i) {
            Some(NEWLINE) => {
                last_newline = Some(i);
                i += 1;
            }
            Some(c) if is_ws(c) => i += 1,
            // U+0085, U+00A0, U+2000… are whitespace too and would extend the run.
            Some(NON_ASCII) => return Step::Bail,
            _ => break,
        }
    }
    if let Some(n) = last_newline {
        return Step::End(n + 1); // pattern 5
    }
    if i == s.len() {
        return Step::End(i); // pattern 6
    }
    if i - pos >= 2 {
        Step::End(i - 1) // pattern 7
    } else {
        Step::End(i) // pattern 8
    }
}

/// The pieces of `text`, identical to `bpe_openai::o200k_base().split(text)`.
pub(crate) struct Pieces<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Pieces<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Pieces { text, pos: 0 }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let start = self.pos;
        if start >= self.text.len() {
            return None;
        }
        let end = match next_piece(self.text.as_bytes(), start) {
            Step::End(end) => end,
            Step::Bail => {
                let rest = self.text.get(start..).unwrap_or_default();
                // The regex's piece at `start` is its first piece of the suffix. A regex piece
                // is never empty; if it somehow were, take the rest whole rather than loop.
                match bpe_openai::o200k_base()
                    .split(rest)
                    .next()
                    .map_or(0, str::len)
                {
                    0 => self.text.len(),
                    n => start + n,
                }
            }
        };
        self.pos = end;
        match self.text.get(start..end) {
            Some(piece) => Some(piece),
            None => {
                // `end` is a char boundary by construction; if it were not, hand back the rest.
                self.pos = self.text.len();
                self.text.get(start..)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn crate_split(text: &str) -> Vec<&str> {
        bpe_openai::o200k_base().split(text).collect()
    }

    fn ours(text: &str) -> Vec<&str> {
        Pieces::new(text).collect()
    }

    #[track_caller]
    fn same(text: &str) {
        assert_eq!(ours(text), crate_split(text), "pieces differ for {text:?}");
    }

    #[test]
    fn fixed_cases() {
        for t in [
            "",
            "a",
            " ",
            "  ",
            "Hello, world!",
            "HTTPServer helloWorld ABC'S don't I'LL they'Re we've 'sup '",
            "x'",
            "x'r",
            "x're",
            "x'rE",
            "x'l",
            "x'll",
            "X'LL",
            "x'ld",
            "a  b   c\t\td \t e",
            "line\n\n  next\r\n\r\n\tindented  \n",
            "trailing   ",
            "  \n  \n   foo",
            "12345678 1 12 123 1234",
            " 123",
            "src/main.rs:42: // TODO: fix/this\n//\n/x",
            "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}\n",
            " ?! ... ---\n\n",
            "\x00\x01\x1f\x7f control\x0b\x0cfeeds",
            "café naïve 日本語 🙂 — “quotes” x\u{a0}y x\u{85}y it'ſ Ǆemo",
            "ABé abé aé Aé 12² ;— é",
        ] {
            same(t);
        }
    }

    #[test]
    fn letter_runs_of_every_length_around_the_eight_byte_steps() {
        for n in 1..=26 {
            let lower: String = (b'a'..=b'z').take(n).map(char::from).collect();
            let upper = lower.to_ascii_uppercase();
            for word in [
                lower.clone(),
                upper.clone(),
                format!("{upper}{lower}"),
                format!("{lower}{upper}"),
            ] {
                for end in [
                    "", " ", "'s", "'", "1", "é", "\u{17f}", ".", "\n", "Éa", "\u{301}",
                ] {
                    same(&format!("{word}{end}"));
                    same(&format!(" {word}{end}"));
                    same(&format!("x{word}{end}"));
                }
            }
        }
    }

    #[test]
    fn every_four_byte_string_over_representative_bytes() {
        // Every string of four bytes drawn from an alphabet with a representative of each
        // class the scanner distinguishes (and the contraction letters), 105k inputs.
        let alphabet = b"aZ0 \t\r\n\x0b'/.sSlLeE\x00";
        for &a in alphabet {
            for &b in alphabet {
                for &c in alphabet {
                    for &d in alphabet {
                        let t = [a, b, c, d];
                        let t = std::str::from_utf8(&t).unwrap();
                        same(t);
                    }
                }
            }
        }
    }

    /// Every ASCII string of up to three bytes (2.1M inputs, under two seconds).
    #[test]
    fn every_short_ascii_string() {
        for a in 0u8..128 {
            same(std::str::from_utf8(&[a]).unwrap());
            for b in 0u8..128 {
                same(std::str::from_utf8(&[a, b]).unwrap());
                for c in 0u8..128 {
                    same(std::str::from_utf8(&[a, b, c]).unwrap());
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn ascii_heavy_matches_regex(t in "([a-zA-Z]{1,6}|[0-9]{1,5}|'[sStTmMdD]|'[rRvV][eE]|'[lL][lL]|'|[ \t]{1,3}|\r?\n|[\r\n]{1,3}|[.,;:!?/(){}\\[\\]\"<>=+*&^%$#@~`|\\\\-]{1,3}|[\x00-\x7f])*") {
            same(&t);
        }

        #[test]
        fn mixed_unicode_matches_regex(t in "([a-zA-Z' ]{1,4}|[0-9]{1,4}|\\s{1,3}|[\u{80}-\u{2fff}]|\\PC|.)*") {
            same(&t);
        }

        #[test]
        fn arbitrary_matches_regex(t in any::<String>()) {
            same(&t);
        }
    }
}
