//! Ids as types: a session's, a run's, a message's, a prompt's and a tool call's id, each its
//! own type, parsed once where it comes in.
//!
//! An id from outside (a URL's path, a CLI argument, an MCP tool's argument, JSON) is parsed,
//! and what cannot be an id is refused with the reason:
//!
//! ```
//! use app::wire::{IdError, RunId, SessionId};
//! let id: SessionId = "s-0192b8a1".parse().unwrap();
//! assert_eq!(id.as_str(), "s-0192b8a1");
//! assert_eq!("".parse::<SessionId>(), Err(IdError::Empty));
//! assert_eq!("a/b".parse::<RunId>(), Err(IdError::BadCharacter));
//! assert_eq!("x".repeat(129).parse::<RunId>(), Err(IdError::TooLong));
//! // The JSON is a string, checked the same way.
//! assert!(serde_json::from_str::<SessionId>("\"a b\"").is_err());
//! ```
//!
//! One kind of id never stands for another: this does not compile.
//!
//! ```compile_fail
//! use app::wire::{RunId, SessionId};
//! fn cancel(_run: &RunId) {}
//! cancel(&SessionId::new("s-1"));
//! ```
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The longest id accepted from outside, in bytes. Mulligan's own are 35.
pub const MAX_ID_BYTES: usize = 128;

/// Why a string from outside is not an id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("an id must not be empty")]
    Empty,
    #[error("an id is at most {MAX_ID_BYTES} bytes")]
    TooLong,
    #[error("an id holds only ASCII letters, digits and `-`, `.`, `_`, `~`")]
    BadCharacter,
}

/// Whether `b` is one of RFC 3986's unreserved characters (letters, digits, `-._~`): what a
/// URL carries unescaped, and all an id is made of.
pub fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Checks a string from outside: ids are opaque, but never empty, never long, and made of the
/// characters a URL path carries unescaped.
fn check(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    if id.len() > MAX_ID_BYTES {
        return Err(IdError::TooLong);
    }
    if !id.bytes().all(is_unreserved) {
        return Err(IdError::BadCharacter);
    }
    Ok(())
}

/// What every id type can do: read back an id Mulligan stored, and be read as a string.
pub trait Id: Sized {
    /// An id Mulligan made or read back from its own store (`new`).
    fn stored(id: String) -> Self;
    fn as_str(&self) -> &str;
}

/// Writes a string newtype: the same JSON as a `String`, checked when read from outside
/// (`FromStr`, `TryFrom<String>`, serde), and never the id of another kind. It does not
/// dereference to `str` and no `&str` turns into one by itself: `as_str` reads it, `parse`
/// makes it from outside, and `new` from a string Mulligan made or stored. (The OpenAPI
/// document describes it as a string: each field of such a type says
/// `schema(value_type = String)`.)
macro_rules! ids {
    ($( $(#[$meta:meta])* $name:ident; )*) => {$(
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// An id Mulligan made or read back from its own store; ids from outside are
            /// parsed instead.
            pub fn new(id: impl Into<String>) -> Self {
                $name(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Id for $name {
            fn stored(id: String) -> Self {
                $name(id)
            }
            fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(id: &str) -> Result<Self, IdError> {
                check(id)?;
                Ok($name(id.to_string()))
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(id: String) -> Result<Self, IdError> {
                check(&id)?;
                Ok($name(id))
            }
        }

        /// Compares with a string as it reads (an id from outside, a test's literal).
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        /// A string as `check` takes it.
        #[cfg(feature = "openapi")]
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_ID_BYTES,
                    "pattern": "^[A-Za-z0-9._~-]+$"
                })
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }
    )*};
}

ids! {
    /// A session's id.
    SessionId;
    /// A run's id.
    RunId;
    /// A message's id: an operator's prompt or an agent's reply.
    MessageId;
    /// A prompt's id: the operator message a chain of attempts answers.
    PromptId;
    /// A tool call's id (Mulligan's own, not the provider's).
    ToolCallId;
}

impl PromptId {
    /// The prompt an operator message starts: the same id.
    pub fn of_message(id: &MessageId) -> PromptId {
        PromptId(id.0.clone())
    }

    /// Attempt `n` of this prompt's resumes: `<prompt id>~resume-<n>`.
    pub fn resume(&self, n: u32) -> PromptId {
        PromptId(format!("{}~resume-{n}", self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_its_string_on_the_wire() {
        let id: SessionId = "s1".parse().unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"s1\"");
        assert_eq!(serde_json::from_str::<SessionId>("\"s1\"").unwrap(), id);
        assert!(serde_json::from_str::<SessionId>("1").is_err());
        assert_eq!(id.to_string(), "s1");
        assert_eq!(id.as_str(), "s1");
    }

    #[test]
    fn an_id_from_outside_is_checked() {
        assert_eq!("".parse::<RunId>(), Err(IdError::Empty));
        assert_eq!("r 1".parse::<RunId>(), Err(IdError::BadCharacter));
        assert_eq!("r/../1".parse::<RunId>(), Err(IdError::BadCharacter));
        assert_eq!(
            "r".repeat(MAX_ID_BYTES + 1).parse::<RunId>(),
            Err(IdError::TooLong)
        );
        assert!("r".repeat(MAX_ID_BYTES).parse::<RunId>().is_ok());
        assert!("r_0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4"
            .parse::<RunId>()
            .is_ok());
        assert!("m_0190a1b2~resume-2".parse::<PromptId>().is_ok());
        let err = serde_json::from_str::<MessageId>("\"\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("must not be empty"), "{err}");
    }
}
