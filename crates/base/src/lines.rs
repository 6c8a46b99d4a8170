//! Reading newline-delimited records (JSON lines) from a blocking byte stream: Docker's
//! event and pull-progress streams, etcd's watch, the API server's watch, the URL
//! source. One reader for all of them, tolerant of read timeouts mid-line.

use std::io::{self, Read};

/// Reads newline-delimited records from a byte stream. An error (such as a read
/// timeout) leaves any partial line buffered, so the caller may simply call again.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    // Bytes before `scanned` hold no newline; the next search starts there.
    scanned: usize,
    max_line: usize,
    eof: bool,
}

impl<R: Read> LineReader<R> {
    /// A reader that refuses lines longer than `max_line` bytes (a broken peer must not
    /// grow our memory without bound).
    pub fn new(inner: R, max_line: usize) -> LineReader<R> {
        LineReader {
            inner,
            buf: Vec::new(),
            scanned: 0,
            max_line,
            eof: false,
        }
    }

    /// The next line without its `\n` (and without a `\r` before it); Ok(None) at the
    /// end of the stream. A last line without a newline is still returned. Empty lines
    /// are returned as empty.
    pub fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(pos) = self.buf[self.scanned..].iter().position(|&c| c == b'\n') {
                let end = self.scanned + pos;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.scanned = 0;
                return Ok(Some(line));
            }
            self.scanned = self.buf.len();
            if self.eof {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                self.scanned = 0;
                return Ok(Some(std::mem::take(&mut self.buf)));
            }
            if self.buf.len() > self.max_line {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("line longer than {} bytes", self.max_line),
                ));
            }
            match self.inner.read(&mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays a script of reads: bytes, or a timeout.
    struct Script(Vec<Option<&'static [u8]>>);

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            match self.0.remove(0) {
                Some(data) => {
                    buf[..data.len()].copy_from_slice(data);
                    Ok(data.len())
                }
                None => Err(io::ErrorKind::TimedOut.into()),
            }
        }
    }

    #[test]
    fn line_reader_keeps_partial_lines_across_timeouts() {
        let script = Script(vec![
            Some(b"{\"a\":"),
            None,
            Some(b"1}\n{\"b\""),
            None,
            None,
            Some(b":2}\r\n\ntail"),
        ]);
        let mut r = LineReader::new(script, 1024);
        assert_eq!(
            r.next_line().expect_err("an error").kind(),
            io::ErrorKind::TimedOut
        );
        assert_eq!(
            r.next_line().expect("a read").expect("a line"),
            b"{\"a\":1}"
        );
        assert_eq!(
            r.next_line().expect_err("an error").kind(),
            io::ErrorKind::TimedOut
        );
        assert_eq!(
            r.next_line().expect_err("an error").kind(),
            io::ErrorKind::TimedOut
        );
        assert_eq!(
            r.next_line().expect("a read").expect("a line"),
            b"{\"b\":2}"
        );
        assert_eq!(r.next_line().expect("a read").expect("a line"), b"");
        assert_eq!(r.next_line().expect("a read").expect("a line"), b"tail");
        assert_eq!(r.next_line().expect("a read"), None);
    }

    #[test]
    fn line_reader_refuses_endless_lines() {
        let script = Script(vec![Some(b"0123456789"), Some(b"0123456789")]);
        let mut r = LineReader::new(script, 12);
        assert_eq!(
            r.next_line().expect_err("an error").kind(),
            io::ErrorKind::InvalidData
        );
    }
}
