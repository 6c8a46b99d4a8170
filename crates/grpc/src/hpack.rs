//! HPACK (RFC 7541) as a client needs it: requests are encoded as literals without
//! indexing (static-table names where it has them, never Huffman, never the dynamic
//! table, so the encoder keeps no state); responses are decoded by `loona-hpack`
//! (Huffman strings, the dynamic table the server fills), bounded in table size and in
//! the decoded header list's size.

use std::fmt;

/// HPACK's dynamic table size: HTTP/2's default `SETTINGS_HEADER_TABLE_SIZE`, which our
/// SETTINGS leave as it is, so a server may not ask for more.
const HEADER_TABLE_SIZE: usize = 4096;

/// The most a decoded header block (names and values, plus RFC 7541's 32 bytes of
/// overhead per field) may hold: what our SETTINGS announce as
/// `SETTINGS_MAX_HEADER_LIST_SIZE`. gRPC replies carry a few short fields; a block
/// of 1-byte references to one large table entry would otherwise expand ~4000-fold.
pub(crate) const MAX_HEADER_LIST: usize = 64 * 1024;

/// Decoded header fields, in order.
pub(crate) type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// An HPACK integer with an `n`-bit prefix whose high bits are `first` (RFC 7541 §5.1).
pub fn encode_int(out: &mut Vec<u8>, n: u8, first: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// An HPACK string literal, not Huffman-coded (RFC 7541 §5.2).
pub fn encode_str(out: &mut Vec<u8>, s: &str) {
    encode_int(out, 7, 0, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// A field as a literal without indexing: its name by static-table index when
/// `name_index` is not 0, as a literal otherwise (RFC 7541 §6.2.2).
pub(crate) fn encode_literal(out: &mut Vec<u8>, name_index: usize, name: &str, value: &str) {
    encode_int(out, 4, 0, name_index);
    if name_index == 0 {
        encode_str(out, name);
    }
    encode_str(out, value);
}

/// One connection's decoder: HPACK's dynamic table lives as long as the connection,
/// so every header block on it goes through the same decoder, in order.
pub(crate) struct Decoder(loona_hpack::Decoder<'static>);

impl fmt::Debug for Decoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("hpack::Decoder")
    }
}

impl Decoder {
    pub(crate) fn new() -> Self {
        let mut d = loona_hpack::Decoder::new();
        d.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Decoder(d)
    }

    /// Decodes one complete header block. Err says why: undecodable, or over
    /// [`MAX_HEADER_LIST`] (the block is still decoded to its end, so the table stays
    /// in step with the server's).
    pub(crate) fn decode(&mut self, block: &[u8]) -> Result<Fields, String> {
        let mut fields = Vec::new();
        let mut size = 0usize;
        self.0
            .decode_with_cb(block, |name, value| {
                size = size.saturating_add(name.len() + value.len() + 32);
                if size <= MAX_HEADER_LIST {
                    fields.push((name.into_owned(), value.into_owned()));
                }
            })
            .map_err(|e| format!("undecodable response headers: {e}"))?;
        if size > MAX_HEADER_LIST {
            return Err(format!(
                "response headers of {size} bytes, over the {MAX_HEADER_LIST}-byte limit"
            ));
        }
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_rfc7541() {
        // RFC 7541 C.1.1-C.1.3.
        let mut v = Vec::new();
        encode_int(&mut v, 5, 0, 10);
        assert_eq!(v, [10]);
        let mut v = Vec::new();
        encode_int(&mut v, 5, 0, 1337);
        assert_eq!(v, [31, 154, 10]);
        let mut v = Vec::new();
        encode_int(&mut v, 4, 0, 31);
        assert_eq!(v, [0x0f, 0x10]);
    }

    #[test]
    fn literals_round_trip_through_the_decoder() {
        let mut block = vec![0x83]; // :method: POST
        encode_literal(&mut block, 4, "", "/runtime.v1.RuntimeService/Version");
        encode_literal(&mut block, 0, "grpc-timeout", "120000m");
        let long = "x".repeat(300);
        encode_literal(&mut block, 0, "x-long", &long);
        let fields = Decoder::new().decode(&block).expect("decodes");
        let as_str: Vec<(String, String)> = fields
            .iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into(),
                    String::from_utf8_lossy(v).into(),
                )
            })
            .collect();
        assert_eq!(
            as_str,
            [
                (":method".to_string(), "POST".to_string()),
                (":path".into(), "/runtime.v1.RuntimeService/Version".into()),
                ("grpc-timeout".into(), "120000m".into()),
                ("x-long".into(), long),
            ]
        );
    }

    #[test]
    fn huffman_and_the_dynamic_table_decode_across_blocks() {
        // RFC 7541 C.4.1 then C.4.2: the second block refers to the first's entry.
        let mut d = Decoder::new();
        let first = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ];
        d.decode(&first).expect("first block");
        let second = [
            0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf,
        ];
        let fields = d.decode(&second).expect("second block");
        assert!(fields
            .iter()
            .any(|(n, v)| n == b":authority" && v == b"www.example.com"));
        assert!(fields
            .iter()
            .any(|(n, v)| n == b"cache-control" && v == b"no-cache"));
    }

    #[test]
    fn header_lists_are_bounded_after_expansion() {
        // One 4000-byte entry in the dynamic table (literal with incremental indexing),
        // then 1-byte references to it: small on the wire, large decoded.
        let mut block = vec![0x40];
        encode_str(&mut block, "x-big");
        encode_str(&mut block, &"v".repeat(4000));
        block.extend(std::iter::repeat_n(0x80 | 62, 20));
        let e = Decoder::new().decode(&block).expect_err("too large");
        assert!(e.contains("over the 65536-byte limit"), "{e}");
        assert!(
            Decoder::new().decode(&[0xff, 0xff, 0xff]).is_err(),
            "a bad index"
        );
    }
}
