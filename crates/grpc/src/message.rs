//! gRPC's length-prefixed messages (PROTOCOL-HTTP2.md, `Length-Prefixed-Message`): a
//! compressed flag, a 32-bit big-endian length, the bytes. Requests are never
//! compressed and no `grpc-accept-encoding` is sent, so a compressed reply is refused.

/// A message in its length-prefixed form.
pub fn frame_message(msg: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + msg.len());
    v.push(0);
    v.extend_from_slice(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

/// Why a reply's bytes are not messages.
#[derive(Debug, PartialEq)]
pub(crate) enum Bad {
    /// A message longer than the limit (its declared length).
    TooLarge(usize),
    /// The compressed flag set (nothing was negotiated).
    Compressed,
}

/// Cuts messages out of a stream's DATA bytes as they come, holding at most one
/// partial message (up to the limit) at a time.
#[derive(Debug)]
pub(crate) struct Messages {
    buf: Vec<u8>,
    max: usize,
}

impl Messages {
    pub(crate) fn new(max: usize) -> Self {
        Messages {
            buf: Vec::new(),
            max,
        }
    }

    /// Takes in `bytes` and returns the messages they complete.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, Bad> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(head) = self.buf.get(..5) {
            if head[0] != 0 {
                return Err(Bad::Compressed);
            }
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if len > self.max {
                return Err(Bad::TooLarge(len));
            }
            if self.buf.len() < 5 + len {
                break;
            }
            out.push(self.buf[5..5 + len].to_vec());
            self.buf.drain(..5 + len);
        }
        Ok(out)
    }

    /// Whether bytes of an unfinished message are left (at the end of a stream: the
    /// server cut a message short).
    pub(crate) fn partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_across_and_within_chunks() {
        let mut bytes = frame_message(b"hello");
        bytes.extend(frame_message(b""));
        bytes.extend(frame_message(&[7; 40]));
        let mut m = Messages::new(64);
        let mut got = Vec::new();
        for chunk in bytes.chunks(3) {
            got.extend(m.push(chunk).expect("valid"));
        }
        assert_eq!(got, [b"hello".to_vec(), Vec::new(), vec![7; 40]]);
        assert!(!m.partial());
        assert_eq!(m.push(&[0, 0, 0]), Ok(vec![]));
        assert!(m.partial());
    }

    #[test]
    fn oversized_and_compressed_messages_are_refused_from_their_prefix() {
        assert_eq!(
            Messages::new(4).push(&[0, 0, 0, 0, 5]),
            Err(Bad::TooLarge(5))
        );
        assert_eq!(
            Messages::new(4).push(&[0, 0xff, 0xff, 0xff, 0xff]),
            Err(Bad::TooLarge(u32::MAX as usize))
        );
        assert_eq!(
            Messages::new(4).push(&[1, 0, 0, 0, 1, 0]),
            Err(Bad::Compressed)
        );
    }
}
