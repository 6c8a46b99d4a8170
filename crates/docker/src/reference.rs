//! An image reference as Docker's pull wants it: the repository and the tag (or digest)
//! as separate query parameters of `POST /images/create`, an untagged reference meaning
//! `:latest` (Docker's CLI does the same before it calls the engine, which would
//! otherwise pull every tag). The reference itself is taken apart by
//! [`runtime::reference::split`], the crate's one parser.

use runtime::reference::{Reference, DEFAULT_TAG};

/// The `fromImage` and `tag` query parameters of a pull: a digest wins over a tag
/// (the engine accepts a digest in `tag`), and no tag means `latest`.
pub(crate) fn pull_params(r: &Reference) -> (String, &str) {
    let tag = r
        .digest
        .as_deref()
        .or(r.tag.as_deref())
        .unwrap_or(DEFAULT_TAG);
    (r.name(), tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::reference::split;

    /// The pull parameters of a reference, owned, for comparisons.
    fn params(r: &Reference) -> (String, String) {
        let (repo, tag) = pull_params(r);
        (repo, tag.to_string())
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    fn parts(s: &str) -> (String, Option<String>, Option<String>) {
        let r = split(s);
        (r.name(), r.tag, r.digest)
    }

    fn own(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn bare_names_get_latest() {
        let r = split("busybox");
        assert_eq!(params(&r), pair("busybox", "latest"));
        assert_eq!(r.to_string(), "busybox:latest");
    }

    #[test]
    fn tags_split_after_the_last_slash_only() {
        assert_eq!(
            parts("rkubelet/busybox:1.35"),
            ("rkubelet/busybox".into(), own("1.35"), None)
        );
        assert_eq!(
            parts("127.0.0.1:5000/x/y:tag"),
            ("127.0.0.1:5000/x/y".into(), own("tag"), None)
        );
        assert_eq!(
            parts("127.0.0.1:5000/x/y"),
            ("127.0.0.1:5000/x/y".into(), None, None)
        );
        assert_eq!(
            params(&split("127.0.0.1:5000/x/y")),
            pair("127.0.0.1:5000/x/y", "latest")
        );
    }

    #[test]
    fn digests_win_over_tags_in_pulls() {
        let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let r = split(&format!("localhost:5000/app@{d}"));
        assert_eq!(
            (r.name().as_str(), r.tag.as_deref()),
            ("localhost:5000/app", None)
        );
        assert_eq!(params(&r), pair("localhost:5000/app", d));
        assert_eq!(r.to_string(), format!("localhost:5000/app@{d}"));

        let r = split(&format!("app:1.0@{d}"));
        assert_eq!(r.tag.as_deref(), Some("1.0"));
        assert_eq!(params(&r), pair("app", d));
        assert_eq!(r.to_string(), format!("app:1.0@{d}"));
    }
}
