//! Go's `strconv.Quote` (what `%q` prints), for messages that must read as upstream's:
//! pod validation's field errors (`field.Invalid(…): "value"`), downward API env
//! files, and the `strconv.ParseInt` errors of `PUT /debug/flags/v`. One function,
//! below both the validation and server layers, imports nothing of the crate.

/// Go's `strconv.Quote` for the characters a manifest or a client can send:
/// printable characters as they are, the usual escapes, `\x..` for other ASCII
/// controls and `\u....` for other control characters (C1).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Field values in validation's messages (`src/validation/field.rs`).
    #[test]
    fn field_values_are_quoted_as_go_does() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("x\u{0}y\n"), r#""x\x00y\n""#);
        assert_eq!(go_quote("é"), "\"é\"");
        assert_eq!(go_quote("a b"), "\"a b\"");
        assert_eq!(go_quote("日本"), "\"日本\"");
    }

    /// Every named escape, the other ASCII controls as `\x..`, C1 controls as `\u....`.
    #[test]
    fn controls_are_escaped_as_go_does() {
        assert_eq!(
            go_quote("\u{7}\u{8}\u{c}\n\r\t\u{b}"),
            r#""\a\b\f\n\r\t\v""#
        );
        assert_eq!(go_quote("\u{1}\u{1b}\u{1f}"), r#""\x01\x1b\x1f""#);
        assert_eq!(go_quote("\u{7f}"), r#""\x7f""#);
        assert_eq!(go_quote("\u{85}\u{9f}"), r#""\u0085\u009f""#);
    }

    /// The `PUT /debug/flags/v` bodies of `strconv.ParseInt`'s errors
    /// (`src/server/debug.rs`): empty, a trailing newline, plain text.
    #[test]
    fn verbosity_bodies_are_quoted_as_go_does() {
        assert_eq!(go_quote(""), "\"\"");
        assert_eq!(go_quote("4\n"), r#""4\n""#);
        assert_eq!(go_quote("x"), r#""x""#);
        assert_eq!(go_quote("99999999999"), r#""99999999999""#);
    }
}
