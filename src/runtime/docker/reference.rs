//! Image references split the way Docker splits them: `[registry[:port]/]path[:tag][@digest]`.
//!
//! A pull needs the repository and the tag (or digest) as separate query parameters,
//! and an untagged reference means `:latest` (Docker's CLI does the same before it
//! calls `POST /images/create`; the engine itself would pull every tag). The only
//! subtle part is the colon: in `127.0.0.1:5000/x/y` it belongs to the registry's
//! port, and only a colon after the last `/` starts a tag.

/// The tag Docker assumes when a reference names none.
pub(crate) const DEFAULT_TAG: &str = "latest";

/// An image reference, split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ImageRef {
    /// Repository including any registry host, e.g. `127.0.0.1:5000/x/y` or `busybox`.
    pub repo: String,
    /// Tag, if the reference has one.
    pub tag: Option<String>,
    /// Digest (`sha256:…`), if the reference has one.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Splits a reference. Never fails: the engine validates what it receives.
    pub(crate) fn parse(reference: &str) -> ImageRef {
        let reference = reference.trim();
        let (name, digest) = match reference.split_once('@') {
            Some((name, digest)) => (name, Some(digest.to_string())),
            None => (reference, None),
        };
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (repo, tag) = match name[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                (&name[..at], Some(name[at + 1..].to_string()))
            }
            None => (name, None),
        };
        ImageRef {
            repo: repo.to_string(),
            tag,
            digest,
        }
    }

    /// The `fromImage` and `tag` query parameters of a pull: a digest wins over a tag
    /// (the engine accepts a digest in `tag`), and no tag means `latest`.
    pub(crate) fn pull_params(&self) -> (&str, &str) {
        let tag = self
            .digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or(DEFAULT_TAG);
        (&self.repo, tag)
    }
}

impl std::fmt::Display for ImageRef {
    /// The normalised reference: `busybox` prints as `busybox:latest`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.tag, &self.digest) {
            (Some(tag), Some(digest)) => write!(f, "{}:{tag}@{digest}", self.repo),
            (None, Some(digest)) => write!(f, "{}@{digest}", self.repo),
            (Some(tag), None) => write!(f, "{}:{tag}", self.repo),
            (None, None) => write!(f, "{}:{DEFAULT_TAG}", self.repo),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> (String, Option<String>, Option<String>) {
        let r = ImageRef::parse(s);
        (r.repo, r.tag, r.digest)
    }

    fn own(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn bare_names_get_latest() {
        let r = ImageRef::parse("busybox");
        assert_eq!(r.pull_params(), ("busybox", "latest"));
        assert_eq!(r.to_string(), "busybox:latest");
    }

    #[test]
    fn tags_split_after_the_last_slash_only() {
        assert_eq!(
            split("rkubelet/busybox:1.35"),
            ("rkubelet/busybox".into(), own("1.35"), None)
        );
        assert_eq!(
            split("127.0.0.1:5000/x/y:tag"),
            ("127.0.0.1:5000/x/y".into(), own("tag"), None)
        );
        assert_eq!(
            split("127.0.0.1:5000/x/y"),
            ("127.0.0.1:5000/x/y".into(), None, None)
        );
        assert_eq!(
            ImageRef::parse("127.0.0.1:5000/x/y").pull_params(),
            ("127.0.0.1:5000/x/y", "latest")
        );
    }

    #[test]
    fn digests_win_over_tags_in_pulls() {
        let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let r = ImageRef::parse(&format!("localhost:5000/app@{d}"));
        assert_eq!(
            (r.repo.as_str(), r.tag.as_deref()),
            ("localhost:5000/app", None)
        );
        assert_eq!(r.pull_params(), ("localhost:5000/app", d));
        assert_eq!(r.to_string(), format!("localhost:5000/app@{d}"));

        let r = ImageRef::parse(&format!("app:1.0@{d}"));
        assert_eq!(r.tag.as_deref(), Some("1.0"));
        assert_eq!(r.pull_params(), ("app", d));
        assert_eq!(r.to_string(), format!("app:1.0@{d}"));
    }
}
