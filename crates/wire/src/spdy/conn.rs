//! The server side of one SPDY/3.1 session, sans-IO: what a kubelet does with the
//! frames of an upgraded exec/attach/port-forward connection (upstream: spdystream's
//! `Connection` as `httpstream/spdy` runs it on the server side). No socket, no thread,
//! no clock: bytes in, events out, bytes to send.
//!
//! ```text
//! let mut s = Session::new(Config::default());
//! loop {
//!     s.feed(&bytes_read_from_the_socket);
//!     while let Some(ev) = s.poll_event()? {
//!         match ev {
//!             Event::Opened { stream_id, headers, .. } => s.reply(stream_id, vec![], false)?,
//!             Event::Data { stream_id, data, fin } => { /* hand data on */ s.consumed(stream_id, data.len()) }
//!             Event::Reset { .. } | Event::Headers { .. } | Event::GoAway { .. } | Event::Pong { .. }
//!             | Event::WindowOpened { .. } => {}
//!         }
//!     }
//!     s.send_data(stdout_id, &output, false)?;   // DATA frames (FIN with `true`)
//!     socket.write_all(&s.take_output())?;         // everything queued, in order
//! }
//! ```
//!
//! - Streams are the client's (odd ids, increasing). `Event::Opened` carries the
//!   SYN_STREAM's headers (`streamtype`: error/stdin/stdout/stderr/resize, or data/error
//!   with `port` and `requestid` for port-forward); the stream exists until both sides
//!   have sent FIN or either reset it. [`Session::reply`] sends the SYN_REPLY that
//!   kubectl waits for (30 s) before it opens its next stream, and before which it
//!   drops any DATA on the stream.
//! - Half-closes: `Event::Data { fin: true }` (kubectl closes stdin with an empty DATA
//!   FIN); [`Session::close`] sends ours. [`Session::reset`] sends RST_STREAM.
//!   `Event::Reset` means the stream is gone: the client reset it (kubectl cancels every
//!   stream with RST_STREAM CANCEL when it is done), or we did because it broke the
//!   protocol.
//! - PINGs from the client are echoed here; [`Session::ping`] sends ours and
//!   `Event::Pong` reports the echo. A GOAWAY from the client is an event and
//!   [`Session::go_away_received`]; [`Session::go_away`] sends ours (spdystream stops
//!   reading at a GOAWAY: send it last).
//! - Flow control (3.1): receive windows per stream and for the session start at
//!   64 KiB; [`Session::consumed`] gives bytes back and sends WINDOW_UPDATE once half
//!   a window is owed. Send windows follow the client's WINDOW_UPDATEs and SETTINGS,
//!   but limit [`Session::send_data`] only with [`Config::enforce_send_window`]:
//!   spdystream (kubectl, kube-apiserver) never sends WINDOW_UPDATE and ignores ours,
//!   so honouring windows would stall every exec after 64 KiB, and a client that
//!   overruns our receive window is tolerated for the same reason (upstream's kubelet,
//!   on spdystream too, has no flow control at all).
//! - Session errors (a frame that cannot be decoded, a header block out of step)
//!   return [`SessionError::Codec`] with a GOAWAY PROTOCOL_ERROR already queued: write
//!   the output and close. Misuse by the caller (unknown stream, second reply, data on
//!   a closed side) is an error that sends nothing.
//!
//! A `Session` is plain data: keep it behind one lock if several threads feed it, and
//! never hold that lock across the socket write.
//!
//! Over 800 lines: the state machine is under 700; the rest are its tests, one per
//! rule of the session, which read best beside it.

use std::collections::BTreeMap;

use super::{
    Decoder, Encoder, Frame, Headers, Limits, RstStatus, SpdyError, FLAG_FIN, FLAG_UNIDIRECTIONAL,
    SETTINGS_INITIAL_WINDOW_SIZE,
};

/// SPDY/3.1's initial window, per stream and for the session.
pub(crate) const DEFAULT_WINDOW: u32 = 64 * 1024;
/// GOAWAY status: a protocol error.
pub(crate) const GOAWAY_PROTOCOL_ERROR: u32 = 1;
/// Pings of ours awaiting their echo that are remembered.
#[cfg(test)]
const MAX_PINGS: usize = 16;

/// How a session behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The decoder's bounds.
    pub limits: Limits,
    /// Streams open at once; a SYN_STREAM beyond gets RST_STREAM REFUSED_STREAM.
    pub max_streams: usize,
    /// Send no more than the client's windows allow (see the module docs: off for
    /// spdystream clients).
    pub enforce_send_window: bool,
    /// The largest DATA frame written; longer sends are split.
    pub max_data_frame: usize,
}

impl Default for Config {
    /// 128 streams (exec opens 5, each port-forward connection 2), no send-window
    /// enforcement, DATA frames of 32 KiB (what spdystream's writers use).
    fn default() -> Config {
        Config {
            limits: Limits::default(),
            max_streams: 128,
            enforce_send_window: false,
            max_data_frame: 32 * 1024,
        }
    }
}

/// What the client did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// It opened a stream (SYN_STREAM); answer with [`Session::reply`] or
    /// [`Session::reset`].
    Opened {
        /// The stream.
        stream_id: u32,
        /// Its headers.
        headers: Headers,
        /// It will send nothing on it.
        fin: bool,
    },
    /// Bytes on a stream; `fin`: its last (the data may then be empty).
    Data {
        /// The stream.
        stream_id: u32,
        /// The bytes; give them back with [`Session::consumed`] once handled.
        data: Vec<u8>,
        /// The client's side is closed.
        fin: bool,
    },
    /// More headers on a stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// The headers.
        headers: Headers,
        /// The client's side is closed.
        fin: bool,
    },
    /// The stream is gone (reset by the client, or by us for breaking the protocol).
    Reset {
        /// The stream.
        stream_id: u32,
        /// Why.
        status: RstStatus,
    },
    /// The client accepts no new streams and is closing the session.
    GoAway {
        /// The last stream of ours it accepted.
        last_good_stream_id: u32,
        /// Its status.
        status: u32,
    },
    /// The echo of a ping of ours.
    Pong {
        /// The ping's id.
        id: u32,
    },
    /// A send window grew (only with [`Config::enforce_send_window`]; stream 0: the
    /// session's).
    WindowOpened {
        /// The stream, or 0.
        stream_id: u32,
    },
}

/// One open stream, as far as the session knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamState {
    /// The SYN_STREAM's headers.
    pub headers: Headers,
    /// Our SYN_REPLY went out.
    pub replied: bool,
    /// The client sent FIN.
    pub remote_closed: bool,
    /// We sent FIN (or the stream is unidirectional).
    pub local_closed: bool,
    send_window: i64,
    recv_window: i64,
    owed: u32,
}

impl StreamState {
    /// What we let the client send before a WINDOW_UPDATE.
    #[cfg(test)]
    pub(crate) fn recv_window(&self) -> i64 {
        self.recv_window
    }
}

/// A session that failed, or a call it refused.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A frame could not be read or written; a GOAWAY is queued, end the connection.
    #[error("spdy session failed")]
    Codec(#[source] SpdyError),
    /// No such open stream.
    #[error("spdy stream {stream_id} is not open")]
    UnknownStream {
        /// The stream.
        stream_id: u32,
    },
    /// The stream already has its SYN_REPLY.
    #[error("spdy stream {stream_id} was already replied to")]
    AlreadyReplied {
        /// The stream.
        stream_id: u32,
    },
    /// Data before the SYN_REPLY (the client would drop it).
    #[error("spdy stream {stream_id} has no reply yet")]
    NotReplied {
        /// The stream.
        stream_id: u32,
    },
    /// Our side of the stream is closed.
    #[error("spdy stream {stream_id} is closed for sending")]
    LocalClosed {
        /// The stream.
        stream_id: u32,
    },
}

/// The server side of one SPDY/3.1 connection.
#[derive(Debug)]
pub struct Session {
    config: Config,
    decoder: Decoder,
    encoder: Encoder,
    out: Vec<u8>,
    streams: BTreeMap<u32, StreamState>,
    last_client_id: u32,
    initial_send_window: i64,
    send_window: i64,
    recv_window: i64,
    owed: u32,
    #[cfg(test)]
    next_ping: u32,
    pings: Vec<u32>,
    go_away_sent: bool,
    go_away_received: Option<(u32, u32)>,
}

impl Session {
    /// A session for a connection just upgraded.
    pub fn new(config: Config) -> Session {
        Session {
            config,
            decoder: Decoder::new(config.limits),
            encoder: Encoder::new(),
            out: Vec::new(),
            streams: BTreeMap::new(),
            last_client_id: 0,
            initial_send_window: i64::from(DEFAULT_WINDOW),
            send_window: i64::from(DEFAULT_WINDOW),
            recv_window: i64::from(DEFAULT_WINDOW),
            owed: 0,
            #[cfg(test)]
            next_ping: 2,
            pings: Vec::new(),
            go_away_sent: false,
            go_away_received: None,
        }
    }

    /// Adds bytes read from the connection.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.decoder.feed(bytes);
    }

    /// The next event from the bytes fed so far; `None` when they hold no more.
    pub fn poll_event(&mut self) -> Result<Option<Event>, SessionError> {
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(None),
                Err(e) => return Err(self.fail(e)),
            };
            if let Some(ev) = self.handle_frame(frame)? {
                return Ok(Some(ev));
            }
        }
    }

    /// Handles one decoded frame (what [`Session::poll_event`] does with each).
    pub(crate) fn handle_frame(&mut self, frame: Frame) -> Result<Option<Event>, SessionError> {
        match frame {
            Frame::SynStream {
                stream_id,
                flags,
                headers,
                ..
            } => {
                if self.go_away_sent {
                    return Ok(None);
                }
                if stream_id % 2 == 0 || stream_id <= self.last_client_id {
                    let status = if self.streams.contains_key(&stream_id) {
                        RstStatus::StreamInUse
                    } else {
                        RstStatus::ProtocolError
                    };
                    return self.reset_by_us(stream_id, status);
                }
                self.last_client_id = stream_id;
                if self.streams.len() >= self.config.max_streams {
                    return self.reset_by_us(stream_id, RstStatus::RefusedStream);
                }
                let fin = flags & FLAG_FIN != 0;
                self.streams.insert(
                    stream_id,
                    StreamState {
                        headers: headers.clone(),
                        replied: false,
                        remote_closed: fin,
                        local_closed: flags & FLAG_UNIDIRECTIONAL != 0,
                        send_window: self.initial_send_window,
                        recv_window: i64::from(DEFAULT_WINDOW),
                        owed: 0,
                    },
                );
                Ok(Some(Event::Opened {
                    stream_id,
                    headers,
                    fin,
                }))
            }
            Frame::SynReply { stream_id, .. } => {
                // We open no streams, so there is nothing to reply to.
                self.reset_by_us(stream_id, RstStatus::InvalidStream)
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                let fin = flags & FLAG_FIN != 0;
                match self.streams.get_mut(&stream_id) {
                    None => self.unknown_stream(stream_id),
                    Some(s) if s.remote_closed => {
                        self.reset_by_us(stream_id, RstStatus::StreamAlreadyClosed)
                    }
                    Some(s) => {
                        s.remote_closed = fin;
                        self.forget_if_closed(stream_id);
                        Ok(Some(Event::Headers {
                            stream_id,
                            headers,
                            fin,
                        }))
                    }
                }
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                let len = data.len();
                self.recv_window -= len as i64;
                let fin = flags & FLAG_FIN != 0;
                let r = match self.streams.get_mut(&stream_id) {
                    None => self.unknown_stream(stream_id),
                    Some(s) if s.remote_closed => {
                        self.reset_by_us(stream_id, RstStatus::StreamAlreadyClosed)
                    }
                    Some(s) => {
                        // An overrun window is tolerated (see the module docs).
                        s.recv_window -= len as i64;
                        s.remote_closed = fin;
                        self.forget_if_closed(stream_id);
                        return Ok(Some(Event::Data {
                            stream_id,
                            data,
                            fin,
                        }));
                    }
                };
                // Dropped data still counts against the session window: give it back.
                self.consumed(stream_id, len);
                r
            }
            Frame::RstStream { stream_id, status } => Ok(self
                .streams
                .remove(&stream_id)
                .map(|_| Event::Reset { stream_id, status })),
            Frame::Settings { entries, .. } => {
                for e in entries {
                    if e.id == SETTINGS_INITIAL_WINDOW_SIZE {
                        let new = i64::from(e.value & 0x7FFF_FFFF);
                        let delta = new - self.initial_send_window;
                        self.initial_send_window = new;
                        for s in self.streams.values_mut() {
                            s.send_window += delta;
                        }
                    }
                }
                Ok(None)
            }
            Frame::Ping { id } => {
                if id % 2 == 1 {
                    self.queue(&Frame::Ping { id })?;
                    Ok(None)
                } else if let Some(i) = self.pings.iter().position(|p| *p == id) {
                    self.pings.remove(i);
                    Ok(Some(Event::Pong { id }))
                } else {
                    Ok(None)
                }
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                self.go_away_received = Some((last_good_stream_id, status));
                Ok(Some(Event::GoAway {
                    last_good_stream_id,
                    status,
                }))
            }
            Frame::WindowUpdate { stream_id, delta } => {
                let delta = i64::from(delta);
                if stream_id == 0 {
                    self.send_window += delta;
                } else if let Some(s) = self.streams.get_mut(&stream_id) {
                    s.send_window += delta;
                } else {
                    return Ok(None);
                }
                Ok(self
                    .config
                    .enforce_send_window
                    .then_some(Event::WindowOpened { stream_id }))
            }
        }
    }

    /// Accepts a stream the client opened (SYN_REPLY, no headers needed by kubectl);
    /// `fin` closes our side at once.
    pub fn reply(
        &mut self,
        stream_id: u32,
        headers: Headers,
        fin: bool,
    ) -> Result<(), SessionError> {
        let s = self.open_stream(stream_id)?;
        if s.replied {
            return Err(SessionError::AlreadyReplied { stream_id });
        }
        if s.local_closed {
            return Err(SessionError::LocalClosed { stream_id });
        }
        s.replied = true;
        s.local_closed = fin;
        let flags = if fin { FLAG_FIN } else { 0 };
        self.queue(&Frame::SynReply {
            stream_id,
            flags,
            headers,
        })?;
        self.forget_if_closed(stream_id);
        Ok(())
    }

    /// Queues `data` on a replied stream, split into DATA frames; `fin` closes our
    /// side after it. Returns how many bytes were taken: all of them, unless
    /// [`Config::enforce_send_window`] and a window is short (FIN is then not sent).
    pub fn send_data(
        &mut self,
        stream_id: u32,
        data: &[u8],
        fin: bool,
    ) -> Result<usize, SessionError> {
        let enforce = self.config.enforce_send_window;
        let session_window = self.send_window;
        let s = self.open_stream(stream_id)?;
        if !s.replied {
            return Err(SessionError::NotReplied { stream_id });
        }
        if s.local_closed {
            return Err(SessionError::LocalClosed { stream_id });
        }
        let n = if enforce {
            let room = s.send_window.min(session_window).max(0);
            data.len().min(usize::try_from(room).unwrap_or(usize::MAX))
        } else {
            data.len()
        };
        let fin = fin && n == data.len();
        s.send_window -= n as i64;
        s.local_closed = fin;
        self.send_window -= n as i64;
        let max = self.config.max_data_frame.max(1);
        let mut chunks = data[..n].chunks(max).peekable();
        if chunks.peek().is_none() && fin {
            self.queue(&data_frame(stream_id, &[], true))?;
        }
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            self.queue(&data_frame(stream_id, c, fin && last))?;
        }
        self.forget_if_closed(stream_id);
        Ok(n)
    }

    /// Closes our side of a stream (an empty DATA with FIN).
    pub fn close(&mut self, stream_id: u32) -> Result<(), SessionError> {
        self.send_data(stream_id, &[], true).map(|_| ())
    }

    /// Ends a stream with RST_STREAM; a stream already gone is left alone.
    pub(crate) fn reset(&mut self, stream_id: u32, status: RstStatus) -> Result<(), SessionError> {
        if self.streams.remove(&stream_id).is_some() {
            self.queue(&Frame::RstStream { stream_id, status })?;
        }
        Ok(())
    }

    /// Gives back `n` bytes of a stream's data once handled; sends WINDOW_UPDATE for
    /// the stream and the session when half a window is owed.
    pub fn consumed(&mut self, stream_id: u32, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let half = DEFAULT_WINDOW / 2;
        let mut updates = Vec::new();
        if let Some(s) = self.streams.get_mut(&stream_id) {
            s.owed = s.owed.saturating_add(n);
            if s.owed >= half && !s.remote_closed {
                s.recv_window += i64::from(s.owed);
                updates.push((stream_id, s.owed));
                s.owed = 0;
            }
        }
        self.owed = self.owed.saturating_add(n);
        if self.owed >= half {
            self.recv_window += i64::from(self.owed);
            updates.push((0, self.owed));
            self.owed = 0;
        }
        for (stream_id, delta) in updates {
            let delta = delta.min(0x7FFF_FFFF);
            // A WINDOW_UPDATE has no header block: encoding it cannot fail.
            let _ = self.queue(&Frame::WindowUpdate { stream_id, delta });
        }
    }

    /// Sends a PING; its echo comes back as [`Event::Pong`] with the returned id.
    #[cfg(test)]
    pub(crate) fn ping(&mut self) -> Result<u32, SessionError> {
        let id = self.next_ping;
        self.next_ping = if id >= 0x7FFF_FFFE { 2 } else { id + 2 };
        if self.pings.len() >= MAX_PINGS {
            self.pings.remove(0);
        }
        self.pings.push(id);
        self.queue(&Frame::Ping { id })?;
        Ok(id)
    }

    /// Sends GOAWAY (once): no new streams after the last one accepted.
    pub(crate) fn go_away(&mut self, status: u32) -> Result<(), SessionError> {
        if !self.go_away_sent {
            self.go_away_sent = true;
            self.queue(&Frame::GoAway {
                last_good_stream_id: self.last_client_id,
                status,
            })?;
        }
        Ok(())
    }

    /// The client's GOAWAY, if one came: (last good stream, status).
    #[cfg(test)]
    pub(crate) fn go_away_received(&self) -> Option<(u32, u32)> {
        self.go_away_received
    }

    /// An open stream's state.
    #[cfg(test)]
    pub(crate) fn stream(&self, stream_id: u32) -> Option<&StreamState> {
        self.streams.get(&stream_id)
    }

    /// How many streams are open.
    #[cfg(test)]
    pub(crate) fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The session's send window (what the client lets us send on all streams).
    #[cfg(test)]
    pub(crate) fn send_window(&self) -> i64 {
        self.send_window
    }

    /// The session's receive window.
    #[cfg(test)]
    pub(crate) fn recv_window(&self) -> i64 {
        self.recv_window
    }

    /// Everything queued to send, in order; the queue is then empty.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// How many bytes wait to be sent.
    pub(crate) fn pending_output(&self) -> usize {
        self.out.len()
    }

    fn open_stream(&mut self, stream_id: u32) -> Result<&mut StreamState, SessionError> {
        self.streams
            .get_mut(&stream_id)
            .ok_or(SessionError::UnknownStream { stream_id })
    }

    fn queue(&mut self, frame: &Frame) -> Result<(), SessionError> {
        match self.encoder.encode(frame, &mut self.out) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// A session error: GOAWAY PROTOCOL_ERROR queued, the error returned.
    fn fail(&mut self, e: SpdyError) -> SessionError {
        if !self.go_away_sent {
            self.go_away_sent = true;
            let frame = Frame::GoAway {
                last_good_stream_id: self.last_client_id,
                status: GOAWAY_PROTOCOL_ERROR,
            };
            let _ = self.encoder.encode(&frame, &mut self.out);
        }
        SessionError::Codec(e)
    }

    /// A stream error of ours: RST_STREAM, the stream forgotten and reported gone if
    /// it was open.
    fn reset_by_us(
        &mut self,
        stream_id: u32,
        status: RstStatus,
    ) -> Result<Option<Event>, SessionError> {
        let was_open = self.streams.remove(&stream_id).is_some();
        self.queue(&Frame::RstStream { stream_id, status })?;
        Ok(was_open.then_some(Event::Reset { stream_id, status }))
    }

    /// A frame for a stream that is not open: INVALID_STREAM if it never was; a
    /// stream that closed or was reset may still see frames in flight, dropped.
    fn unknown_stream(&mut self, stream_id: u32) -> Result<Option<Event>, SessionError> {
        if stream_id % 2 == 0 || stream_id > self.last_client_id {
            return self.reset_by_us(stream_id, RstStatus::InvalidStream);
        }
        Ok(None)
    }

    fn forget_if_closed(&mut self, stream_id: u32) {
        if self
            .streams
            .get(&stream_id)
            .is_some_and(|s| s.local_closed && s.remote_closed)
        {
            self.streams.remove(&stream_id);
        }
    }
}

fn data_frame(stream_id: u32, data: &[u8], fin: bool) -> Frame {
    Frame::Data {
        stream_id,
        flags: if fin { FLAG_FIN } else { 0 },
        data: data.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spdy::{Setting, FLAG_FIN};

    /// The client's side of the wire: its own encoder and decoder.
    struct Client {
        enc: Encoder,
        dec: Decoder,
    }

    impl Client {
        fn new() -> Client {
            Client {
                enc: Encoder::new(),
                dec: Decoder::default(),
            }
        }

        fn bytes(&mut self, frames: &[Frame]) -> Vec<u8> {
            let mut out = Vec::new();
            for f in frames {
                self.enc.encode(f, &mut out).expect("encode");
            }
            out
        }

        /// Sends `frames` and returns the session's events.
        fn send(&mut self, s: &mut Session, frames: &[Frame]) -> Vec<Event> {
            s.feed(&self.bytes(frames));
            let mut evs = Vec::new();
            while let Some(e) = s.poll_event().expect("poll") {
                evs.push(e);
            }
            evs
        }

        /// What the session sent since the last call.
        fn received(&mut self, s: &mut Session) -> Vec<Frame> {
            self.dec.feed(&s.take_output());
            let mut out = Vec::new();
            while let Some(f) = self.dec.next_frame().expect("decode") {
                out.push(f);
            }
            out
        }
    }

    fn syn(stream_id: u32, streamtype: &str) -> Frame {
        Frame::SynStream {
            stream_id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            flags: 0,
            headers: vec![("streamtype".into(), streamtype.into())],
        }
    }

    fn data(stream_id: u32, fin: bool, d: &[u8]) -> Frame {
        Frame::Data {
            stream_id,
            flags: if fin { FLAG_FIN } else { 0 },
            data: d.to_vec(),
        }
    }

    fn rst(stream_id: u32, status: RstStatus) -> Frame {
        Frame::RstStream { stream_id, status }
    }

    fn reply(stream_id: u32) -> Frame {
        Frame::SynReply {
            stream_id,
            flags: 0,
            headers: vec![],
        }
    }

    fn opened(stream_id: u32, streamtype: &str) -> Event {
        Event::Opened {
            stream_id,
            headers: vec![("streamtype".into(), streamtype.into())],
            fin: false,
        }
    }

    #[test]
    fn an_exec_session_runs_from_syn_stream_to_goaway() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        let types = ["error", "stdin", "stdout", "stderr"];
        for (i, t) in types.iter().enumerate() {
            let id = 2 * i as u32 + 1;
            assert_eq!(c.send(&mut s, &[syn(id, t)]), vec![opened(id, t)]);
            s.reply(id, vec![], false).expect("reply");
            assert_eq!(c.received(&mut s), vec![reply(id)]);
        }
        let evs = c.send(&mut s, &[data(3, false, b"hello\n"), data(3, true, b"")]);
        assert_eq!(
            evs,
            vec![
                Event::Data {
                    stream_id: 3,
                    data: b"hello\n".to_vec(),
                    fin: false
                },
                Event::Data {
                    stream_id: 3,
                    data: vec![],
                    fin: true
                },
            ]
        );
        assert!(s
            .stream(3)
            .is_some_and(|st| st.remote_closed && !st.local_closed));
        s.close(3).expect("close stdin");
        assert!(s.stream(3).is_none(), "closed both ways: forgotten");
        assert_eq!(s.send_data(5, b"hi\n", true).expect("stdout"), 3);
        s.close(7).expect("stderr");
        s.close(1).expect("error");
        assert_eq!(
            c.received(&mut s),
            vec![
                data(3, true, b""),
                data(5, true, b"hi\n"),
                data(7, true, b""),
                data(1, true, b"")
            ]
        );
        let evs = c.send(
            &mut s,
            &[
                rst(5, RstStatus::Cancel),
                Frame::GoAway {
                    last_good_stream_id: 0,
                    status: 0,
                },
            ],
        );
        assert_eq!(
            evs,
            vec![
                Event::Reset {
                    stream_id: 5,
                    status: RstStatus::Cancel
                },
                Event::GoAway {
                    last_good_stream_id: 0,
                    status: 0
                }
            ]
        );
        assert_eq!(s.go_away_received(), Some((0, 0)));
        assert_eq!(
            s.open_streams(),
            2,
            "7 and 1: open until the client closes them"
        );
    }

    #[test]
    fn the_captured_kubectl_exec_reads_as_events() {
        let mut s = Session::new(Config::default());
        s.feed(include_bytes!("fixtures/exec_stdin.bin"));
        let mut evs = Vec::new();
        while let Some(e) = s.poll_event().expect("poll") {
            evs.push(e);
        }
        assert_eq!(evs.len(), 10, "{evs:?}");
        assert_eq!(evs[0], opened(1, "error"));
        assert_eq!(evs[3], opened(7, "stderr"));
        assert!(matches!(evs[8], Event::Reset { stream_id: 1, .. }));
        assert!(matches!(evs[9], Event::GoAway { .. }));
        assert_eq!(s.open_streams(), 1, "stdin: half-closed by the client only");
        assert!(
            s.take_output().is_empty(),
            "nothing to answer without replies"
        );
    }

    #[test]
    fn client_pings_are_echoed_and_ours_come_back_as_pongs() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        assert!(c.send(&mut s, &[Frame::Ping { id: 1 }]).is_empty());
        assert_eq!(c.received(&mut s), vec![Frame::Ping { id: 1 }]);
        let id = s.ping().expect("ping");
        assert_eq!(id, 2);
        assert_eq!(c.received(&mut s), vec![Frame::Ping { id: 2 }]);
        assert_eq!(
            c.send(&mut s, &[Frame::Ping { id: 2 }]),
            vec![Event::Pong { id: 2 }]
        );
        // An even id we never sent (or already saw) is ignored.
        assert!(c.send(&mut s, &[Frame::Ping { id: 2 }]).is_empty());
        assert!(c.received(&mut s).is_empty());
    }

    #[test]
    fn stream_ids_that_break_the_rules_are_reset() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(5, "stdin")]);
        let cases: &[(Frame, RstStatus, Option<Event>)] = &[
            (syn(4, "x"), RstStatus::ProtocolError, None),
            (syn(3, "x"), RstStatus::ProtocolError, None),
            (
                syn(5, "x"),
                RstStatus::StreamInUse,
                Some(Event::Reset {
                    stream_id: 5,
                    status: RstStatus::StreamInUse,
                }),
            ),
            (data(9, false, b"x"), RstStatus::InvalidStream, None),
            (reply(7), RstStatus::InvalidStream, None),
        ];
        for (frame, status, event) in cases {
            let evs = c.send(&mut s, std::slice::from_ref(frame));
            assert_eq!(evs, event.iter().cloned().collect::<Vec<_>>(), "{frame:?}");
            let id = match frame {
                Frame::SynStream { stream_id, .. }
                | Frame::Data { stream_id, .. }
                | Frame::SynReply { stream_id, .. } => *stream_id,
                _ => 0,
            };
            assert_eq!(c.received(&mut s), vec![rst(id, *status)], "{frame:?}");
        }
        // Frames in flight for a stream that is gone are dropped quietly.
        assert!(c.send(&mut s, &[data(5, false, b"late")]).is_empty());
        assert!(c.send(&mut s, &[rst(5, RstStatus::Cancel)]).is_empty());
        assert!(c.received(&mut s).is_empty());
    }

    #[test]
    fn data_after_the_clients_fin_resets_the_stream() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(1, "stdin"), data(1, true, b"")]);
        let evs = c.send(&mut s, &[data(1, false, b"x")]);
        assert_eq!(
            evs,
            vec![Event::Reset {
                stream_id: 1,
                status: RstStatus::StreamAlreadyClosed
            }]
        );
        assert_eq!(
            c.received(&mut s),
            vec![rst(1, RstStatus::StreamAlreadyClosed)]
        );
    }

    #[test]
    fn streams_beyond_the_cap_are_refused() {
        let config = Config {
            max_streams: 2,
            ..Config::default()
        };
        let (mut s, mut c) = (Session::new(config), Client::new());
        let evs = c.send(&mut s, &[syn(1, "a"), syn(3, "b"), syn(5, "c")]);
        assert_eq!(evs, vec![opened(1, "a"), opened(3, "b")]);
        assert_eq!(c.received(&mut s), vec![rst(5, RstStatus::RefusedStream)]);
        // A slot freed is a slot again.
        c.send(&mut s, &[rst(1, RstStatus::Cancel)]);
        assert_eq!(c.send(&mut s, &[syn(7, "d")]), vec![opened(7, "d")]);
    }

    #[test]
    fn consumed_data_is_given_back_with_window_updates() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(1, "stdin")]);
        s.reply(1, vec![], false).expect("reply");
        c.received(&mut s);
        c.send(&mut s, &[data(1, false, &[0; 20_000])]);
        s.consumed(1, 20_000);
        assert!(
            c.received(&mut s).is_empty(),
            "less than half a window owed"
        );
        c.send(&mut s, &[data(1, false, &[0; 20_000])]);
        assert_eq!(
            s.stream(1).map(StreamState::recv_window),
            Some(65536 - 40_000)
        );
        s.consumed(1, 20_000);
        assert_eq!(
            c.received(&mut s),
            vec![
                Frame::WindowUpdate {
                    stream_id: 1,
                    delta: 40_000
                },
                Frame::WindowUpdate {
                    stream_id: 0,
                    delta: 40_000
                }
            ]
        );
        assert_eq!(s.stream(1).map(StreamState::recv_window), Some(65536));
        assert_eq!(s.recv_window(), 65536);
    }

    #[test]
    fn a_client_that_overruns_its_window_is_tolerated() {
        // spdystream (kubectl) never waits for WINDOW_UPDATE.
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(1, "stdin")]);
        let evs = c.send(&mut s, &[data(1, false, &[1; 100_000])]);
        assert_eq!(evs.len(), 1);
        assert_eq!(
            s.stream(1).map(StreamState::recv_window),
            Some(65536 - 100_000)
        );
        assert!(c.received(&mut s).is_empty(), "no RST, no GOAWAY");
    }

    #[test]
    fn sends_are_split_into_frames_and_ignore_windows_by_default() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(1, "stdout")]);
        s.reply(1, vec![], false).expect("reply");
        c.received(&mut s);
        let big = vec![7u8; 100_000];
        assert_eq!(s.send_data(1, &big, true).expect("send"), 100_000);
        let frames = c.received(&mut s);
        let sizes: Vec<(usize, u8)> = frames
            .iter()
            .map(|f| match f {
                Frame::Data { data, flags, .. } => (data.len(), *flags),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            sizes,
            vec![(32768, 0), (32768, 0), (32768, 0), (1696, FLAG_FIN)]
        );
        assert_eq!(s.send_window(), 65536 - 100_000);
    }

    #[test]
    fn an_enforced_send_window_limits_sends_until_the_client_opens_it() {
        let config = Config {
            enforce_send_window: true,
            ..Config::default()
        };
        let (mut s, mut c) = (Session::new(config), Client::new());
        // The client halves the initial window before opening the stream.
        let settings = Frame::Settings {
            flags: 0,
            entries: vec![Setting {
                flags: 0,
                id: SETTINGS_INITIAL_WINDOW_SIZE,
                value: 32768,
            }],
        };
        c.send(&mut s, &[settings, syn(1, "stdout")]);
        s.reply(1, vec![], false).expect("reply");
        assert_eq!(s.send_data(1, &[0; 50_000], true).expect("send"), 32768);
        assert_eq!(s.send_data(1, &[0; 10], true).expect("send"), 0);
        assert!(s.stream(1).is_some_and(|st| !st.local_closed), "no FIN yet");
        let evs = c.send(
            &mut s,
            &[Frame::WindowUpdate {
                stream_id: 1,
                delta: 100_000,
            }],
        );
        assert_eq!(evs, vec![Event::WindowOpened { stream_id: 1 }]);
        // Now the session window (64 KiB - 32 KiB) is the short one.
        assert_eq!(s.send_data(1, &[0; 50_000], false).expect("send"), 32768);
        c.send(
            &mut s,
            &[Frame::WindowUpdate {
                stream_id: 0,
                delta: 100_000,
            }],
        );
        assert_eq!(s.send_data(1, &[0; 10], true).expect("send"), 10);
        assert!(s.stream(1).is_some_and(|st| st.local_closed));
    }

    #[test]
    fn misuse_is_refused_and_sends_nothing() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(1, "stdout")]);
        let err = |r: Result<usize, SessionError>| r.expect_err("misuse").to_string();
        assert_eq!(
            err(s.send_data(1, b"x", false)),
            "spdy stream 1 has no reply yet"
        );
        assert_eq!(
            err(s.send_data(3, b"x", false)),
            "spdy stream 3 is not open"
        );
        s.reply(1, vec![], false).expect("reply");
        assert!(matches!(
            s.reply(1, vec![], false),
            Err(SessionError::AlreadyReplied { stream_id: 1 })
        ));
        s.close(1).expect("close");
        assert_eq!(
            err(s.send_data(1, b"x", false)),
            "spdy stream 1 is closed for sending"
        );
        assert_eq!(c.received(&mut s), vec![reply(1), data(1, true, b"")]);
        // Resetting a stream that is gone is a no-op.
        s.reset(9, RstStatus::Cancel).expect("reset");
        assert!(c.received(&mut s).is_empty());
    }

    #[test]
    fn a_broken_frame_fails_the_session_with_a_goaway() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(1, "stdin"), syn(3, "stdout")]);
        s.feed(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]);
        let err = s.poll_event().expect_err("SPDY/2");
        assert!(
            std::error::Error::source(&err).is_some_and(|e| e.to_string().contains("version 2")),
            "{err}"
        );
        assert_eq!(
            c.received(&mut s),
            vec![Frame::GoAway {
                last_good_stream_id: 3,
                status: GOAWAY_PROTOCOL_ERROR
            }]
        );
        // Once: a second error queues nothing more.
        assert!(s.poll_event().is_err());
        assert!(s.take_output().is_empty());
    }

    #[test]
    fn a_data_frame_announcing_more_than_1_mib_ends_the_session_at_its_header() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(1, "stdin")]);
        // 16 MiB announced on stdin: refused before any of it is buffered.
        s.feed(&[0, 0, 0, 1, 0, 0xFF, 0xFF, 0xFF]);
        let err = s.poll_event().expect_err("over the cap");
        assert_eq!(
            base::loops::error_chain(&err),
            "spdy session failed: spdy DATA on stream 1: 16777215 bytes, over the limit \
             of 1048576"
        );
        assert_eq!(
            c.received(&mut s),
            vec![Frame::GoAway {
                last_good_stream_id: 1,
                status: GOAWAY_PROTOCOL_ERROR
            }]
        );
    }

    #[test]
    fn after_our_goaway_new_streams_are_ignored() {
        let (mut s, mut c) = (Session::new(Config::default()), Client::new());
        c.send(&mut s, &[syn(1, "error")]);
        s.go_away(0).expect("goaway");
        s.go_away(0).expect("goaway once");
        assert_eq!(
            c.received(&mut s),
            vec![Frame::GoAway {
                last_good_stream_id: 1,
                status: 0
            }]
        );
        assert!(c.send(&mut s, &[syn(3, "stdin")]).is_empty());
        assert!(c.received(&mut s).is_empty());
        // The streams accepted before it go on.
        s.reply(1, vec![], true).expect("reply");
        assert_eq!(
            c.received(&mut s),
            vec![Frame::SynReply {
                stream_id: 1,
                flags: FLAG_FIN,
                headers: vec![]
            }]
        );
    }
}
