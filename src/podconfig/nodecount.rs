//! A bound on the decoder's work: how many nodes a manifest's text decodes to,
//! counted before it is decoded, so that a manifest of many tiny nodes is refused
//! before it costs the node hundreds of MB.
//!
//! The byte cap on a manifest (3 MiB) bounds the text, not the
//! tree: serde_norway keeps every event of a document (~130 bytes each) before it
//! builds anything, and then a `serde_json::Value` per node, so 3 MiB of `[0,0,0,…]`
//! (1.5 M nodes) cost ~270 MB, and an alias repeated a million times to a list of ten
//! thousand nodes asks for billions of nodes (serde_norway expands aliases as it
//! builds, and allows up to a hundred times the document's events in jumps). Here the
//! YAML is read once more as a stream of events (libyaml's parser, the one
//! serde_norway runs, through `unsafe-libyaml-norway`; constant memory), counting
//! each scalar, sequence and mapping as one node and each alias as the nodes it
//! repeats, and the scalars' bytes the same way (an alias to a 1 MiB string repeated
//! is as costly as many nodes); JSON's values are counted from its punctuation (its
//! strings are no longer than its text). Both stop as soon as a count passes its limit.
//! A syntax error ends the count without an error of its own: the decoder reports it,
//! with its line and column.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::mem::MaybeUninit;

use unsafe_libyaml_norway as unsafe_yaml;

/// The most nodes a manifest may decode to, all its documents together (an alias
/// counts as what it repeats). A real pod is a few hundred nodes; a `PodList` of a
/// hundred such pods stays well inside. Measured on a debug build: a 3 MiB manifest
/// of 99 000 nodes, decoded, takes the kubelet's peak RSS from ~25 to ~51 MiB; one of
/// 1.5 M nodes, refused here, leaves it at ~28 MiB (it cost ~270 MB before), under
/// the 64 MiB `tests/it/inputs.rs` holds it to.
pub const MAX_MANIFEST_NODES: u64 = 100_000;

/// Which count passed its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exceeded {
    /// More nodes than this.
    Nodes(u64),
    /// More bytes of scalar text than this.
    Bytes(u64),
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exceeded::Nodes(n) => write!(f, "more than {n} nodes"),
            Exceeded::Bytes(n) => write!(f, "more than {n} bytes of text"),
        }
    }
}

/// Counts the nodes and scalar bytes of a YAML stream, aliases expanded; Err once
/// past `max_nodes` or `max_bytes`.
pub fn yaml(text: &str, max_nodes: u64, max_bytes: u64) -> Result<(), Exceeded> {
    let mut parser = Parser::new(text.as_bytes());
    let mut count = Counter::new(max_nodes, max_bytes);
    while let Some(event) = parser.next() {
        count.event(event)?;
    }
    Ok(())
}

/// Counts the values of a JSON text: each value is the first of the text, or follows
/// a `[`, `{`, `,` or `:` outside strings (a key counts too: it is a string kept in
/// the map). An upper bound; Err once past `limit`.
pub fn json(text: &str, limit: u64) -> Result<(), Exceeded> {
    let mut count: u64 = 1;
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' | b',' | b':' => {
                count += 1;
                if count > limit {
                    return Err(Exceeded::Nodes(limit));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// One event of the stream, as far as counting needs it.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// A document begins: anchors start again.
    DocumentStart,
    /// A scalar: its anchor and its length in bytes.
    Scalar(Option<Vec<u8>>, u64),
    /// A sequence or mapping begins, with its anchor.
    CollectionStart(Option<Vec<u8>>),
    /// A sequence or mapping ends.
    CollectionEnd,
    /// An alias to an anchor.
    Alias(Vec<u8>),
    /// Anything else (stream start, document end).
    Other,
}

/// Nodes and scalar bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Size {
    nodes: u64,
    bytes: u64,
}

/// The count of one stream.
#[derive(Debug)]
struct Counter {
    max: Size,
    total: Size,
    /// What each anchor of this document stands for.
    anchors: BTreeMap<Vec<u8>, Size>,
    /// The collections open: their anchor and the total when they began.
    open: Vec<(Option<Vec<u8>>, Size)>,
}

impl Counter {
    fn new(max_nodes: u64, max_bytes: u64) -> Self {
        Counter {
            max: Size {
                nodes: max_nodes,
                bytes: max_bytes,
            },
            total: Size::default(),
            anchors: BTreeMap::new(),
            open: Vec::new(),
        }
    }

    fn add(&mut self, size: Size) -> Result<(), Exceeded> {
        self.total.nodes = self.total.nodes.saturating_add(size.nodes);
        self.total.bytes = self.total.bytes.saturating_add(size.bytes);
        if self.total.nodes > self.max.nodes {
            return Err(Exceeded::Nodes(self.max.nodes));
        }
        if self.total.bytes > self.max.bytes {
            return Err(Exceeded::Bytes(self.max.bytes));
        }
        Ok(())
    }

    fn event(&mut self, event: Event) -> Result<(), Exceeded> {
        match event {
            Event::DocumentStart => self.anchors.clear(),
            Event::Scalar(anchor, bytes) => {
                let size = Size { nodes: 1, bytes };
                self.add(size)?;
                if let Some(a) = anchor {
                    self.anchors.insert(a, size);
                }
            }
            Event::CollectionStart(anchor) => {
                self.open.push((anchor, self.total));
                self.add(Size { nodes: 1, bytes: 0 })?;
            }
            Event::CollectionEnd => {
                if let Some((Some(a), began)) = self.open.pop() {
                    let size = Size {
                        nodes: self.total.nodes.saturating_sub(began.nodes),
                        bytes: self.total.bytes.saturating_sub(began.bytes),
                    };
                    self.anchors.insert(a, size);
                }
            }
            // An unknown anchor is the decoder's error to report.
            Event::Alias(a) => self.add(self.anchors.get(&a).copied().unwrap_or_default())?,
            Event::Other => {}
        }
        Ok(())
    }
}

/// libyaml's event parser over a string, owned so that it is freed on every path.
struct Parser<'a> {
    /// Boxed: the parser must not move once its input is set.
    sys: Box<MaybeUninit<unsafe_yaml::yaml_parser_t>>,
    /// The input the parser reads from, borrowed for as long as it lives.
    _input: &'a [u8],
    /// A parse error or the stream's end was met: no more events.
    done: bool,
}

impl std::fmt::Debug for Parser<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parser").field("done", &self.done).finish()
    }
}

impl<'a> Parser<'a> {
    fn new(input: &'a [u8]) -> Self {
        let mut sys = Box::new(MaybeUninit::<unsafe_yaml::yaml_parser_t>::uninit());
        let p = sys.as_mut_ptr();
        // SAFETY: `p` points to memory for one parser that the box owns;
        // `yaml_parser_initialize` fills all of it (it zeroes it first). The input
        // outlives the parser (`'a`), which reads it and never writes it.
        let ok = unsafe {
            if unsafe_yaml::yaml_parser_initialize(p).fail {
                false
            } else {
                unsafe_yaml::yaml_parser_set_encoding(p, unsafe_yaml::YAML_UTF8_ENCODING);
                unsafe_yaml::yaml_parser_set_input_string(p, input.as_ptr(), input.len() as u64);
                true
            }
        };
        Parser {
            sys,
            _input: input,
            // A failed initialization (out of memory) counts nothing; the decoder
            // meets the same condition and reports it.
            done: !ok,
        }
    }

    /// The next event; None at the stream's end or at a syntax error.
    fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        let p = self.sys.as_mut_ptr();
        let mut raw = MaybeUninit::<unsafe_yaml::yaml_event_t>::uninit();
        let e = raw.as_mut_ptr();
        // SAFETY: the parser was initialized (`done` is false) and is not moved (it is
        // boxed); `e` points to writable memory for one event, which
        // `yaml_parser_parse` fills when it succeeds (and only then is it read and
        // deleted, once). Anchors are NUL-terminated strings owned by the event,
        // copied out before `yaml_event_delete` frees them.
        let event = unsafe {
            if unsafe_yaml::yaml_parser_parse(p, e).fail {
                self.done = true;
                return None;
            }
            let anchor =
                |a: *const u8| (!a.is_null()).then(|| CStr::from_ptr(a.cast()).to_bytes().to_vec());
            let event = match (*e).type_ {
                unsafe_yaml::YAML_STREAM_END_EVENT => {
                    self.done = true;
                    Event::Other
                }
                unsafe_yaml::YAML_DOCUMENT_START_EVENT => Event::DocumentStart,
                unsafe_yaml::YAML_SCALAR_EVENT => {
                    Event::Scalar(anchor((*e).data.scalar.anchor), (*e).data.scalar.length)
                }
                unsafe_yaml::YAML_SEQUENCE_START_EVENT => {
                    Event::CollectionStart(anchor((*e).data.sequence_start.anchor))
                }
                unsafe_yaml::YAML_MAPPING_START_EVENT => {
                    Event::CollectionStart(anchor((*e).data.mapping_start.anchor))
                }
                unsafe_yaml::YAML_SEQUENCE_END_EVENT | unsafe_yaml::YAML_MAPPING_END_EVENT => {
                    Event::CollectionEnd
                }
                unsafe_yaml::YAML_ALIAS_EVENT => {
                    Event::Alias(anchor((*e).data.alias.anchor).unwrap_or_default())
                }
                _ => Event::Other,
            };
            unsafe_yaml::yaml_event_delete(e);
            event
        };
        Some(event)
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        let p = self.sys.as_mut_ptr();
        // SAFETY: the parser was initialized by `yaml_parser_initialize` (which zeroes
        // it first, so a failed one holds null buffers, which deleting skips) and is
        // deleted once, here.
        unsafe { unsafe_yaml::yaml_parser_delete(p) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(text: &str) -> u64 {
        // The smallest limit that passes.
        (0..100)
            .find(|&limit| yaml(text, limit, u64::MAX).is_ok())
            .expect("fewer than 100 nodes")
    }

    fn bytes(text: &str) -> u64 {
        (0..100)
            .find(|&limit| yaml(text, u64::MAX, limit).is_ok())
            .expect("fewer than 100 bytes")
    }

    #[test]
    fn yaml_counts_scalars_collections_and_what_aliases_repeat() {
        assert_eq!(count(""), 0);
        assert_eq!(count("a"), 1);
        assert_eq!(count("a: b"), 3);
        assert_eq!(count("a: [1, 2, {b: c}]"), 8);
        assert_eq!(count("- \n- \n-\n"), 4, "empty entries are null nodes");
        // The anchored list is 4 nodes; each alias repeats them.
        assert_eq!(
            count("a: &x [1, 2, 3]\nb: [*x, *x]\n"),
            1 + 1 + 4 + 1 + 1 + 8
        );
        assert_eq!(count("a: &s v\nb: *s\n"), 5);
        // Anchors are per document; several documents add up.
        assert_eq!(count("a: &x [1]\n---\nb: *x\n"), 4 + 2);
        assert_eq!(count("a\n---\nb\n---\nc\n"), 3);
        // A syntax error ends the count (the decoder reports it).
        assert_eq!(count("a: [1, 2]\n]"), 5);
    }

    #[test]
    fn yaml_counts_scalar_bytes_and_what_aliases_repeat() {
        assert_eq!(bytes("ab: \"c\\x41\""), 4, "decoded bytes, not the text's");
        assert_eq!(bytes("a: &x [bc, d]\nb: [*x, *x]\n"), 1 + 3 + 1 + 6);
        assert_eq!(bytes("a: &s xyz\nb: *s\n"), 1 + 3 + 1 + 3);
        // One long string repeated: few nodes, many bytes.
        let text = format!(
            "a: &s {}\nb: [{}]\n",
            "x".repeat(1000),
            ["*s"; 10].join(", ")
        );
        assert_eq!(yaml(&text, 100, 10_000), Err(Exceeded::Bytes(10_000)));
        assert_eq!(yaml(&text, 100, 12_000), Ok(()));
    }

    #[test]
    fn yaml_stops_at_the_limit_however_far_aliases_reach() {
        assert_eq!(yaml("[1, 2, 3]", 3, 100), Err(Exceeded::Nodes(3)));
        assert_eq!(yaml("[1, 2, 3]", 4, 100), Ok(()));
        // A billion laughs: nine levels of ten aliases each.
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert_eq!(
            yaml(&text, MAX_MANIFEST_NODES, 3 << 20),
            Err(Exceeded::Nodes(MAX_MANIFEST_NODES))
        );
    }

    #[test]
    fn json_counts_values_outside_strings() {
        let passes = |text: &str, limit| json(text, limit).is_ok();
        assert!(passes("{}", 2) && !passes("{}", 1));
        assert!(passes(r#"{"a": [1, 2]}"#, 5) && !passes(r#"{"a": [1, 2]}"#, 4));
        assert!(
            passes(r#"{"a": "[,:{\"[,"}"#, 3),
            "punctuation inside strings does not count"
        );
    }
}
