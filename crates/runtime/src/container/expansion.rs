//! `$(VAR)` references in env values, `command`, `args` and `subPathExpr`, expanded as
//! the upstream kubelet does (`third_party/forked/golang/expansion`: `Expand` and
//! `MappingFuncFor`): `$$` is an escaped `$`, a reference to an unknown variable is left
//! as written, an unclosed `$(` is kept literally, and a `$` followed by anything else
//! stays as it is.

use std::collections::HashMap;

/// Expands every `$(NAME)` in `input` with `mapping(NAME)`.
pub fn expand(input: &str, mapping: &mut dyn FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    let bytes = input.as_bytes();
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let (read, is_var, advance) = read_reference(&input[cursor..]);
            if is_var {
                out.push_str(&mapping(read));
            } else {
                out.push_str(read);
            }
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < input.len() {
        out.push_str(&input[checkpoint..]);
    }
    out
}

/// What a `$` at the start of `s` begins: (text to emit or the variable name, whether
/// it is a variable, bytes consumed after the `$`). Upstream's `tryReadVariableName`.
fn read_reference(s: &str) -> (&str, bool, usize) {
    match s.as_bytes()[1] {
        // `$$`: an escaped `$`.
        b'$' => (&s[1..2], false, 1),
        b'(' => match s[2..].find(')') {
            Some(end) => (&s[2..2 + end], true, end + 2),
            // Incomplete reference: keep `$(` and go on after it.
            None => (&s[..2], false, 1),
        },
        // Not a reference: keep the `$` and the character after it.
        _ => {
            let len = s[1..].chars().next().map_or(1, char::len_utf8);
            (&s[..1 + len], false, len)
        }
    }
}

/// Upstream `MappingFuncFor`: the name is looked up in each map in order; an unknown
/// name expands to itself, `$(NAME)`.
pub fn mapping_for<'a>(maps: &'a [&'a HashMap<String, String>]) -> impl FnMut(&str) -> String + 'a {
    move |name: &str| {
        for m in maps {
            if let Some(v) = m.get(name) {
                return v.clone();
            }
        }
        format!("$({name})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> HashMap<String, String> {
        [
            ("VAR_A", "A"),
            ("VAR_B", "B"),
            ("VAR_C", "C"),
            ("VAR_REF", "$(VAR_A)"),
            ("VAR_EMPTY", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn expands_like_upstream() {
        // Cases from upstream's expand_test.go semantics.
        let cases = [
            ("$(VAR_A)", "A"),
            ("___$(VAR_B)___", "___B___"),
            ("$(VAR_A)-$(VAR_A)", "A-A"),
            ("$(VAR_A)$(VAR_B)$(VAR_C)", "ABC"),
            ("$(VAR_REF)", "$(VAR_A)"),
            ("$(VAR_EMPTY)", ""),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$$$$(VAR_A)", "$$(VAR_A)"),
            ("$$", "$"),
            ("$", "$"),
            ("foo$", "foo$"),
            ("$(VAR_A", "$(VAR_A"),
            ("$(", "$("),
            ("$()", "$()"),
            ("$VAR_A", "$VAR_A"),
            ("a$b$(VAR_B)", "a$bB"),
            ("$é$(VAR_C)", "$éC"),
            ("(VAR_A)", "(VAR_A)"),
            ("", ""),
            ("no refs", "no refs"),
        ];
        let v = vars();
        let maps = [&v];
        let mut m = mapping_for(&maps);
        for (input, want) in cases {
            assert_eq!(expand(input, &mut m), want, "{input:?}");
        }
    }

    #[test]
    fn earlier_maps_win() {
        let a: HashMap<String, String> = [("X".to_string(), "1".to_string())].into();
        let b: HashMap<String, String> = [
            ("X".to_string(), "2".to_string()),
            ("Y".to_string(), "3".to_string()),
        ]
        .into();
        let maps = [&a, &b];
        let mut m = mapping_for(&maps);
        assert_eq!(expand("$(X)$(Y)", &mut m), "13");
    }
}
