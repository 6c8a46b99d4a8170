//! Field errors, as upstream's `k8s.io/apimachinery/pkg/util/validation/field`: a
//! path into the object (`spec.volumes[0].name`), an error type, the bad value and a
//! detail, printed exactly as upstream prints them so that a message found in a
//! Kubernetes issue or document matches rkubelet's log line word for word.

use std::fmt;

use base::goquote::go_quote;

/// A path to a field (`field.Path`): built with [`Path::child`], [`Path::index`] and
/// [`Path::key`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Path(String);

impl Path {
    /// The root of a path (`metadata`, `spec`).
    pub(crate) fn new(root: &str) -> Path {
        Path(root.to_string())
    }

    /// `path.name`.
    pub(crate) fn child(&self, name: &str) -> Path {
        Path(format!("{}.{name}", self.0))
    }

    /// `path[i]`.
    pub(crate) fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    /// `path[key]` (a map key, unquoted as upstream).
    pub(crate) fn key(&self, key: &str) -> Path {
        Path(format!("{}[{key}]", self.0))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Upstream's `field.ErrorType`, printed as upstream prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorType {
    /// `Not found`.
    NotFound,
    /// `Required value`.
    Required,
    /// `Duplicate value`.
    Duplicate,
    /// `Invalid value`.
    Invalid,
    /// `Unsupported value`.
    NotSupported,
    /// `Forbidden`.
    Forbidden,
    /// `Too long`.
    TooLong,
}

impl ErrorType {
    fn as_str(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
        }
    }
}

/// The value a field error quotes: upstream prints strings with Go's `%q` and numbers
/// plainly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BadValue {
    /// No value is printed (Required, Forbidden, TooLong).
    None,
    /// A string, printed quoted.
    Str(String),
    /// A number.
    Int(i64),
    /// A list of strings, printed as Go's `%#v` prints a `[]string`.
    StrList(Vec<String>),
}

impl From<&str> for BadValue {
    fn from(s: &str) -> Self {
        BadValue::Str(s.to_string())
    }
}

impl From<&String> for BadValue {
    fn from(s: &String) -> Self {
        BadValue::Str(s.clone())
    }
}

impl From<&[String]> for BadValue {
    fn from(list: &[String]) -> Self {
        BadValue::StrList(list.to_vec())
    }
}

impl From<i64> for BadValue {
    fn from(n: i64) -> Self {
        BadValue::Int(n)
    }
}

impl From<i32> for BadValue {
    fn from(n: i32) -> Self {
        BadValue::Int(i64::from(n))
    }
}

/// One invalid field (`field.Error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// What kind of problem.
    pub ty: ErrorType,
    /// The field's path, e.g. `spec.volumes[0].name`.
    pub field: String,
    /// The offending value.
    pub value: BadValue,
    /// Why (may be empty).
    pub detail: String,
}

impl FieldError {
    fn new(ty: ErrorType, field: &Path, value: BadValue, detail: &str) -> Self {
        FieldError {
            ty,
            field: field.to_string(),
            value,
            detail: detail.to_string(),
        }
    }

    /// `field.Required`.
    pub(crate) fn required(field: &Path, detail: &str) -> Self {
        Self::new(ErrorType::Required, field, BadValue::None, detail)
    }

    /// `field.Invalid`.
    pub(crate) fn invalid(field: &Path, value: impl Into<BadValue>, detail: &str) -> Self {
        Self::new(ErrorType::Invalid, field, value.into(), detail)
    }

    /// `field.Duplicate`.
    pub(crate) fn duplicate(field: &Path, value: impl Into<BadValue>) -> Self {
        Self::new(ErrorType::Duplicate, field, value.into(), "")
    }

    /// `field.NotFound`.
    pub(crate) fn not_found(field: &Path, value: impl Into<BadValue>) -> Self {
        Self::new(ErrorType::NotFound, field, value.into(), "")
    }

    /// `field.Forbidden`.
    pub(crate) fn forbidden(field: &Path, detail: &str) -> Self {
        Self::new(ErrorType::Forbidden, field, BadValue::None, detail)
    }

    /// `field.TooLong`, in bytes.
    pub(crate) fn too_long(field: &Path, max_bytes: usize) -> Self {
        let detail = format!("must have at most {max_bytes} bytes");
        Self::new(ErrorType::TooLong, field, BadValue::None, &detail)
    }

    /// `field.NotSupported`: the supported values are listed quoted, in the given order.
    pub(crate) fn not_supported(
        field: &Path,
        value: impl Into<BadValue>,
        supported: &[&str],
    ) -> Self {
        let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let detail = if quoted.is_empty() {
            String::new()
        } else {
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, value.into(), &detail)
    }
}

impl fmt::Display for FieldError {
    /// Upstream's `Error()`: `<field>: <type>[: <value>][: <detail>]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.ty.as_str())?;
        let shows_value = !matches!(
            self.ty,
            ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong
        );
        if shows_value {
            match &self.value {
                BadValue::None => {}
                BadValue::Str(s) => write!(f, ": {}", go_quote(s))?,
                BadValue::Int(n) => write!(f, ": {n}")?,
                BadValue::StrList(list) => {
                    let quoted: Vec<String> = list.iter().map(|s| go_quote(s)).collect();
                    write!(f, ": []string{{{}}}", quoted.join(", "))?;
                }
            }
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Every problem of one object (`field.ErrorList`). Printed as upstream's
/// `ToAggregate().Error()`: one error alone, several as `[a, b]` (repeats once).
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.aggregate())]
pub(crate) struct ErrorList(pub Vec<FieldError>);

impl ErrorList {
    /// True when nothing is wrong.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds one error.
    pub(crate) fn push(&mut self, e: FieldError) {
        self.0.push(e);
    }

    /// Adds every error of another list.
    pub(crate) fn extend(&mut self, other: ErrorList) {
        self.0.extend(other.0);
    }

    /// The message: one error alone, several as `[a, b]`, each repeated message once.
    fn aggregate(&self) -> String {
        let mut seen = std::collections::BTreeSet::new();
        let messages: Vec<String> = self
            .0
            .iter()
            .map(ToString::to_string)
            .filter(|m| seen.insert(m.clone()))
            .collect();
        if messages.len() == 1 {
            messages[0].clone()
        } else {
            format!("[{}]", messages.join(", "))
        }
    }

    #[cfg(test)]
    /// The fields in error, in order (for tests and short log lines).
    pub(crate) fn fields(&self) -> Vec<&str> {
        self.0.iter().map(|e| e.field.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_as_upstream() {
        let p = Path::new("spec").child("volumes").index(0).child("name");
        assert_eq!(
            FieldError::required(&p, "").to_string(),
            "spec.volumes[0].name: Required value"
        );
        assert_eq!(
            FieldError::duplicate(&p, "a").to_string(),
            "spec.volumes[0].name: Duplicate value: \"a\""
        );
        assert_eq!(
            FieldError::invalid(&Path::new("spec").child("x"), -1i64, "must be positive")
                .to_string(),
            "spec.x: Invalid value: -1: must be positive"
        );
        assert_eq!(
            FieldError::not_supported(&Path::new("p"), "X", &["A", "B"]).to_string(),
            "p: Unsupported value: \"X\": supported values: \"A\", \"B\""
        );
        assert_eq!(
            FieldError::too_long(&Path::new("metadata").child("annotations"), 262144).to_string(),
            "metadata.annotations: Too long: must have at most 262144 bytes"
        );
        let list = ["a".to_string(), "b\n".to_string()];
        assert_eq!(
            FieldError::invalid(&Path::new("s"), &list[..], "too many").to_string(),
            "s: Invalid value: []string{\"a\", \"b\\n\"}: too many"
        );
        assert_eq!(
            Path::new("r").child("limits").key("cpu").to_string(),
            "r.limits[cpu]"
        );
    }

    #[test]
    fn a_list_prints_one_error_alone_and_several_in_brackets_once_each() {
        let a = FieldError::required(&Path::new("a"), "");
        let b = FieldError::forbidden(&Path::new("b"), "no");
        assert_eq!(ErrorList(vec![a.clone()]).to_string(), "a: Required value");
        assert_eq!(
            ErrorList(vec![a.clone(), b, a]).to_string(),
            "[a: Required value, b: Forbidden: no]"
        );
    }
}
