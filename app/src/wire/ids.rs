//! Ids as types: a session's, a run's, a message's and a tool call's id, each its own string.
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

/// Writes a transparent string newtype: the same JSON as a `String`, a `&str` wherever one is
/// read, and never the id of another kind. (The OpenAPI document describes it as a string:
/// each field of such a type says `schema(value_type = String)`.)
macro_rules! ids {
    ($( $(#[$meta:meta])* $name:ident; )*) => {$(
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
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

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                $name(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                $name(id.to_string())
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> Self {
                $name(id.clone())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

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

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
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
    /// A tool call's id (Mulligan's own, not the provider's).
    ToolCallId;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_its_string_on_the_wire() {
        let id = SessionId::from("s1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"s1\"");
        assert_eq!(serde_json::from_str::<SessionId>("\"s1\"").unwrap(), id);
        assert!(serde_json::from_str::<SessionId>("1").is_err());
        assert_eq!(id.to_string(), "s1");
        assert_eq!(id, "s1");
    }
}
