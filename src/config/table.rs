//! The machinery behind the settings table in [`super::settings`]: the
//! `settings_table!` macro and the plain types and functions its expansion uses.
//!
//! Why a `macro_rules!` and not a static table of entries with parse/apply functions: a
//! setting needs a typed field in two structs ([`super::Layer`], what one source says,
//! and [`super::KubeletConfig`]). A static table can describe a flag but cannot declare
//! a struct field, so a new setting would still be written in three places. The macro
//! writes the fields, the flag dispatch, the file decoding, the layering and `--help`'s
//! list from one entry, and stays declarative: one rule, no recursion. It generates
//! `Layer` (with `over`, `set`, `from_file`), `KubeletConfig` (every setting, plus the
//! `node_name`, `config_file` and `unsupported_fields` that `load` derives) with
//! `resolve`, the `defaults` consts, `SPECS` (every flag) and `ENTRIES` (the table as
//! data, for `--help`'s defaults, README and the table's tests).

use super::ConfigError;

/// One command-line flag, as the parser reads it and `--help` lists it.
#[derive(Debug)]
pub struct Spec {
    /// The long name, without `--`.
    pub name: &'static str,
    /// The one-letter shorthand (`-v`), if any.
    pub short: Option<char>,
    /// The value's placeholder in `--help`; `None` for a boolean flag.
    pub value: Option<&'static str>,
    /// The description.
    pub help: &'static str,
}

/// What the table says about one entry, as data.
#[derive(Debug)]
pub struct Entry {
    /// The field's name in `Layer` (and, for a setting, in `KubeletConfig`).
    pub name: &'static str,
    /// The flag, without `--`.
    pub flag: Option<&'static str>,
    /// The `KubeletConfiguration` field (`logging.verbosity` for a nested one).
    pub file: Option<&'static str>,
    /// The default, as the flag would spell it; `""` is an empty list or string.
    pub default: Option<&'static str>,
    /// Two different values of the file field, in YAML, for the table's tests.
    pub examples: Option<[&'static str; 2]>,
    /// The help text.
    pub help: &'static str,
    /// An input `load` reads itself (`--config`), not a `KubeletConfig` field.
    pub input: bool,
}

/// The values an optional setting (one without a default) can hold. An empty one
/// means "none", as the upstream flags treat `--pod-manifest-path=` or `--kubeconfig=`.
pub(crate) trait Unset {
    /// Whether this value means "not set".
    fn is_unset(&self) -> bool;
}

impl Unset for std::path::PathBuf {
    fn is_unset(&self) -> bool {
        self.as_os_str().is_empty()
    }
}

impl Unset for String {
    fn is_unset(&self) -> bool {
        self.is_empty()
    }
}

/// A verbosity is never "none": `-v 0` is a level.
impl Unset for u8 {
    fn is_unset(&self) -> bool {
        false
    }
}

/// A count is never "empty"; one that must be positive is checked by its reader.
impl Unset for u32 {
    fn is_unset(&self) -> bool {
        false
    }
}

/// A default, read by the setting's own flag parser so that it means what the same
/// text on the command line would. `<node name>` in it stands for the node's name
/// (upstream's etcd prefix). A default that does not parse is a bug in the table, which
/// its tests catch; it is still an error here, not a panic.
pub(crate) fn parse_default<V>(
    name: &str,
    text: &str,
    node_name: &str,
    parse: impl Fn(&str) -> Result<V, String>,
) -> Result<V, ConfigError> {
    let text = text.replace("<node name>", node_name);
    parse(&text).map_err(|reason| ConfigError::InvalidFlag {
        flag: format!("(default of {name})"),
        value: text,
        reason,
    })
}

/// `Some` of the argument, or `None` without one: an optional part of an entry.
macro_rules! opt {
    () => {
        None
    };
    ($e:expr) => {
        Some($e)
    };
}

/// A setting's type in `KubeletConfig`: its value with a default, else an `Option`.
macro_rules! config_type {
    ($ty:ty, $default:literal) => { $ty };
    ($ty:ty) => { Option<$ty> };
}

/// Stores a flag's value: `parse` replaces (the last occurrence wins), `append` adds to
/// the list (a repeatable flag, as pflag's slices).
macro_rules! store {
    (parse, $slot:expr, $value:expr) => {{
        $slot = Some($value);
        Ok(())
    }};
    (append, $slot:expr, $value:expr) => {{
        $slot.get_or_insert_with(Vec::new).extend($value);
        Ok(())
    }};
}

/// A setting's effective value from the merged layer: the value given, else its default
/// (read by `$parse`); without a default, `None` for an empty value.
macro_rules! resolve {
    ($given:expr, $parse:expr, $node:expr, $name:expr, $default:literal) => {
        match $given {
            Some(v) => v,
            None => $crate::config::table::parse_default($name, $default, $node, $parse)?,
        }
    };
    ($given:expr, $parse:expr, $node:expr, $name:expr) => {
        $given.filter(|v| !$crate::config::table::Unset::is_unset(v))
    };
}

/// Generates the configuration's types and code from the table; see the module docs.
/// The parts of an entry, in this order (`flag`, `file` and `default` are optional):
///
/// ```text
/// name: Type {
///     help: "…",                         --help, README, rustdoc
///     parse: text::fn,  (or append:)     the flag's (and the default's) parser
///     flag: "spelling" <"placeholder"> short 'c',   (no <…> for a boolean flag)
///     file: "jsonName", decode: yaml::fn, examples: ["yaml", "yaml"],
///     default: CONST = "text",           (CONST = is optional)
/// }
/// ```
macro_rules! settings_table {
    (
        builtin_flags { $($builtin:expr,)* }
        inputs { $(
            $i_name:ident: $i_ty:ty {
                help: $i_help:literal,
                $i_how:ident: $i_parse:expr,
                $(flag: $i_flag:literal $(<$i_ph:literal>)? $(short $i_short:literal)?,)?
                $(file: $i_field:literal, decode: $i_decode:expr,
                    examples: [$i_ex1:literal, $i_ex2:literal],)?
            }
        )* }
        settings { $(
            $s_name:ident: $s_ty:ty {
                help: $s_help:literal,
                $s_how:ident: $s_parse:expr,
                $(flag: $s_flag:literal $(<$s_ph:literal>)? $(short $s_short:literal)?,)?
                $(file: $s_field:literal, decode: $s_decode:expr,
                    examples: [$s_ex1:literal, $s_ex2:literal],)?
                $(default: $($s_const:ident =)? $s_default:literal,)?
            }
        )* }
        more_defaults { $($more:item)* }
    ) => {
        /// Defaults that other code names; every default is in the settings table,
        /// with its reason.
        pub mod defaults {
            $($($(
                #[doc = concat!("The default of `", stringify!($s_name), "`: see the settings table.")]
                pub const $s_const: &str = $s_default;
            )?)?)*
            $($more)*
        }

        /// What one source (the command line or the config file) sets; `None`: not
        /// given there. Layered by [`Layer::over`].
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct Layer {
            $(#[doc = $i_help] pub $i_name: Option<$i_ty>,)*
            $(#[doc = $s_help] pub $s_name: Option<$s_ty>,)*
            /// Upstream fields present in a config file that rkubelet ignores.
            pub unsupported: Vec<String>,
        }

        impl Layer {
            /// This layer over `lower`: each value given here wins.
            pub fn over(self, lower: Layer) -> Layer {
                Layer {
                    $($i_name: self.$i_name.or(lower.$i_name),)*
                    $($s_name: self.$s_name.or(lower.$s_name),)*
                    unsupported: [self.unsupported, lower.unsupported].concat(),
                }
            }

            /// Reads flag `name` (without `--`) with value `text`. The error is the
            /// reason only; the caller names the flag and the value.
            pub fn set(&mut self, name: &str, text: &str) -> Result<(), String> {
                match name {
                    $($($i_flag => store!($i_how, self.$i_name, ($i_parse)(text)?),)?)*
                    $($($s_flag => store!($s_how, self.$s_name, ($s_parse)(text)?),)?)*
                    other => Err(format!("flag {other} is not handled")),
                }
            }

            /// Reads the implemented fields of a config file; `base` is the file's
            /// directory, which relative paths are resolved against. The error names
            /// the field.
            pub fn from_file(
                map: &serde_norway::Mapping,
                base: &std::path::Path,
            ) -> Result<Layer, (&'static str, String)> {
                let mut layer = Layer::default();
                $($(if let Some(v) = $crate::config::values::yaml::lookup(map, $i_field) {
                    layer.$i_name = ($i_decode)(v, base).map_err(|r| ($i_field, r))?;
                })?)*
                $($(if let Some(v) = $crate::config::values::yaml::lookup(map, $s_field) {
                    layer.$s_name = ($s_decode)(v, base).map_err(|r| ($s_field, r))?;
                })?)*
                Ok(layer)
            }
        }

        /// The validated, effective configuration of one kubelet process: one field per
        /// setting of the table, and what `load` derives.
        #[derive(Clone, Debug, PartialEq)]
        pub struct KubeletConfig {
            /// The node's name: `--hostname-override`, else the host name, lowercased.
            pub node_name: String,
            /// `--config`: the file that was read, if any.
            pub config_file: Option<std::path::PathBuf>,
            /// Fields of the config file that upstream knows and rkubelet ignores, e.g.
            /// `tlsCertFile`, `logging.format`. See [`KubeletConfig::log_unsupported_fields`].
            pub unsupported_fields: Vec<String>,
            $(#[doc = $s_help] pub $s_name: config_type!($s_ty $(, $s_default)?),)*
        }

        /// The effective configuration: what `layer` (the flags over the file) gives,
        /// else each setting's default.
        pub fn resolve(
            layer: Layer,
            node_name: String,
        ) -> Result<KubeletConfig, $crate::config::ConfigError> {
            Ok(KubeletConfig {
                $($s_name: resolve!(
                    layer.$s_name, $s_parse, &node_name, stringify!($s_name) $(, $s_default)?
                ),)*
                config_file: layer.config,
                unsupported_fields: layer.unsupported,
                node_name,
            })
        }

        /// Every flag, in the order `--help` lists them.
        pub const SPECS: &[$crate::config::table::Spec] = &[
            $($($crate::config::table::Spec {
                name: $i_flag,
                short: opt!($($i_short)?),
                value: opt!($($i_ph)?),
                help: $i_help,
            },)?)*
            $($($crate::config::table::Spec {
                name: $s_flag,
                short: opt!($($s_short)?),
                value: opt!($($s_ph)?),
                help: $s_help,
            },)?)*
            $($builtin,)*
        ];

        /// Every entry of the table, as data.
        pub const ENTRIES: &[$crate::config::table::Entry] = &[
            $($crate::config::table::Entry {
                name: stringify!($i_name),
                flag: opt!($($i_flag)?),
                file: opt!($($i_field)?),
                default: None,
                examples: opt!($([$i_ex1, $i_ex2])?),
                help: $i_help,
                input: true,
            },)*
            $($crate::config::table::Entry {
                name: stringify!($s_name),
                flag: opt!($($s_flag)?),
                file: opt!($($s_field)?),
                default: opt!($($s_default)?),
                examples: opt!($([$s_ex1, $s_ex2])?),
                help: $s_help,
                input: false,
            },)*
        ];
    };
}
