//! The two streamed body formats of the Engine API, decoded without blocking assumptions:
//! Docker's multiplexed stdout/stderr frames (logs and exec of containers without a
//! TTY) and newline-delimited JSON (events, pull progress).
//!
//! Both decoders take bytes as they arrive, so they work the same on a whole buffer
//! and on a socket read in pieces, and a reader that times out (the events stream
//! wakes every second to check for shutdown) loses no partial frame or line.

/// Which stream a multiplexed frame belongs to (the first byte of its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// 0: stdin (written back only by attach).
    Stdin,
    /// 1: stdout.
    Stdout,
    /// 2: stderr.
    Stderr,
    /// 3 (newer engines): the engine's own error text for an exec; anything else unknown.
    System,
}

impl StreamKind {
    fn from_byte(b: u8) -> StreamKind {
        match b {
            0 => StreamKind::Stdin,
            1 => StreamKind::Stdout,
            2 => StreamKind::Stderr,
            _ => StreamKind::System,
        }
    }
}

/// Splits Docker's multiplexed stream: each frame is an 8-byte header `[kind, 0, 0, 0,
/// len as u32 big-endian]` followed by `len` bytes of payload. Payload is passed on
/// as it arrives, not buffered per frame, so a huge frame costs no memory.
#[derive(Debug)]
pub(crate) struct FrameDecoder {
    header: [u8; 8],
    header_len: usize,
    kind: StreamKind,
    remaining: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder {
            header: [0; 8],
            header_len: 0,
            kind: StreamKind::Stdout,
            remaining: 0,
        }
    }
}

impl FrameDecoder {
    /// Feeds bytes; `emit` receives each piece of payload with its stream.
    pub(crate) fn push(&mut self, mut data: &[u8], emit: &mut dyn FnMut(StreamKind, &[u8])) {
        while !data.is_empty() {
            if self.remaining == 0 {
                let take = (8 - self.header_len).min(data.len());
                self.header[self.header_len..self.header_len + take].copy_from_slice(&data[..take]);
                self.header_len += take;
                data = &data[take..];
                if self.header_len == 8 {
                    self.header_len = 0;
                    self.kind = StreamKind::from_byte(self.header[0]);
                    let len = u32::from_be_bytes([
                        self.header[4],
                        self.header[5],
                        self.header[6],
                        self.header[7],
                    ]);
                    self.remaining = len as usize;
                }
            } else {
                let take = self.remaining.min(data.len());
                emit(self.kind, &data[..take]);
                self.remaining -= take;
                data = &data[take..];
            }
        }
    }

    /// True when the input so far ended on a frame boundary (nothing was cut off).
    pub(crate) fn is_at_boundary(&self) -> bool {
        self.header_len == 0 && self.remaining == 0
    }
}

/// The payload of a whole multiplexed buffer, stdout and stderr interleaved in arrival
/// order (what `kubectl logs` shows).
pub(crate) fn demux_interleaved(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut decoder = FrameDecoder::default();
    decoder.push(data, &mut |kind, payload| {
        if matches!(kind, StreamKind::Stdout | StreamKind::Stderr) {
            out.extend_from_slice(payload);
        }
    });
    out
}

/// Appends to `buf` without letting it grow past `cap` bytes; the rest is dropped.
pub(crate) fn append_capped(buf: &mut Vec<u8>, data: &[u8], cap: usize) {
    let room = cap.saturating_sub(buf.len());
    buf.extend_from_slice(&data[..room.min(data.len())]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![kind, 0, 0, 0];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn decode_in_pieces(data: &[u8], piece: usize) -> (Vec<u8>, Vec<u8>, bool) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut d = FrameDecoder::default();
        for chunk in data.chunks(piece) {
            d.push(chunk, &mut |kind, p| match kind {
                StreamKind::Stdout => out.extend_from_slice(p),
                StreamKind::Stderr => err.extend_from_slice(p),
                _ => {}
            });
        }
        (out, err, d.is_at_boundary())
    }

    #[test]
    fn demux_separates_stdout_and_stderr_whatever_the_read_sizes() {
        let mut data = frame(1, b"hello ");
        data.extend(frame(2, b"oops\n"));
        data.extend(frame(1, b""));
        data.extend(frame(1, b"world\n"));
        for piece in [1, 3, 7, 8, 9, 1000] {
            let (out, err, clean) = decode_in_pieces(&data, piece);
            assert_eq!(out, b"hello world\n", "piece {piece}");
            assert_eq!(err, b"oops\n", "piece {piece}");
            assert!(clean);
        }
    }

    #[test]
    fn demux_reports_a_cut_frame() {
        let data = frame(1, b"abcdef");
        let (out, _, clean) = decode_in_pieces(&data[..data.len() - 2], 4);
        assert_eq!(out, b"abcd");
        assert!(!clean);
        let (_, _, clean) = decode_in_pieces(&data[..5], 4);
        assert!(!clean);
    }

    #[test]
    fn demux_interleaved_keeps_arrival_order_and_skips_system_frames() {
        let mut data = frame(2, b"e1 ");
        data.extend(frame(1, b"o1 "));
        data.extend(frame(3, b"engine says no"));
        data.extend(frame(2, b"e2"));
        assert_eq!(demux_interleaved(&data), b"e1 o1 e2");
    }

    #[test]
    fn append_capped_stops_at_the_cap() {
        let mut buf = b"abc".to_vec();
        append_capped(&mut buf, b"defgh", 5);
        assert_eq!(buf, b"abcde");
        append_capped(&mut buf, b"xyz", 5);
        assert_eq!(buf, b"abcde");
    }
}
