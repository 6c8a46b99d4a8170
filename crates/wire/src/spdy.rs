//! SPDY/3.1 framing, the protocol `kubectl exec/attach/port-forward` and
//! kube-apiserver speak to a kubelet after `Upgrade: SPDY/3.1` (upstream: the
//! `moby/spdystream` framer under `k8s.io/apimachinery/pkg/util/httpstream/spdy`).
//! Sans-IO: [`Decoder::feed`] bytes in, [`Decoder::next_frame`] frames out;
//! [`Encoder::encode`] frames into bytes. No socket, no thread, no clock.
//!
//! A frame is an 8-byte header and a payload of at most 2^24 - 1 bytes. Header blocks
//! (SYN_STREAM, SYN_REPLY, HEADERS) are name/value pairs with 32-bit counts and
//! lengths, compressed with zlib primed with [`DICTIONARY`]; each direction is ONE zlib
//! stream for the whole connection (sync-flushed after every block), so one `Decoder`
//! and one `Encoder` belong to one connection and see every frame in order.
//!
//! Bounds: a frame's payload is buffered until complete, but only as far as its bytes
//! arrive (never allocated from the announced length); a frame longer than
//! [`Limits::max_frame_len`] (1 MiB by default, [`MAX_FRAME_LEN`]) is refused as soon
//! as its 8-byte header is read, so a decoder holds at most one incomplete frame of
//! that size plus the bytes of one [`Decoder::feed`]; a buffer a large frame grew is
//! freed once it is consumed ([`KEEP_CAPACITY`]). A header block that inflates past
//! [`Limits::max_header_bytes`] or counts more than [`Limits::max_header_pairs`] pairs
//! is refused before anything that size is allocated. Control frames of other types (SPDY/3's CREDENTIAL, types it leaves free)
//! are skipped, as the spec asks; a version other than 3 is an error. Every decoding
//! error is a session error (the zlib stream may be out of step): the decoder then
//! refuses everything after it, and the connection should get a GOAWAY and close.
//!
//! Header names are lowercase on the wire; a value holding NUL bytes is several values
//! of one name. Decoding splits such values into one pair each; encoding lowercases
//! names and joins pairs of one name with NUL (spdystream refuses a block that names
//! a header twice).
//!
//! [`conn`] is the server side of a session above this codec.
//!
//! Over 800 lines: the frame model, its decoder and its encoder share the private
//! layout helpers and are tested together (round trips, captured kubectl frames, the
//! bounds); split apart they would only import each other.

pub mod conn;

use std::fmt;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The only version spoken.
pub(crate) const VERSION: u16 = 3;
/// Control and DATA flag: the sender's last frame on this stream.
pub const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM flag: the receiver will never send on this stream.
pub(crate) const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// SETTINGS flag: forget persisted settings (only ever read from a client).
#[cfg(test)]
const FLAG_SETTINGS_CLEAR: u8 = 0x01;
/// SETTINGS id of the initial per-stream window (SPDY/3.1 flow control).
pub(crate) const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;
/// The largest payload the 24-bit length field can carry.
pub(crate) const MAX_PAYLOAD: usize = 0xFF_FFFF;
/// The longest frame payload a decoder takes by default: 1 MiB. spdystream writes one
/// DATA frame per `Write` call, and its writers are `io.Copy`s with 32 KiB buffers
/// (kubectl's stdin, port-forward's connections), so real frames are 32 KiB; header
/// blocks are a handful of short pairs. The wire's own limit (16 MiB) let each session
/// buffer 16 MiB before acting on it: 32 sessions held 540 MB, 128 held 2.1 GB.
pub(crate) const MAX_FRAME_LEN: usize = 1 << 20;
/// A decoder's buffer of more than this is freed once every byte in it is consumed:
/// the megabyte one large frame grew is given back, not kept by an idle session.
pub(crate) const KEEP_CAPACITY: usize = 64 * 1024;

/// SPDY/3's zlib dictionary for header blocks (draft 3, section 2.6.10.1), byte for
/// byte: length-prefixed header names and values, then common strings.
/// Its Adler-32 (`0xe3c6a7c2`) is the DICTID every SPDY/3 header stream starts with.
pub(crate) const DICTIONARY: &[u8] = b"\
\0\0\0\x07options\0\0\0\x04head\0\0\0\x04post\0\0\0\x03put\0\0\0\x06delete\
\0\0\0\x05trace\0\0\0\x06accept\0\0\0\x0eaccept-charset\0\0\0\x0faccept-encoding\
\0\0\0\x0faccept-language\0\0\0\x0daccept-ranges\0\0\0\x03age\0\0\0\x05allow\
\0\0\0\x0dauthorization\0\0\0\x0dcache-control\0\0\0\x0aconnection\
\0\0\0\x0ccontent-base\0\0\0\x10content-encoding\0\0\0\x10content-language\
\0\0\0\x0econtent-length\0\0\0\x10content-location\0\0\0\x0bcontent-md5\
\0\0\0\x0dcontent-range\0\0\0\x0ccontent-type\0\0\0\x04date\0\0\0\x04etag\
\0\0\0\x06expect\0\0\0\x07expires\0\0\0\x04from\0\0\0\x04host\0\0\0\x08if-match\
\0\0\0\x11if-modified-since\0\0\0\x0dif-none-match\0\0\0\x08if-range\
\0\0\0\x13if-unmodified-since\0\0\0\x0dlast-modified\0\0\0\x08location\
\0\0\0\x0cmax-forwards\0\0\0\x06pragma\0\0\0\x12proxy-authenticate\
\0\0\0\x13proxy-authorization\0\0\0\x05range\0\0\0\x07referer\
\0\0\0\x0bretry-after\0\0\0\x06server\0\0\0\x02te\0\0\0\x07trailer\
\0\0\0\x11transfer-encoding\0\0\0\x07upgrade\0\0\0\x0auser-agent\0\0\0\x04vary\
\0\0\0\x03via\0\0\0\x07warning\0\0\0\x10www-authenticate\0\0\0\x06method\
\0\0\0\x03get\0\0\0\x06status\0\0\0\x06200 OK\0\0\0\x07version\0\0\0\x08HTTP/1.1\
\0\0\0\x03url\0\0\0\x06public\0\0\0\x0aset-cookie\0\0\0\x0akeep-alive\
\0\0\0\x06origin\
10010120120220520630030230330430530630740240540640740840941041141241341441541641\
7502504505203 Non-Authoritative Information204 No Content301 Moved Permanently40\
0 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error\
501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept O\
ct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,imag\
e/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/\
javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1\
,utf-,*,enq=0.";

/// The DICTID of [`DICTIONARY`] (its Adler-32), as a peer's header stream announces it.
const DICTIONARY_ID: u32 = 0xe3c6_a7c2;

/// Name/value pairs of a header block, names lowercase.
pub(crate) type Headers = Vec<(String, String)>;

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Opens a stream (the client's ids are odd).
    SynStream {
        /// The new stream.
        stream_id: u32,
        /// The stream it belongs to (0: none).
        associated_to: u32,
        /// 0 (highest) to 7.
        priority: u8,
        /// SPDY/3's credential slot (unused by Kubernetes).
        slot: u8,
        /// [`FLAG_FIN`], [`FLAG_UNIDIRECTIONAL`].
        flags: u8,
        /// The stream's headers (`streamtype`, `port`, `requestid` …).
        headers: Headers,
    },
    /// Accepts a stream the peer opened.
    SynReply {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// Reply headers.
        headers: Headers,
    },
    /// Ends a stream abnormally.
    RstStream {
        /// The stream.
        stream_id: u32,
        /// Why.
        status: RstStatus,
    },
    /// Session settings.
    Settings {
        /// [`FLAG_SETTINGS_CLEAR`].
        flags: u8,
        /// The settings.
        entries: Vec<Setting>,
    },
    /// A round trip check; the receiver echoes a ping it did not send.
    Ping {
        /// Odd from the client, even from the server.
        id: u32,
    },
    /// The sender accepts no new streams after `last_good_stream_id`.
    GoAway {
        /// The last stream the sender accepted.
        last_good_stream_id: u32,
        /// 0 OK, 1 PROTOCOL_ERROR, 2 INTERNAL_ERROR.
        status: u32,
    },
    /// More headers for an open stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The headers.
        headers: Headers,
    },
    /// SPDY/3.1 flow control: the sender can take `delta` more bytes (stream 0: the
    /// whole session).
    WindowUpdate {
        /// The stream, or 0.
        stream_id: u32,
        /// Bytes added to the window.
        delta: u32,
    },
    /// Stream payload.
    Data {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The bytes.
        data: Vec<u8>,
    },
}

impl Frame {
    /// The frame's name as the spec writes it (for errors and logs).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Frame::SynStream { .. } => "SYN_STREAM",
            Frame::SynReply { .. } => "SYN_REPLY",
            Frame::RstStream { .. } => "RST_STREAM",
            Frame::Settings { .. } => "SETTINGS",
            Frame::Ping { .. } => "PING",
            Frame::GoAway { .. } => "GOAWAY",
            Frame::Headers { .. } => "HEADERS",
            Frame::WindowUpdate { .. } => "WINDOW_UPDATE",
            Frame::Data { .. } => "DATA",
        }
    }
}

/// One SETTINGS entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// Persist flags (SPDY/3's PERSIST_VALUE 1, PERSISTED 2).
    pub flags: u8,
    /// The setting (24 bits; [`SETTINGS_INITIAL_WINDOW_SIZE`] is the one that matters).
    pub id: u32,
    /// Its value.
    pub value: u32,
}

/// RST_STREAM status codes (SPDY/3.1 section 2.6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RstStatus {
    /// 1: the stream broke the protocol.
    ProtocolError,
    /// 2: a frame for a stream that is not open.
    InvalidStream,
    /// 3: the stream was refused before any processing.
    RefusedStream,
    /// 4: an unsupported SPDY version.
    UnsupportedVersion,
    /// 5: the stream is no longer needed (kubectl's close).
    Cancel,
    /// 6: the sender failed internally.
    InternalError,
    /// 7: flow control was broken.
    FlowControlError,
    /// 8: SYN_STREAM for a stream already open.
    StreamInUse,
    /// 9: data on a half-closed stream.
    StreamAlreadyClosed,
    /// 10: SPDY/3's credentials.
    InvalidCredentials,
    /// 11: a frame too large to process.
    FrameTooLarge,
    /// Any other code.
    Other(u32),
}

impl RstStatus {
    const CODES: [RstStatus; 11] = [
        RstStatus::ProtocolError,
        RstStatus::InvalidStream,
        RstStatus::RefusedStream,
        RstStatus::UnsupportedVersion,
        RstStatus::Cancel,
        RstStatus::InternalError,
        RstStatus::FlowControlError,
        RstStatus::StreamInUse,
        RstStatus::StreamAlreadyClosed,
        RstStatus::InvalidCredentials,
        RstStatus::FrameTooLarge,
    ];

    /// The status of a wire code.
    pub(crate) fn from_code(code: u32) -> RstStatus {
        code.checked_sub(1)
            .and_then(|i| Self::CODES.get(i as usize))
            .copied()
            .unwrap_or(RstStatus::Other(code))
    }

    /// The wire code.
    pub(crate) fn code(self) -> u32 {
        match self {
            RstStatus::Other(c) => c,
            s => Self::CODES
                .iter()
                .position(|x| *x == s)
                .map_or(0, |i| i as u32 + 1),
        }
    }
}

/// What a decoder accepts from a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest frame payload; at most [`MAX_PAYLOAD`].
    pub max_frame_len: usize,
    /// The most bytes one header block may inflate to.
    pub max_header_bytes: usize,
    /// The most name/value pairs in one header block.
    pub max_header_pairs: usize,
}

impl Default for Limits {
    /// Frames of at most [`MAX_FRAME_LEN`] (1 MiB, 32 times what spdystream's
    /// writers send); 1 MiB and 4096 pairs per header block (Kubernetes' stream
    /// headers are a handful of short pairs; 1 MiB is upstream's header cap).
    fn default() -> Limits {
        Limits {
            max_frame_len: MAX_FRAME_LEN,
            max_header_bytes: 1 << 20,
            max_header_pairs: 4096,
        }
    }
}

/// A frame that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    /// A control frame of another SPDY version.
    #[error("spdy control frame type {frame_type} has version {version}, not 3")]
    Version {
        /// The version it carried.
        version: u16,
        /// Its type code.
        frame_type: u16,
    },
    /// A payload over [`Limits::max_frame_len`] (or, to encode, over 2^24 - 1).
    #[error("spdy {frame} on stream {stream_id}: {len} bytes, over the limit of {max}")]
    TooLarge {
        /// Which frame.
        frame: &'static str,
        /// Its stream, 0 for none.
        stream_id: u32,
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// A frame the spec does not allow.
    #[error("invalid spdy {frame} on stream {stream_id}: {reason}")]
    Invalid {
        /// Which frame.
        frame: &'static str,
        /// Its stream, 0 for none.
        stream_id: u32,
        /// What is wrong with it.
        reason: String,
    },
    /// zlib refused a header block.
    #[error("spdy {frame} on stream {stream_id}: header block compression: {reason}")]
    Zlib {
        /// Which frame.
        frame: &'static str,
        /// Its stream.
        stream_id: u32,
        /// zlib's words.
        reason: String,
    },
    /// An earlier error left the header stream out of step; nothing more is read.
    #[error("spdy session already failed")]
    Failed,
}

fn invalid(frame: &'static str, stream_id: u32, reason: impl Into<String>) -> SpdyError {
    SpdyError::Invalid {
        frame,
        stream_id,
        reason: reason.into(),
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, b1, c, d]) => u32::from_be_bytes([a, b1, c, d]),
        _ => 0,
    }
}

/// The control frame type codes.
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// Reads frames from one connection's incoming bytes.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start (compacted at the next `feed`).
    pos: usize,
    inflate: Decompress,
    limits: Limits,
    failed: bool,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new(Limits::default())
    }
}

impl Decoder {
    /// A decoder for a new connection.
    pub(crate) fn new(limits: Limits) -> Decoder {
        Decoder {
            buf: Vec::new(),
            pos: 0,
            inflate: Decompress::new(true),
            limits,
            failed: false,
        }
    }

    /// Adds bytes read from the connection.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.drain(..self.pos);
        self.pos = 0;
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes fed but not yet returned as frames.
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next complete frame, `None` until one has arrived whole.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, SpdyError> {
        if self.failed {
            return Err(SpdyError::Failed);
        }
        let r = self.next_frame_inner();
        self.failed = r.is_err();
        if matches!(r, Ok(None))
            && self.pos == self.buf.len()
            && self.buf.capacity() > KEEP_CAPACITY
        {
            // Everything fed is consumed: what a large frame grew goes back now,
            // not when (if ever) the peer sends again.
            self.buf = Vec::new();
            self.pos = 0;
        }
        r
    }

    fn next_frame_inner(&mut self) -> Result<Option<Frame>, SpdyError> {
        loop {
            let buf = &self.buf[self.pos..];
            if buf.len() < 8 {
                return Ok(None);
            }
            let first = be32(buf, 0);
            let flags = buf[4];
            let len = (be32(buf, 4) & 0xFF_FFFF) as usize;
            let control = first & 0x8000_0000 != 0;
            let (version, frame_type) = ((first >> 16) as u16 & 0x7FFF, first as u16);
            if control && version != VERSION {
                return Err(SpdyError::Version {
                    version,
                    frame_type,
                });
            }
            if len > self.limits.max_frame_len {
                let (frame, stream_id) = if control {
                    (control_name(frame_type), 0)
                } else {
                    ("DATA", first & 0x7FFF_FFFF)
                };
                return Err(SpdyError::TooLarge {
                    frame,
                    stream_id,
                    len,
                    max: self.limits.max_frame_len,
                });
            }
            if buf.len() < 8 + len {
                return Ok(None);
            }
            let payload: Vec<u8> = buf[8..8 + len].to_vec();
            self.pos += 8 + len;
            if !control {
                let stream_id = first & 0x7FFF_FFFF;
                if stream_id == 0 {
                    return Err(invalid("DATA", 0, "stream id 0"));
                }
                return Ok(Some(Frame::Data {
                    stream_id,
                    flags,
                    data: payload,
                }));
            }
            if let Some(frame) = self.control(frame_type, flags, &payload)? {
                return Ok(Some(frame));
            }
            // An unknown control frame: skipped, as the spec asks.
        }
    }

    fn control(&mut self, ty: u16, flags: u8, p: &[u8]) -> Result<Option<Frame>, SpdyError> {
        let name = control_name(ty);
        let stream_id = be32(p, 0) & 0x7FFF_FFFF;
        let need = |min: usize, exact: bool| {
            if p.len() < min || (exact && p.len() != min) {
                Err(invalid(name, stream_id, format!("length {}", p.len())))
            } else {
                Ok(())
            }
        };
        let nonzero = |id: u32| {
            if id == 0 {
                Err(invalid(name, 0, "stream id 0"))
            } else {
                Ok(id)
            }
        };
        let frame = match ty {
            SYN_STREAM => {
                need(10, false)?;
                nonzero(stream_id)?;
                Frame::SynStream {
                    stream_id,
                    associated_to: be32(p, 4) & 0x7FFF_FFFF,
                    priority: p[8] >> 5,
                    slot: p[9],
                    flags,
                    headers: self.header_block(name, stream_id, &p[10..])?,
                }
            }
            SYN_REPLY | HEADERS => {
                need(4, false)?;
                nonzero(stream_id)?;
                let headers = self.header_block(name, stream_id, &p[4..])?;
                if ty == SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        flags,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        flags,
                        headers,
                    }
                }
            }
            RST_STREAM => {
                need(8, true)?;
                let status = be32(p, 4);
                if status == 0 {
                    return Err(invalid(name, stream_id, "status 0"));
                }
                Frame::RstStream {
                    stream_id: nonzero(stream_id)?,
                    status: RstStatus::from_code(status),
                }
            }
            SETTINGS => {
                need(4, false)?;
                let count = be32(p, 0) as usize;
                if count.checked_mul(8).and_then(|n| n.checked_add(4)) != Some(p.len()) {
                    return Err(invalid(
                        name,
                        0,
                        format!("{count} entries in {} bytes", p.len()),
                    ));
                }
                let entries = (0..count)
                    .map(|i| {
                        let flags_id = be32(p, 4 + i * 8);
                        Setting {
                            flags: (flags_id >> 24) as u8,
                            id: flags_id & 0xFF_FFFF,
                            value: be32(p, 8 + i * 8),
                        }
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            PING => {
                need(4, true)?;
                Frame::Ping { id: be32(p, 0) }
            }
            GOAWAY => {
                need(8, true)?;
                Frame::GoAway {
                    last_good_stream_id: stream_id,
                    status: be32(p, 4),
                }
            }
            WINDOW_UPDATE => {
                need(8, true)?;
                Frame::WindowUpdate {
                    stream_id,
                    delta: be32(p, 4) & 0x7FFF_FFFF,
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(frame))
    }

    /// Inflates and parses one header block, bounded by the limits.
    fn header_block(
        &mut self,
        frame: &'static str,
        stream_id: u32,
        mut input: &[u8],
    ) -> Result<Headers, SpdyError> {
        let max = self.limits.max_header_bytes;
        let zerr = |reason: String| SpdyError::Zlib {
            frame,
            stream_id,
            reason,
        };
        let mut raw: Vec<u8> = Vec::new();
        loop {
            let room = (max + 1).saturating_sub(raw.len()).min(16 * 1024);
            if room == 0 {
                return Err(SpdyError::TooLarge {
                    frame,
                    stream_id,
                    len: raw.len(),
                    max,
                });
            }
            raw.reserve_exact(room);
            let (in0, out0) = (self.inflate.total_in(), self.inflate.total_out());
            let r = self
                .inflate
                .decompress_vec(input, &mut raw, FlushDecompress::Sync);
            let used = (self.inflate.total_in() - in0) as usize;
            let made = self.inflate.total_out() - out0;
            input = input.get(used..).unwrap_or_default();
            match r {
                Err(e) => match e.needs_dictionary() {
                    Some(DICTIONARY_ID) => {
                        self.inflate
                            .set_dictionary(DICTIONARY)
                            .map_err(|e| zerr(e.to_string()))?;
                        continue;
                    }
                    Some(other) => return Err(zerr(format!("unknown dictionary {other:#x}"))),
                    None => return Err(zerr(e.to_string())),
                },
                Ok(Status::StreamEnd) => return Err(zerr("the header stream ended".into())),
                Ok(_) => {}
            }
            if raw.len() > max {
                return Err(SpdyError::TooLarge {
                    frame,
                    stream_id,
                    len: raw.len(),
                    max,
                });
            }
            let out_full = raw.len() == raw.capacity();
            if input.is_empty() && !out_full {
                break;
            }
            if used == 0 && made == 0 && !out_full {
                return Err(zerr("no progress".into()));
            }
        }
        parse_pairs(&raw, self.limits.max_header_pairs)
            .map_err(|reason| invalid(frame, stream_id, reason))
    }
}

fn control_name(ty: u16) -> &'static str {
    match ty {
        SYN_STREAM => "SYN_STREAM",
        SYN_REPLY => "SYN_REPLY",
        RST_STREAM => "RST_STREAM",
        SETTINGS => "SETTINGS",
        PING => "PING",
        GOAWAY => "GOAWAY",
        HEADERS => "HEADERS",
        WINDOW_UPDATE => "WINDOW_UPDATE",
        _ => "control frame",
    }
}

/// An inflated header block's pairs: a 32-bit count, then length-prefixed names and
/// values. NUL-separated values become one pair each.
fn parse_pairs(raw: &[u8], max_pairs: usize) -> Result<Headers, String> {
    if raw.len() < 4 {
        return Err("header block shorter than its count".into());
    }
    let count = be32(raw, 0) as usize;
    if count > max_pairs {
        return Err(format!(
            "{count} header pairs, over the limit of {max_pairs}"
        ));
    }
    let mut at = 4;
    let mut take = |what: &str| -> Result<&[u8], String> {
        let len = be32(raw, at) as usize;
        let s = at
            .checked_add(4)
            .and_then(|s| Some(s..s.checked_add(len)?))
            .and_then(|r| raw.get(r))
            .ok_or_else(|| format!("header {what} runs past the block"))?;
        at += 4 + len;
        Ok(s)
    };
    let mut out: Headers = Vec::with_capacity(count);
    let mut names: Vec<String> = Vec::with_capacity(count);
    for _ in 0..count {
        let name = String::from_utf8(take("name")?.to_vec())
            .map_err(|_| "header name is not UTF-8".to_string())?;
        let value =
            std::str::from_utf8(take("value")?).map_err(|_| format!("header {name}: not UTF-8"))?;
        if name.is_empty() {
            return Err("empty header name".into());
        }
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(format!("header name {name:?} is not lowercase"));
        }
        if names.contains(&name) {
            return Err(format!("header {name} named twice"));
        }
        for v in value.split('\0') {
            if out.len() >= max_pairs {
                return Err(format!("over {max_pairs} header values"));
            }
            out.push((name.clone(), v.to_string()));
        }
        names.push(name);
    }
    if at != raw.len() {
        return Err(format!("{} bytes after the last header", raw.len() - at));
    }
    Ok(out)
}

/// The compressor's window: 512 bytes, zlib's smallest. Our header blocks are a few
/// dozen bytes (kubectl needs none in a SYN_REPLY), and the smallest window takes the
/// compressor from 310 KiB to 43 KiB per connection (measured); a reader's window
/// stays 32 KiB, as any peer's compressor may use that.
const WINDOW_BITS: u8 = 9;

/// Writes frames for one connection.
#[derive(Debug)]
pub struct Encoder {
    deflate: Compress,
    primed: bool,
    scratch: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder for a new connection.
    pub fn new() -> Encoder {
        Encoder {
            deflate: Compress::new_with_window_bits(Compression::default(), true, WINDOW_BITS),
            primed: false,
            scratch: Vec::new(),
        }
    }

    /// Appends `frame`'s bytes to `out`. On error nothing is appended (a header
    /// block's compression is then out of step, so the connection must end).
    pub fn encode(&mut self, frame: &Frame, out: &mut Vec<u8>) -> Result<(), SpdyError> {
        let name = frame.name();
        let id31 = |id: u32| {
            if id == 0 || id > 0x7FFF_FFFF {
                Err(invalid(name, id, "stream id out of range"))
            } else {
                Ok(id)
            }
        };
        match frame {
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                slot,
                flags,
                headers,
            } => {
                let mut head = Vec::with_capacity(10);
                head.extend_from_slice(&id31(*stream_id)?.to_be_bytes());
                head.extend_from_slice(&(associated_to & 0x7FFF_FFFF).to_be_bytes());
                head.extend_from_slice(&[(priority & 7) << 5, *slot]);
                self.header_frame(SYN_STREAM, *flags, &head, headers, out)
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => {
                let head = id31(*stream_id)?.to_be_bytes();
                self.header_frame(SYN_REPLY, *flags, &head, headers, out)
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                let head = id31(*stream_id)?.to_be_bytes();
                self.header_frame(HEADERS, *flags, &head, headers, out)
            }
            Frame::RstStream { stream_id, status } => {
                let id = id31(*stream_id)?;
                control_head(RST_STREAM, 0, 8, out);
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&status.code().to_be_bytes());
                Ok(())
            }
            Frame::Settings { flags, entries } => {
                let len = entries.len().saturating_mul(8).saturating_add(4);
                if len > MAX_PAYLOAD {
                    return Err(SpdyError::TooLarge {
                        frame: name,
                        stream_id: 0,
                        len,
                        max: MAX_PAYLOAD,
                    });
                }
                control_head(SETTINGS, *flags, len, out);
                out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
                for s in entries {
                    let flags_id = (u32::from(s.flags) << 24) | (s.id & 0xFF_FFFF);
                    out.extend_from_slice(&flags_id.to_be_bytes());
                    out.extend_from_slice(&s.value.to_be_bytes());
                }
                Ok(())
            }
            Frame::Ping { id } => {
                control_head(PING, 0, 4, out);
                out.extend_from_slice(&id.to_be_bytes());
                Ok(())
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                control_head(GOAWAY, 0, 8, out);
                out.extend_from_slice(&(last_good_stream_id & 0x7FFF_FFFF).to_be_bytes());
                out.extend_from_slice(&status.to_be_bytes());
                Ok(())
            }
            Frame::WindowUpdate { stream_id, delta } => {
                control_head(WINDOW_UPDATE, 0, 8, out);
                out.extend_from_slice(&(stream_id & 0x7FFF_FFFF).to_be_bytes());
                out.extend_from_slice(&(delta & 0x7FFF_FFFF).to_be_bytes());
                Ok(())
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                let id = id31(*stream_id)?;
                if data.len() > MAX_PAYLOAD {
                    return Err(SpdyError::TooLarge {
                        frame: name,
                        stream_id: id,
                        len: data.len(),
                        max: MAX_PAYLOAD,
                    });
                }
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(
                    &((u32::from(*flags) << 24) | data.len() as u32).to_be_bytes(),
                );
                out.extend_from_slice(data);
                Ok(())
            }
        }
    }

    /// A control frame whose payload is `head` and a compressed header block.
    fn header_frame(
        &mut self,
        ty: u16,
        flags: u8,
        head: &[u8],
        headers: &Headers,
        out: &mut Vec<u8>,
    ) -> Result<(), SpdyError> {
        let name = control_name(ty);
        let stream_id = be32(head, 0);
        let raw = encode_pairs(headers).map_err(|r| invalid(name, stream_id, r))?;
        if !self.primed {
            self.deflate
                .set_dictionary(DICTIONARY)
                .map_err(|e| zlib_err(name, stream_id, e))?;
            self.primed = true;
        }
        self.scratch.clear();
        let mut input = &raw[..];
        loop {
            self.scratch.reserve(input.len() + 64);
            let before = self.deflate.total_in();
            self.deflate
                .compress_vec(input, &mut self.scratch, FlushCompress::Sync)
                .map_err(|e| zlib_err(name, stream_id, e))?;
            input = input
                .get((self.deflate.total_in() - before) as usize..)
                .unwrap_or_default();
            if input.is_empty() && self.scratch.len() < self.scratch.capacity() {
                break;
            }
        }
        let len = head.len() + self.scratch.len();
        if len > MAX_PAYLOAD {
            return Err(SpdyError::TooLarge {
                frame: name,
                stream_id,
                len,
                max: MAX_PAYLOAD,
            });
        }
        control_head(ty, flags, len, out);
        out.extend_from_slice(head);
        out.extend_from_slice(&self.scratch);
        Ok(())
    }
}

fn zlib_err(frame: &'static str, stream_id: u32, e: impl fmt::Display) -> SpdyError {
    SpdyError::Zlib {
        frame,
        stream_id,
        reason: e.to_string(),
    }
}

fn control_head(ty: u16, flags: u8, len: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&ty.to_be_bytes());
    out.extend_from_slice(&((u32::from(flags) << 24) | (len as u32 & 0xFF_FFFF)).to_be_bytes());
}

/// The uncompressed header block: names lowercased, values of one name joined by NUL.
fn encode_pairs(headers: &Headers) -> Result<Vec<u8>, String> {
    let mut joined: Vec<(String, String)> = Vec::with_capacity(headers.len());
    for (n, v) in headers {
        let n = n.to_ascii_lowercase();
        if n.is_empty() {
            return Err("empty header name".into());
        }
        match joined.iter_mut().find(|(m, _)| *m == n) {
            Some((_, all)) => {
                all.push('\0');
                all.push_str(v);
            }
            None => joined.push((n, v.clone())),
        }
    }
    let mut raw = Vec::new();
    let len32 = |n: usize| u32::try_from(n).map_err(|_| "header too long".to_string());
    raw.extend_from_slice(&len32(joined.len())?.to_be_bytes());
    for (n, v) in &joined {
        raw.extend_from_slice(&len32(n.len())?.to_be_bytes());
        raw.extend_from_slice(n.as_bytes());
        raw.extend_from_slice(&len32(v.len())?.to_be_bytes());
        raw.extend_from_slice(v.as_bytes());
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from kubectl v1.32 by `hack/spdy-capture.py` (see its docs): every byte
    /// it sent after the upgrade.
    const EXEC_STDIN: &[u8] = include_bytes!("spdy/fixtures/exec_stdin.bin");
    const EXEC_TTY: &[u8] = include_bytes!("spdy/fixtures/exec_tty.bin");
    const PORTFORWARD: &[u8] = include_bytes!("spdy/fixtures/portforward.bin");

    fn h(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn syn(stream_id: u32, streamtype: &str) -> Frame {
        Frame::SynStream {
            stream_id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            flags: 0,
            headers: h(&[("streamtype", streamtype)]),
        }
    }

    fn data(stream_id: u32, flags: u8, d: &[u8]) -> Frame {
        Frame::Data {
            stream_id,
            flags,
            data: d.to_vec(),
        }
    }

    fn rst(stream_id: u32, status: RstStatus) -> Frame {
        Frame::RstStream { stream_id, status }
    }

    fn decode_all(d: &mut Decoder, bytes: &[u8]) -> Result<Vec<Frame>, SpdyError> {
        d.feed(bytes);
        let mut out = Vec::new();
        while let Some(f) = d.next_frame()? {
            out.push(f);
        }
        Ok(out)
    }

    fn encode_all(frames: &[Frame]) -> Vec<u8> {
        let mut e = Encoder::new();
        let mut out = Vec::new();
        for f in frames {
            e.encode(f, &mut out).expect("encode");
        }
        out
    }

    fn adler32(b: &[u8]) -> u32 {
        let (mut a, mut s) = (1u32, 0u32);
        for x in b {
            a = (a + u32::from(*x)) % 65521;
            s = (s + a) % 65521;
        }
        (s << 16) | a
    }

    #[test]
    fn dictionary_is_the_one_kubectl_announces() {
        assert_eq!(DICTIONARY.len(), 1423);
        // The DICTID in the zlib header of kubectl's first header block.
        assert_eq!(&EXEC_STDIN[18..24], &[0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2]);
        assert_eq!(adler32(DICTIONARY), DICTIONARY_ID);
    }

    #[test]
    fn captured_kubectl_exec_with_stdin_decodes() {
        let frames = decode_all(&mut Decoder::default(), EXEC_STDIN).expect("decode");
        assert_eq!(
            frames,
            vec![
                syn(1, "error"),
                syn(3, "stdin"),
                syn(5, "stdout"),
                syn(7, "stderr"),
                data(3, 0, b"hello\n"),
                data(3, FLAG_FIN, b""),
                rst(5, RstStatus::Cancel),
                rst(7, RstStatus::Cancel),
                rst(1, RstStatus::Cancel),
                Frame::GoAway {
                    last_good_stream_id: 0,
                    status: 0
                },
            ]
        );
    }

    #[test]
    fn captured_kubectl_exec_with_a_tty_decodes_its_resize_stream() {
        let frames = decode_all(&mut Decoder::default(), EXEC_TTY).expect("decode");
        assert_eq!(
            &frames[..6],
            &[
                syn(1, "error"),
                syn(3, "stdin"),
                syn(5, "stdout"),
                syn(7, "resize"),
                data(7, 0, b"{\"Width\":0,\"Height\":0}\n"),
                data(3, 0, b"x"),
            ]
        );
        assert_eq!(frames.len(), 11, "4 RST_STREAM CANCEL and a GOAWAY follow");
    }

    #[test]
    fn captured_kubectl_port_forward_decodes_with_its_ping() {
        let frames = decode_all(&mut Decoder::default(), PORTFORWARD).expect("decode");
        let pf = |id, t: &str| Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            flags: 0,
            headers: h(&[("streamtype", t), ("port", "80"), ("requestid", "0")]),
        };
        let mut want_data = pf(3, "data");
        if let Frame::SynStream { headers, .. } = &mut want_data {
            headers.rotate_left(1); // kubectl's own order: port, requestid, streamtype
        }
        assert_eq!(
            frames,
            vec![
                pf(1, "error"),
                data(1, FLAG_FIN, b""),
                want_data,
                data(3, 0, b"ping"),
                Frame::Ping { id: 1 },
                data(3, FLAG_FIN, b""),
            ]
        );
    }

    #[test]
    fn captured_bytes_decode_the_same_one_byte_at_a_time() {
        let whole = decode_all(&mut Decoder::default(), EXEC_STDIN).expect("decode");
        let mut d = Decoder::default();
        let mut frames = Vec::new();
        for b in EXEC_STDIN {
            frames.extend(decode_all(&mut d, &[*b]).expect("decode"));
        }
        assert_eq!(frames, whole);
        assert_eq!(d.buffered(), 0);
    }

    /// Frames without a header block, and their exact bytes (SPDY/3 section 2.6).
    #[test]
    fn fixed_frames_have_the_spec_layout() {
        let table: &[(Frame, &[u8])] = &[
            (
                rst(5, RstStatus::Cancel),
                &[0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 5, 0, 0, 0, 5],
            ),
            (
                Frame::Settings {
                    flags: FLAG_SETTINGS_CLEAR,
                    entries: vec![Setting {
                        flags: 1,
                        id: SETTINGS_INITIAL_WINDOW_SIZE,
                        value: 65536,
                    }],
                },
                &[
                    0x80, 3, 0, 4, 1, 0, 0, 12, 0, 0, 0, 1, 1, 0, 0, 7, 0, 1, 0, 0,
                ],
            ),
            (
                Frame::Ping { id: 1 },
                &[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1],
            ),
            (
                Frame::GoAway {
                    last_good_stream_id: 7,
                    status: 1,
                },
                &[0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 1],
            ),
            (
                Frame::WindowUpdate {
                    stream_id: 3,
                    delta: 32768,
                },
                &[0x80, 3, 0, 9, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0x80, 0],
            ),
            (
                data(3, FLAG_FIN, b"hi"),
                &[0, 0, 0, 3, 1, 0, 0, 2, b'h', b'i'],
            ),
            (data(5, 0, b""), &[0, 0, 0, 5, 0, 0, 0, 0]),
        ];
        for (frame, bytes) in table {
            assert_eq!(&encode_all(std::slice::from_ref(frame)), bytes, "{frame:?}");
            let back = decode_all(&mut Decoder::default(), bytes).expect("decode");
            assert_eq!(back, vec![frame.clone()], "{frame:?}");
        }
    }

    #[test]
    fn every_frame_type_round_trips_through_one_connection() {
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 7,
                slot: 0,
                flags: FLAG_FIN | FLAG_UNIDIRECTIONAL,
                headers: h(&[
                    ("streamtype", "error"),
                    ("port", "8080"),
                    ("requestid", "1"),
                ]),
            },
            Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: vec![],
            },
            Frame::SynReply {
                stream_id: 3,
                flags: FLAG_FIN,
                headers: h(&[("status", "200 OK"), ("version", "HTTP/1.1")]),
            },
            Frame::Headers {
                stream_id: 3,
                flags: FLAG_FIN,
                headers: h(&[("x-empty", "")]),
            },
            rst(3, RstStatus::Other(99)),
            Frame::Settings {
                flags: 0,
                entries: vec![],
            },
            Frame::Ping { id: 2 },
            Frame::GoAway {
                last_good_stream_id: 0x7FFF_FFFF,
                status: 2,
            },
            Frame::WindowUpdate {
                stream_id: 0,
                delta: 0x7FFF_FFFF,
            },
            data(0x7FFF_FFFF, FLAG_FIN, &[0u8; 70_000]),
            syn(3, "stdin"),
        ];
        let bytes = encode_all(&frames);
        assert_eq!(
            decode_all(&mut Decoder::default(), &bytes).expect("decode"),
            frames
        );
        // Fed in odd pieces, partial frames wait in the buffer.
        let mut d = Decoder::default();
        let mut got = Vec::new();
        for piece in bytes.chunks(977) {
            got.extend(decode_all(&mut d, piece).expect("decode"));
        }
        assert_eq!(got, frames);
    }

    #[test]
    fn rst_status_codes_round_trip() {
        for code in 0..14 {
            assert_eq!(RstStatus::from_code(code).code(), code);
        }
        assert_eq!(RstStatus::from_code(5), RstStatus::Cancel);
        assert_eq!(RstStatus::FrameTooLarge.code(), 11);
    }

    #[test]
    fn header_names_are_lowercased_and_repeated_names_share_one_pair() {
        let sent = Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers: h(&[("A", "1"), ("b", "x"), ("a", "2")]),
        };
        let bytes = encode_all(&[sent]);
        let got = decode_all(&mut Decoder::default(), &bytes).expect("decode");
        let Frame::SynReply { headers, .. } = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(headers, &h(&[("a", "1"), ("a", "2"), ("b", "x")]));
    }

    #[test]
    fn the_header_stream_spans_frames() {
        let frames = vec![syn(1, "stdout"), syn(3, "stdout")];
        let bytes = encode_all(&frames);
        let first_len = 8 + (be32(&bytes, 4) & 0xFF_FFFF) as usize;
        // The second block refers back into the first: smaller, and unreadable alone.
        assert!(bytes.len() - first_len < first_len, "{bytes:?}");
        assert_eq!(
            decode_all(&mut Decoder::default(), &bytes).expect("decode"),
            frames
        );
        let alone = decode_all(&mut Decoder::default(), &bytes[first_len..]);
        assert!(matches!(alone, Err(SpdyError::Zlib { .. })), "{alone:?}");
    }

    #[test]
    fn unknown_control_frames_are_skipped() {
        // SPDY/3's CREDENTIAL (10) and an unassigned type, then a PING.
        let mut bytes = vec![0x80, 3, 0, 10, 0, 0, 0, 3, 1, 2, 3];
        bytes.extend_from_slice(&[0x80, 3, 0x12, 0x34, 0, 0, 0, 0]);
        bytes.extend(encode_all(&[Frame::Ping { id: 3 }]));
        let got = decode_all(&mut Decoder::default(), &bytes).expect("decode");
        assert_eq!(got, vec![Frame::Ping { id: 3 }]);
    }

    /// Limits for the bounded cases: small enough to reach in a test.
    fn small() -> Limits {
        Limits {
            max_frame_len: 1024,
            max_header_bytes: 256,
            max_header_pairs: 4,
        }
    }

    #[test]
    fn malformed_input_is_an_error_with_context() {
        let table: &[(&str, Vec<u8>, &str)] = &[
            (
                "SPDY/2",
                vec![0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1],
                "type 6 has version 2",
            ),
            (
                "announced length over the limit, before the payload",
                vec![0x80, 3, 0, 1, 0, 0xFF, 0xFF, 0xFF],
                "SYN_STREAM on stream 0: 16777215 bytes, over the limit of 1024",
            ),
            (
                "DATA over the limit",
                vec![0, 0, 0, 9, 0, 0, 4, 1],
                "DATA on stream 9: 1025 bytes",
            ),
            (
                "DATA on stream 0",
                vec![0, 0, 0, 0, 0, 0, 0, 0],
                "DATA on stream 0",
            ),
            (
                "RST_STREAM status 0",
                vec![0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0],
                "RST_STREAM on stream 1: status 0",
            ),
            (
                "RST_STREAM too long",
                vec![0x80, 3, 0, 3, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 5, 0],
                "RST_STREAM on stream 1: length 9",
            ),
            (
                "PING of 5 bytes",
                vec![0x80, 3, 0, 6, 0, 0, 0, 5, 0, 0, 0, 1, 0],
                "PING",
            ),
            (
                "SETTINGS count larger than the frame",
                vec![0x80, 3, 0, 4, 0, 0, 0, 4, 0x10, 0, 0, 0],
                "268435456 entries in 4 bytes",
            ),
            (
                "GOAWAY without a status (SPDY/2's)",
                vec![0x80, 3, 0, 7, 0, 0, 0, 4, 0, 0, 0, 1],
                "GOAWAY",
            ),
            (
                "WINDOW_UPDATE short",
                vec![0x80, 3, 0, 9, 0, 0, 0, 4, 0, 0, 0, 1],
                "WINDOW_UPDATE",
            ),
            (
                "SYN_STREAM shorter than its fixed part",
                vec![0x80, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 1, 0, 0],
                "SYN_STREAM on stream 1: length 6",
            ),
            (
                "header block that is not zlib",
                vec![0x80, 3, 0, 2, 0, 0, 0, 8, 0, 0, 0, 1, 1, 2, 3, 4],
                "SYN_REPLY on stream 1: header block compression",
            ),
        ];
        for (what, bytes, want) in table {
            let mut d = Decoder::new(small());
            let err = decode_all(&mut d, bytes).expect_err(what).to_string();
            assert!(err.contains(want), "{what}: {err}");
            // The decoder refuses everything after a failure.
            d.feed(&encode_all(&[Frame::Ping { id: 1 }]));
            assert!(matches!(d.next_frame(), Err(SpdyError::Failed)), "{what}");
        }
    }

    /// A header block built by hand (our encoder refuses what these test), compressed
    /// as a peer would.
    fn raw_block_frame(raw: &[u8]) -> Vec<u8> {
        let mut c = Compress::new(Compression::default(), true);
        c.set_dictionary(DICTIONARY).expect("dictionary");
        let mut z = Vec::with_capacity(raw.len() + 1024);
        c.compress_vec(raw, &mut z, FlushCompress::Sync)
            .expect("deflate");
        let mut out = Vec::new();
        control_head(SYN_REPLY, 0, 4 + z.len(), &mut out);
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&z);
        out
    }

    fn pairs(ps: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut raw = (ps.len() as u32).to_be_bytes().to_vec();
        for (n, v) in ps {
            raw.extend_from_slice(&(n.len() as u32).to_be_bytes());
            raw.extend_from_slice(n);
            raw.extend_from_slice(&(v.len() as u32).to_be_bytes());
            raw.extend_from_slice(v);
        }
        raw
    }

    #[test]
    fn header_blocks_are_bounded_and_checked() {
        let big = vec![b'v'; 300];
        let mut huge_count = pairs(&[]);
        huge_count[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        let mut truncated = pairs(&[(b"a", b"value")]);
        truncated.truncate(truncated.len() - 2);
        let mut trailing = pairs(&[(b"a", b"1")]);
        trailing.push(0);
        let table: &[(&str, Vec<u8>, &str)] = &[
            (
                "inflates past the limit",
                pairs(&[(b"a", &big)]),
                "over the limit of 256",
            ),
            (
                "too many pairs",
                pairs(&[
                    (b"a", b""),
                    (b"b", b""),
                    (b"c", b""),
                    (b"d", b""),
                    (b"e", b""),
                ]),
                "5 header pairs, over the limit of 4",
            ),
            (
                "too many values",
                pairs(&[(b"a", b"1\x002\x003\x004\x005")]),
                "over 4 header values",
            ),
            ("a count of 2^32-1", huge_count, "4294967295 header pairs"),
            (
                "uppercase name",
                pairs(&[(b"Port", b"80")]),
                "\"Port\" is not lowercase",
            ),
            (
                "a name twice",
                pairs(&[(b"a", b"1"), (b"a", b"2")]),
                "header a named twice",
            ),
            ("empty name", pairs(&[(b"", b"1")]), "empty header name"),
            (
                "not UTF-8",
                pairs(&[(b"a", b"\xff")]),
                "header a: not UTF-8",
            ),
            (
                "a value past the block",
                truncated,
                "header value runs past the block",
            ),
            (
                "bytes after the last pair",
                trailing,
                "1 bytes after the last header",
            ),
            (
                "shorter than its count",
                vec![0, 0],
                "shorter than its count",
            ),
        ];
        for (what, raw, want) in table {
            let err = decode_all(&mut Decoder::new(small()), &raw_block_frame(raw))
                .expect_err(what)
                .to_string();
            assert!(err.contains("SYN_REPLY on stream 1"), "{what}: {err}");
            assert!(err.contains(want), "{what}: {err}");
        }
    }

    /// A DATA frame's 8-byte header announcing `len` bytes on `stream_id`.
    fn data_head(stream_id: u32, len: usize) -> Vec<u8> {
        let mut head = stream_id.to_be_bytes().to_vec();
        head.extend_from_slice(&(len as u32).to_be_bytes());
        head
    }

    #[test]
    fn default_limits_refuse_a_data_frame_over_1_mib_at_its_header() {
        // What spdystream's writers send (32 KiB) and up to 1 MiB decode.
        for len in [32 * 1024, MAX_FRAME_LEN] {
            let mut bytes = data_head(3, len);
            bytes.resize(8 + len, 7);
            let got = decode_all(&mut Decoder::default(), &bytes).expect("decode");
            assert_eq!(got, vec![data(3, 0, &vec![7; len])]);
        }
        // The wire's 16 MiB (a hostile client's announcement): refused from the
        // header alone, before one payload byte is buffered.
        for len in [MAX_FRAME_LEN + 1, MAX_PAYLOAD] {
            let mut d = Decoder::default();
            let err = decode_all(&mut d, &data_head(3, len)).expect_err("over the cap");
            assert!(
                matches!(
                    err,
                    SpdyError::TooLarge { frame: "DATA", stream_id: 3, len: l, max }
                        if l == len && max == MAX_FRAME_LEN
                ),
                "{err}"
            );
            assert_eq!(
                err.to_string(),
                format!("spdy DATA on stream 3: {len} bytes, over the limit of 1048576")
            );
            // The session is over: nothing after it is read.
            d.feed(&encode_all(&[Frame::Ping { id: 1 }]));
            assert!(matches!(d.next_frame(), Err(SpdyError::Failed)));
        }
    }

    #[test]
    fn a_decoder_holds_one_frame_and_frees_what_it_grew_once_consumed() {
        let mut d = Decoder::default();
        // All but the last byte of a 1 MiB frame, fed in 256 KiB reads.
        let mut bytes = data_head(1, MAX_FRAME_LEN);
        bytes.resize(8 + MAX_FRAME_LEN, 1);
        for chunk in bytes[..bytes.len() - 1].chunks(256 * 1024) {
            assert_eq!(decode_all(&mut d, chunk).expect("partial"), vec![]);
        }
        assert_eq!(d.buffered(), 8 + MAX_FRAME_LEN - 1);
        // The last byte and a ping complete it; then nothing is left to keep.
        let mut rest = vec![1];
        rest.extend(encode_all(&[Frame::Ping { id: 1 }]));
        let got = decode_all(&mut d, &rest).expect("whole");
        assert_eq!(got.len(), 2);
        assert_eq!(d.buffered(), 0);
        assert!(
            d.buf.capacity() <= KEEP_CAPACITY,
            "a consumed 1 MiB frame's buffer is freed: {}",
            d.buf.capacity()
        );
        // Small frames keep their small buffer.
        let ping = encode_all(&[Frame::Ping { id: 3 }]);
        assert_eq!(decode_all(&mut d, &ping).expect("ping").len(), 1);
    }

    #[test]
    fn a_compression_bomb_stops_at_the_header_limit() {
        // 4 MiB of one byte deflates to about 4 KiB; the decoder stops after 1 MiB.
        let mut raw = pairs(&[(b"a", b"")]);
        raw[8..12].copy_from_slice(&(4u32 << 20).to_be_bytes());
        raw.resize(raw.len() + (4 << 20), b'x');
        let frame = raw_block_frame(&raw);
        assert!(frame.len() < 64 << 10, "{}", frame.len());
        let err = decode_all(&mut Decoder::default(), &frame).expect_err("bomb");
        assert!(
            matches!(err, SpdyError::TooLarge { max, .. } if max == 1 << 20),
            "{err}"
        );
    }

    #[test]
    fn the_encoder_refuses_what_the_wire_cannot_carry() {
        let mut e = Encoder::new();
        let mut out = Vec::new();
        let table = [
            (data(0, 0, b"x"), "stream id out of range"),
            (data(0x8000_0000, 0, b"x"), "stream id out of range"),
            (
                data(1, 0, &vec![0; MAX_PAYLOAD + 1]),
                "over the limit of 16777215",
            ),
            (rst(0, RstStatus::Cancel), "stream id out of range"),
            (
                Frame::SynReply {
                    stream_id: 1,
                    flags: 0,
                    headers: h(&[("", "x")]),
                },
                "empty header name",
            ),
        ];
        for (frame, want) in table {
            let err = e.encode(&frame, &mut out).expect_err(want).to_string();
            assert!(err.contains(want), "{err}");
            assert!(out.is_empty());
        }
    }
}
