//! HTTP/2 frames (RFC 9113 §4 and §6): the nine-byte head, reading one bounded frame
//! off a connection, writing one, and the payloads a client reads (padding and
//! priority fields, SETTINGS entries, a 32-bit field).
//!
//! Nothing here keeps state: the connection (`conn.rs`) decides what a frame means.

use std::io::Read;

/// HTTP/2's client connection preface (RFC 9113 §3.4), sent first on every connection.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PUSH_PROMISE: u8 = 0x5;
pub(crate) const PING: u8 = 0x6;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;

pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const ACK: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
/// DATA and HEADERS: the payload starts with a pad length and ends with padding.
pub const PADDED: u8 = 0x8;
pub(crate) const PRIORITY: u8 = 0x20;

/// SETTINGS identifiers (RFC 9113 §6.5.2).
pub(crate) const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub(crate) const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub(crate) const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub(crate) const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub(crate) const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// Error codes (RFC 9113 §7) that this client sends.
pub(crate) const PROTOCOL_ERROR: u32 = 0x1;
pub(crate) const CANCEL: u32 = 0x8;

/// The largest frame payload accepted: HTTP/2's default `SETTINGS_MAX_FRAME_SIZE`
/// (16 KiB), which our SETTINGS leave as it is, so a server may not send more.
pub(crate) const MAX_FRAME_SIZE: usize = 16_384;

/// The largest flow-control window HTTP/2 allows (2^31 - 1).
pub(crate) const MAX_WINDOW: i64 = 0x7fff_ffff;

/// One frame's head (RFC 9113 §4.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Head {
    pub(crate) len: usize,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

impl Head {
    pub(crate) fn parse(b: &[u8; 9]) -> Head {
        Head {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }
}

/// Why no frame could be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The connection failed or closed.
    Io(std::io::Error),
    /// A frame larger than [`MAX_FRAME_SIZE`] (a FRAME_SIZE_ERROR).
    TooLarge(usize),
}

/// Reads one frame: its head, then a payload of at most [`MAX_FRAME_SIZE`] bytes.
pub(crate) fn read(r: &mut impl Read) -> Result<(Head, Vec<u8>), ReadError> {
    let mut b = [0u8; 9];
    r.read_exact(&mut b).map_err(ReadError::Io)?;
    let head = Head::parse(&b);
    if head.len > MAX_FRAME_SIZE {
        return Err(ReadError::TooLarge(head.len));
    }
    let mut payload = vec![0u8; head.len];
    r.read_exact(&mut payload).map_err(ReadError::Io)?;
    Ok((head, payload))
}

/// Appends one frame to `out`. `payload` is at most 2^24 - 1 bytes (the callers cut
/// theirs to the peer's maximum frame size).
pub(crate) fn encode(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len().min(0xff_ffff);
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&payload[..len]);
}

/// A payload without its padding (`flags` has [`PADDED`]); an impossible pad length
/// leaves nothing (the reader refuses such frames first, see [`padding_ok`]).
pub fn unpad(p: &[u8], flags: u8) -> &[u8] {
    let (start, pad) = if flags & PADDED != 0 {
        (1, usize::from(p.first().copied().unwrap_or(0)))
    } else {
        (0, 0)
    };
    p.get(start..p.len().saturating_sub(pad))
        .unwrap_or_default()
}

/// Whether a padded payload's pad length fits in it (RFC 9113 §6.1: otherwise a
/// PROTOCOL_ERROR).
pub(crate) fn padding_ok(p: &[u8], flags: u8) -> bool {
    flags & PADDED == 0 || p.first().is_some_and(|&pad| usize::from(pad) < p.len())
}

/// A HEADERS frame's header block fragment: without padding and priority fields.
pub fn header_fragment(p: &[u8], flags: u8) -> &[u8] {
    let p = unpad(p, flags);
    if flags & PRIORITY != 0 {
        p.get(5..).unwrap_or_default()
    } else {
        p
    }
}

/// The big-endian 32-bit field at `at` (the high bit cleared when `reserved`), if the
/// payload is long enough.
pub(crate) fn u32_at(p: &[u8], at: usize, reserved: bool) -> Option<u32> {
    let b = p.get(at..at.checked_add(4)?)?;
    let v = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some(if reserved { v & 0x7fff_ffff } else { v })
}

/// A SETTINGS payload's (identifier, value) pairs; None when its length is not a
/// multiple of six (a FRAME_SIZE_ERROR).
pub(crate) fn settings(p: &[u8]) -> Option<Vec<(u16, u32)>> {
    if p.len() % 6 != 0 {
        return None;
    }
    Some(
        p.chunks_exact(6)
            .map(|c| {
                (
                    u16::from_be_bytes([c[0], c[1]]),
                    u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                )
            })
            .collect(),
    )
}

/// A SETTINGS payload of `entries`.
pub(crate) fn settings_payload(entries: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::with_capacity(entries.len() * 6);
    for (id, value) in entries {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&value.to_be_bytes());
    }
    p
}

/// A GOAWAY payload: the last stream processed and an error code.
pub(crate) fn goaway_payload(last_stream: u32, code: u32) -> Vec<u8> {
    let mut p = (last_stream & 0x7fff_ffff).to_be_bytes().to_vec();
    p.extend_from_slice(&code.to_be_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_through_encode_and_read() {
        let mut out = Vec::new();
        encode(&mut out, HEADERS, END_HEADERS, 3, b"abc");
        encode(&mut out, DATA, END_STREAM, 0x8000_0005, &[]);
        assert_eq!(&out[..9], &[0, 0, 3, HEADERS, END_HEADERS, 0, 0, 0, 3]);
        let mut r = out.as_slice();
        let (h, p) = read(&mut r).expect("first frame");
        assert_eq!(
            (h.kind, h.flags, h.stream, p.as_slice()),
            (HEADERS, END_HEADERS, 3, &b"abc"[..])
        );
        let (h, p) = read(&mut r).expect("second frame");
        assert_eq!(
            (h.kind, h.stream, p.len()),
            (DATA, 5, 0),
            "the reserved bit is dropped"
        );
        assert!(matches!(read(&mut r), Err(ReadError::Io(_))));
    }

    #[test]
    fn oversized_frames_are_refused_from_their_head() {
        let head = [0, 0x40, 0x01, DATA, 0, 0, 0, 0, 1];
        assert!(matches!(
            read(&mut &head[..]),
            Err(ReadError::TooLarge(16_385))
        ));
    }

    #[test]
    fn padding_and_priority_are_stripped() {
        assert_eq!(unpad(&[2, 7, 8, 0, 0], PADDED), [7, 8]);
        assert!(padding_ok(&[2, 7, 8, 0, 0], PADDED));
        assert!(!padding_ok(&[5, 7], PADDED));
        assert!(!padding_ok(&[], PADDED));
        assert_eq!(header_fragment(&[0, 0, 0, 1, 16, 0x82], PRIORITY), [0x82]);
        assert_eq!(
            header_fragment(&[1, 0, 0, 0, 1, 16, 0x82, 0], PADDED | PRIORITY),
            [0x82]
        );
    }

    #[test]
    fn settings_parse_in_sixes() {
        let p = settings_payload(&[
            (SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
            (SETTINGS_ENABLE_PUSH, 0),
        ]);
        assert_eq!(
            settings(&p),
            Some(vec![
                (SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
                (SETTINGS_ENABLE_PUSH, 0)
            ])
        );
        assert_eq!(settings(&p[..5]), None);
        assert_eq!(
            u32_at(&goaway_payload(7, PROTOCOL_ERROR), 4, false),
            Some(PROTOCOL_ERROR)
        );
        assert_eq!(
            u32_at(&[0xff, 0xff, 0xff, 0xff], 0, true),
            Some(0x7fff_ffff)
        );
        assert_eq!(u32_at(&[0; 3], 0, false), None);
    }
}
