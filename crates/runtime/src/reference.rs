//! Image references (`[registry[:port]/]path[:tag][@digest]`), the one parser of them:
//! [`parse`] checks Docker's grammar (the `distribution/reference` package that
//! upstream's `applyDefaultImageTag` parses with), so that a reference the registry
//! could never serve is reported as `InvalidImageName` instead of a pull error, and the
//! registry host is known for credential lookup; [`split`] only takes a reference
//! apart, for the runtime, whose engine validates what it receives. The subtle part is
//! the colon: in `127.0.0.1:5000/x/y` it belongs to the registry's port, and only a
//! colon after the last `/` starts a tag.
//!
//! A module of its own, below both `images` (which checks references) and `runtime`
//! (which pulls them), as upstream's is a library of its own.

/// The tag Docker assumes when a reference names none.
pub const DEFAULT_TAG: &str = "latest";

/// Upstream `NameTotalLengthMax`.
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// A parsed reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The registry host (with port) as written; "" when the reference names none.
    pub domain: String,
    /// The repository path after the domain.
    pub path: String,
    /// The tag, if any.
    pub tag: Option<String>,
    /// The digest, if any.
    pub digest: Option<String>,
}

impl Reference {
    /// The registry the image is pulled from, normalised as Docker does
    /// (`splitDockerDomain`): `docker.io` when none is named.
    pub fn registry(&self) -> &str {
        match self.domain.as_str() {
            "" | "index.docker.io" => "docker.io",
            d => d,
        }
    }

    /// The name as written, registry included (`127.0.0.1:5000/x/y`, `busybox`): what
    /// Docker pulls as `fromImage`.
    pub fn name(&self) -> String {
        if self.domain.is_empty() {
            self.path.clone()
        } else {
            format!("{}/{}", self.domain, self.path)
        }
    }

    /// The fully qualified repository (`docker.io/library/busybox`), upstream's
    /// `named.Name()`, which the credential keyring is matched against.
    pub fn repository(&self) -> String {
        let registry = self.registry();
        if registry == "docker.io" && !self.path.contains('/') {
            format!("docker.io/library/{}", self.path)
        } else {
            format!("{registry}/{}", self.path)
        }
    }
}

impl std::fmt::Display for Reference {
    /// The reference with Docker's default tag: `busybox` prints as `busybox:latest`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.name();
        match (&self.tag, &self.digest) {
            (Some(tag), Some(digest)) => write!(f, "{name}:{tag}@{digest}"),
            (None, Some(digest)) => write!(f, "{name}@{digest}"),
            (Some(tag), None) => write!(f, "{name}:{tag}"),
            (None, None) => write!(f, "{name}:{DEFAULT_TAG}"),
        }
    }
}

/// Parses `s` as Docker does (`ParseNormalizedNamed`). Err is Docker's message.
pub fn parse(s: &str) -> Result<Reference, String> {
    if is_hex64(s) {
        return Err(format!(
            "invalid repository name ({s}), cannot specify 64-byte hexadecimal strings"
        ));
    }
    match parse_exact(s) {
        Some(r) => {
            let name_len = if r.domain.is_empty() {
                r.path.len()
            } else {
                r.domain.len() + 1 + r.path.len()
            };
            if name_len > NAME_TOTAL_LENGTH_MAX {
                return Err(format!(
                    "repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters"
                ));
            }
            Ok(r)
        }
        None if s.is_empty() => Err("repository name must have at least one component".into()),
        None if parse_exact(&s.to_ascii_lowercase()).is_some() => {
            Err("invalid reference format: repository name must be lowercase".into())
        }
        None => Err("invalid reference format".into()),
    }
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Takes `s` apart as Docker does, without checking the grammar: the digest after
/// `@`, the tag after a colon past the last `/`, and the registry (`splitDockerDomain`:
/// a first component with a `.` or `:`, `localhost`, or capitals names one).
pub fn split(s: &str) -> Reference {
    let (name_tag, digest) = match s.split_once('@') {
        Some((n, d)) => (n, Some(d.to_string())),
        None => (s, None),
    };
    let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_tag[last_slash..].rfind(':') {
        Some(i) => {
            let at = last_slash + i;
            (&name_tag[..at], Some(name_tag[at + 1..].to_string()))
        }
        None => (name_tag, None),
    };
    let (domain, path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_ascii_lowercase() != first =>
        {
            (first.to_string(), rest.to_string())
        }
        _ => (String::new(), name.to_string()),
    };
    Reference {
        domain,
        path,
        tag,
        digest,
    }
}

/// `name [":" tag] ["@" digest]`, None if it does not match the grammar.
fn parse_exact(s: &str) -> Option<Reference> {
    let r = split(s);
    if r.digest.as_deref().is_some_and(|d| !is_digest(d))
        || r.tag.as_deref().is_some_and(|t| !is_tag(t))
    {
        return None;
    }
    let name = r.name();
    let comps: Vec<&str> = name.split('/').collect();
    // Valid if the first component reads as a registry host followed by path
    // components, or if every component is a path component.
    let as_domain =
        comps.len() > 1 && is_domain(comps[0]) && comps[1..].iter().all(|c| is_path_component(c));
    if !as_domain && !comps.iter().all(|c| is_path_component(c)) {
        return None;
    }
    Some(r)
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*`
fn is_path_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator run: one `.`, one or two `_`, or any number of `-`.
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &s[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `host[:port]`, host a dotted domain name or an IPv4 address (or `[IPv6]`).
fn is_domain(s: &str) -> bool {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        if v6.is_empty()
            || !v6
                .bytes()
                .all(|c| c.is_ascii_hexdigit() || c == b':' || c == b'.')
        {
            return false;
        }
        match after {
            "" => return true,
            p => match p.strip_prefix(':') {
                Some(port) => ("x", Some(port)),
                None => return false,
            },
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if let Some(p) = port {
        if p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit()) {
            return false;
        }
    }
    host.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    })
}

/// `[\w][\w.-]{0,127}`
fn is_tag(s: &str) -> bool {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|c| word(*c) || *c == b'.' || *c == b'-')
}

/// `algorithm:hex` with at least 32 hex digits.
fn is_digest(s: &str) -> bool {
    let Some((alg, hex)) = s.split_once(':') else {
        return false;
    };
    let alg_ok = alg.split(['+', '.', '-', '_']).all(|part| {
        let b = part.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_references_parse() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let cases: Vec<(String, &str, &str, Option<&str>)> = vec![
            ("busybox".into(), "", "busybox", None),
            ("busybox:1.35".into(), "", "busybox", Some("1.35")),
            ("library/busybox".into(), "", "library/busybox", None),
            (
                "rkubelet/pause:3.10".into(),
                "",
                "rkubelet/pause",
                Some("3.10"),
            ),
            (
                "127.0.0.1:5000/rk/busybox:t1".into(),
                "127.0.0.1:5000",
                "rk/busybox",
                Some("t1"),
            ),
            ("localhost/foo".into(), "localhost", "foo", None),
            (
                "registry.k8s.io/pause:3.10".into(),
                "registry.k8s.io",
                "pause",
                Some("3.10"),
            ),
            ("a.b-c.io/x__y/z-z.w".into(), "a.b-c.io", "x__y/z-z.w", None),
            (format!("busybox@{digest}"), "", "busybox", None),
            ("Foo/bar".into(), "Foo", "bar", None),
        ];
        for (s, domain, path, tag) in cases {
            let r = parse(&s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(
                (r.domain.as_str(), r.path.as_str(), r.tag.as_deref()),
                (domain, path, tag),
                "{s}"
            );
        }
    }

    #[test]
    fn invalid_references_give_dockers_messages() {
        let cases = [
            ("", "repository name must have at least one component"),
            (
                "Busybox",
                "invalid reference format: repository name must be lowercase",
            ),
            ("busybox:", "invalid reference format"),
            ("busy box", "invalid reference format"),
            ("-busybox", "invalid reference format"),
            ("busybox::1", "invalid reference format"),
            ("busybox@sha256:abc", "invalid reference format"),
            ("a//b", "invalid reference format"),
            ("busybox/", "invalid reference format"),
            ("a...b", "invalid reference format"),
            ("127.0.0.1:port/x", "invalid reference format"),
        ];
        for (s, want) in cases {
            assert_eq!(parse(s), Err(want.to_string()), "{s:?}");
        }
        let hex = "a".repeat(64);
        assert!(parse(&hex)
            .expect_err("hex")
            .contains("cannot specify 64-byte hexadecimal strings"));
        let long = format!("{}/x", "a".repeat(255));
        assert_eq!(
            parse(&long),
            Err("repository name must not be more than 255 characters".into())
        );
    }

    #[test]
    fn repositories_are_fully_qualified() {
        let repo = |s: &str| parse(s).expect("valid").repository();
        assert_eq!(repo("busybox"), "docker.io/library/busybox");
        assert_eq!(repo("me/app:1"), "docker.io/me/app");
        assert_eq!(repo("index.docker.io/me/app"), "docker.io/me/app");
        assert_eq!(repo("127.0.0.1:5000/rk/bb:t"), "127.0.0.1:5000/rk/bb");
        assert_eq!(
            parse("127.0.0.1:5000/rk/bb:t").expect("valid").registry(),
            "127.0.0.1:5000"
        );
    }
}
