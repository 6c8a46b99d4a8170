//! `GET /logs/` and `/logs/{path}` on the kubelet port: a file server over the node's
//! log directory (`/var/log`), as upstream's `http.StripPrefix("/logs/",
//! http.FileServer(http.Dir("/var/log/")))`: directories listed as Go's `dirList`
//! prints them (`<pre>` and one link per entry, sorted, directories with a `/`), a
//! directory's `index.html` served instead of its listing, files served with
//! `Content-Length`, `Last-Modified` and a content type from the extension or the
//! first bytes; Go's redirects: a directory without its trailing slash, a file with
//! one, and `…/index.html`, to their canonical URL (301, relative `Location`).
//!
//! Nothing outside the root is ever served: the path is percent-decoded and cleaned
//! of `..` first (so `%2e%2e` stays inside, as Go's `path.Clean` keeps it); the file
//! is found by resolving every symlink and must lie under the resolved root; it is
//! opened with `O_NOFOLLOW`, and the opened descriptor's own path (`/proc/self/fd`)
//! is checked again, so a component swapped for a symlink in between cannot lead out.
//! Unlike Go's `http.Dir`, a symlink that leads out of the root is 404, and anything
//! but regular files and directories (FIFOs, devices, sockets) is 403: Go would
//! follow the one and block on the other.
//!
//! Small files are answered whole; larger ones stream from a thread of their own
//! (a [`Reply::takeover`]), read in pieces, never whole. No `Range` or
//! `If-Modified-Since` handling (Go's `serveContent` has both).

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::logs::percent_decode;
use wire::server::{Reply, Req};

/// Files up to this size are read whole into the answer by the worker; larger ones
/// stream from a thread of their own.
const WHOLE_FILE_MAX: u64 = 256 * 1024;

/// The piece of a file read and written at a time when streaming.
const PIECE: usize = 64 * 1024;

/// Serves `/logs/<rest>` from `root`. `rest` is the raw (still percent-encoded) path
/// after `/logs/`.
pub(crate) fn handle(root: &Path, req: &Req, rest: &str) -> Reply {
    if req.method != "GET" {
        return Reply::method_not_allowed("GET");
    }
    // Go's server refuses a path that does not decode before any handler runs.
    let Some(decoded) = percent_decode(rest) else {
        return Reply::text(400, "400 Bad Request");
    };
    // After StripPrefix, FileServer works on "/" + the rest.
    let url = format!("/{decoded}");
    if url.ends_with("/index.html") {
        return local_redirect("./", &req.query);
    }
    let name = clean(&url);
    let (file, meta) = match open_below(root, &name) {
        Ok(f) => f,
        Err(e) => return http_error(&e),
    };
    if meta.is_dir() && !url.ends_with('/') {
        return local_redirect(&format!("{}/", base(&url)), &req.query);
    }
    if !meta.is_dir() && url.ends_with('/') {
        let b = base(&url);
        let b = if b == "/" || b == "." { "" } else { b };
        return local_redirect(&format!("../{b}"), &req.query);
    }
    if meta.is_dir() {
        let index = format!("{}/index.html", name.trim_end_matches('/'));
        return match open_below(root, &index) {
            Ok((f, m)) if m.is_file() => serve_file(f, &m, "index.html"),
            _ => dir_list(&file, &meta),
        };
    }
    if !meta.is_file() {
        return Reply::text(403, "403 Forbidden\n");
    }
    serve_file(file, &meta, base(&name))
}

/// Go's `path.Clean` of a rooted path (`..` never climbs above `/`).
pub(crate) fn clean(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Go's `path.Base`: the last element, trailing slashes dropped (`/` for the root).
fn base(p: &str) -> &str {
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return "/";
    }
    t.rsplit('/').next().unwrap_or(t)
}

/// Go's `localRedirect`: 301 to a relative location (the query kept), no body.
fn local_redirect(location: &str, query: &str) -> Reply {
    let mut loc = escape_path(location);
    if !query.is_empty() {
        loc.push('?');
        loc.push_str(query);
    }
    Reply {
        content_type: "",
        ..Reply::text(301, "")
    }
    .with_header("Location", loc)
}

/// Go's `toHTTPError`.
fn http_error(e: &io::Error) -> Reply {
    match e.kind() {
        io::ErrorKind::NotFound => Reply::not_found(),
        io::ErrorKind::PermissionDenied => Reply::text(403, "403 Forbidden\n"),
        io::ErrorKind::InvalidInput => Reply::text(400, "400 Bad Request\n"),
        _ => Reply::text(500, "500 Internal Server Error\n"),
    }
}

/// Opens `root` + `name` (`name` clean and rooted) without ever leaving `root`:
/// NotFound for anything missing or outside it.
fn open_below(root: &Path, name: &str) -> io::Result<(File, Metadata)> {
    let outside = || io::Error::from(io::ErrorKind::NotFound);
    let root = root.canonicalize()?;
    let wanted = root.join(name.trim_start_matches('/'));
    let real = wanted.canonicalize()?;
    if !real.starts_with(&root) {
        return Err(outside());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&real)
        .map_err(|e| {
            // ELOOP: the last component became a symlink since it was resolved.
            if e.raw_os_error() == Some(libc::ELOOP) {
                outside()
            } else {
                e
            }
        })?;
    let opened = std::fs::read_link(fd_path(&file))?;
    if !opened.starts_with(&root) {
        return Err(outside());
    }
    let meta = file.metadata()?;
    Ok((file, meta))
}

/// The descriptor's magic link: the file itself, whatever its path has become.
fn fd_path(f: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// `Last-Modified`, as Go sets it (not for the zero time).
fn last_modified(meta: &Metadata) -> Option<String> {
    meta.modified()
        .ok()
        .filter(|t| *t > SystemTime::UNIX_EPOCH)
        .map(base::time::http_date)
}

/// Go's `dirList`.
fn dir_list(dir: &File, meta: &Metadata) -> Reply {
    let entries = match std::fs::read_dir(fd_path(dir)) {
        Ok(rd) => rd,
        Err(e) => {
            log::debug!("logs: error reading directory: {e}");
            return Reply::text(500, "Error reading directory\n");
        }
    };
    let mut names: Vec<(Vec<u8>, bool)> = Vec::new();
    for e in entries {
        let Ok(e) = e else {
            return Reply::text(500, "Error reading directory\n");
        };
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        names.push((e.file_name().as_bytes().to_vec(), is_dir));
    }
    base::sort::sort(&mut names);
    let mut body = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for (name, is_dir) in names {
        let mut name = String::from_utf8_lossy(&name).into_owned();
        if is_dir {
            name.push('/');
        }
        let mut href = escape_path(&name);
        // url.URL.String: a first segment with a colon would read as a scheme.
        if name.split('/').next().is_some_and(|s| s.contains(':')) {
            href.insert_str(0, "./");
        }
        body.push_str(&format!("<a href=\"{href}\">{}</a>\n", html_escape(&name)));
    }
    body.push_str("</pre>\n");
    let reply = Reply {
        content_type: "text/html; charset=utf-8",
        ..Reply::text(200, body)
    };
    match last_modified(meta) {
        Some(t) => reply.with_header("Last-Modified", t),
        None => reply,
    }
}

/// Go's `url.URL{Path: p}.EscapedPath()`: everything but unreserved characters and
/// `$&+,/:;=@` percent-encoded (uppercase hex).
pub(crate) fn escape_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b','
                    | b'/'
                    | b':'
                    | b';'
                    | b'='
                    | b'@'
            );
        if keep {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's `htmlReplacer`.
fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The content type of a file: Go's built-in extension table, else a sniff of its
/// first bytes (the cases log directories hold).
fn content_type(name: &str, head: &[u8]) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "avif" => return "image/avif",
        "css" => return "text/css; charset=utf-8",
        "gif" => return "image/gif",
        "htm" | "html" => return "text/html; charset=utf-8",
        "jpeg" | "jpg" => return "image/jpeg",
        "js" | "mjs" => return "text/javascript; charset=utf-8",
        "json" => return "application/json",
        "pdf" => return "application/pdf",
        "png" => return "image/png",
        "svg" => return "image/svg+xml",
        "wasm" => return "application/wasm",
        "webp" => return "image/webp",
        "xml" => return "text/xml; charset=utf-8",
        _ => {}
    }
    sniff(head)
}

/// The part of Go's `DetectContentType` that log files meet: gzip and zip archives,
/// PDF, a UTF-8 byte-order mark, and text (no control bytes but tab, newlines, form
/// feed and escape) versus binary.
fn sniff(head: &[u8]) -> &'static str {
    let head = &head[..head.len().min(512)];
    if head.starts_with(b"\x1f\x8b\x08") {
        return "application/x-gzip";
    }
    if head.starts_with(b"PK\x03\x04") {
        return "application/zip";
    }
    if head.starts_with(b"%PDF-") {
        return "application/pdf";
    }
    if head.starts_with(b"\xef\xbb\xbf") {
        return "text/plain; charset=utf-8";
    }
    let binary = head
        .iter()
        .any(|&b| matches!(b, 0x00..=0x08 | 0x0b | 0x0e..=0x1a | 0x1c..=0x1f));
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// A regular file's answer: whole if small, else streamed.
fn serve_file(mut file: File, meta: &Metadata, name: &str) -> Reply {
    let len = meta.len();
    let modified = last_modified(meta);
    if len <= WHOLE_FILE_MAX {
        let mut body = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        // The file may grow meanwhile: what was there at stat time is served.
        if let Err(e) = (&mut file).take(len).read_to_end(&mut body) {
            return http_error(&e);
        }
        let reply = Reply {
            content_type: content_type(name, &body),
            body,
            ..Reply::text(200, "")
        };
        return match modified {
            Some(t) => reply.with_header("Last-Modified", t),
            None => reply,
        };
    }
    let mut head = vec![0u8; 512];
    let n = read_some(&mut file, &mut head);
    head.truncate(n);
    let ctype = content_type(name, &head);
    Reply::takeover(move |mut conn| {
        let length = len.to_string();
        let mut headers = vec![
            ("Content-Type", ctype),
            ("Content-Length", length.as_str()),
            ("Connection", "close"),
        ];
        if let Some(t) = &modified {
            headers.push(("Last-Modified", t.as_str()));
        }
        if conn.write_head(200, &headers).is_err() || conn.write_all(&head).is_err() {
            return;
        }
        let mut left = len.saturating_sub(head.len() as u64);
        let mut buf = vec![0u8; PIECE];
        while left > 0 {
            if conn.stop().is_stopped() {
                return;
            }
            let want = usize::try_from(left).unwrap_or(PIECE).min(PIECE);
            match file.read(&mut buf[..want]) {
                // The file shrank: the answer ends short, and the connection closes.
                Ok(0) => return,
                Ok(n) => {
                    if conn.write_all(&buf[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    })
}

/// Reads up to `buf.len()` bytes (fewer only at the end of the file).
fn read_some(file: &mut File, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;

    fn get(root: &Path, rest: &str) -> Reply {
        handle(root, &Req::new("GET", &format!("/logs/{rest}")), rest)
    }

    #[test]
    fn paths_clean_as_go_does() {
        assert_eq!(clean("/a/../../b/./c/"), "/b/c");
        assert_eq!(clean("/../.."), "/");
        assert_eq!(base("/a/b/"), "b");
        assert_eq!(base("/"), "/");
        assert_eq!(escape_path("a b?#%:é"), "a%20b%3F%23%25:%C3%A9");
        assert_eq!(
            html_escape("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&#34;"
        );
    }

    #[test]
    fn listing_files_redirects_and_escapes() {
        let dir = TempDir::new("logfiles");
        let root = dir.0.as_path();
        std::fs::create_dir(root.join("pods")).expect("dir");
        std::fs::write(root.join("b.log"), "hello\n").expect("file");
        std::fs::write(root.join("a&<x>.log"), "").expect("file");
        std::fs::write(root.join("c:d"), "").expect("file");
        let outside = TempDir::new("logfiles-outside");
        std::fs::write(outside.0.join("secret"), "no").expect("secret");
        std::os::unix::fs::symlink(outside.0.join("secret"), root.join("leak")).expect("symlink");
        std::os::unix::fs::symlink(root.join("b.log"), root.join("inside")).expect("symlink");

        let r = get(root, "");
        assert_eq!(r.status, 200);
        assert_eq!(r.content_type, "text/html; charset=utf-8");
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n\
             <a href=\"a&%3Cx%3E.log\">a&amp;&lt;x&gt;.log</a>\n\
             <a href=\"b.log\">b.log</a>\n\
             <a href=\"./c:d\">c:d</a>\n\
             <a href=\"inside\">inside</a>\n\
             <a href=\"leak\">leak</a>\n\
             <a href=\"pods/\">pods/</a>\n</pre>\n"
        );
        assert!(r.header("Last-Modified").is_some());

        let f = get(root, "b.log");
        assert_eq!((f.status, f.body.as_slice()), (200, &b"hello\n"[..]));
        assert_eq!(f.content_type, "text/plain; charset=utf-8");
        assert_eq!(get(root, "inside").body, b"hello\n");

        // Go's canonical URLs.
        let r = get(root, "pods");
        assert_eq!((r.status, r.header("Location")), (301, Some("pods/")));
        let r = get(root, "b.log/");
        assert_eq!((r.status, r.header("Location")), (301, Some("../b.log")));
        let r = get(root, "pods/index.html");
        assert_eq!((r.status, r.header("Location")), (301, Some("./")));
        let r = handle(root, &Req::new("GET", "/logs/pods?x=1"), "pods");
        assert_eq!(r.header("Location"), Some("pods/?x=1"));

        // Nothing outside the root.
        assert_eq!(get(root, "leak").status, 404);
        assert_eq!(get(root, "missing").status, 404);
        let r = get(root, "%2e%2e/%2e%2e/etc/passwd");
        assert_eq!(r.status, 404, "cleaned to <root>/etc/passwd");
        assert_eq!(get(root, "%zz").status, 400);
    }

    #[test]
    fn sniffing_tells_text_from_binary() {
        assert_eq!(sniff(b""), "text/plain; charset=utf-8");
        assert_eq!(sniff(b"line\n\tmore\x1b[0m"), "text/plain; charset=utf-8");
        assert_eq!(sniff(b"\x00\x01"), "application/octet-stream");
        assert_eq!(sniff(b"\x1f\x8b\x08\x00"), "application/x-gzip");
        assert_eq!(content_type("x.JSON", b"\x00"), "application/json");
    }
}
