//! Enums that travel and are stored as one word: the [`Word`] trait and the macro that
//! writes each enum's word table once (`as_str`, `parse`, `ALL`).
use serde::de::{self, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// An enum whose values are words on the wire and in the database.
pub trait Word: Sized {
    /// The word, as the JSON and the database hold it.
    fn as_str(&self) -> &str;
    /// The value a word names; `None` for a word this build does not know (an open enum
    /// never answers `None`: it keeps the word in its `Other` variant).
    fn parse(word: &str) -> Option<Self>;
}

/// Deserializes any [`Word`] from a JSON string.
pub(crate) struct WordVisitor<T>(pub PhantomData<T>, pub &'static [&'static str]);

impl<T: Word> Visitor<'_> for WordVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, word: &str) -> Result<T, E> {
        T::parse(word).ok_or_else(|| E::unknown_variant(word, self.1))
    }
}

/// Writes an enum of words: the enum, `as_str`, `parse`, `ALL` (every known value, in order),
/// `Display` and [`Word`].
///
/// `open` enums get an `Other(String)` variant and their own serde: a word this build does
/// not know (an old database row, a newer server) decodes to `Other(word)` and encodes back
/// to the same word, so it never fails a page or a list and its JSON stays as it came.
/// `closed` enums derive serde themselves (an unknown word is an error, as serde makes it);
/// the wire test pins that the derived words are these.
macro_rules! words {
    (
        $(#[$meta:meta])*
        open enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $word:literal, )* }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// A word this build does not know, kept as it came.
            Other(String),
        }

        impl $name {
            /// Every known value (not `Other`), in the order of the contract.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            const WORDS: &'static [&'static str] = &[$($word),*];

            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $word, )*
                    $name::Other(word) => word,
                }
            }

            /// The value `word` names; an unknown word is kept in `Other`.
            pub fn parse(word: &str) -> $name {
                match word {
                    $( $word => $name::$variant, )*
                    _ => $name::Other(word.to_string()),
                }
            }
        }

        impl $crate::wire::Word for $name {
            fn as_str(&self) -> &str {
                $name::as_str(self)
            }
            fn parse(word: &str) -> Option<$name> {
                Some($name::parse(word))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                d.deserialize_str($crate::wire::text::WordVisitor(
                    std::marker::PhantomData,
                    $name::WORDS,
                ))
            }
        }

        /// A string: one of the known words, though a newer server may send another.
        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                use utoipa::openapi::schema::{ObjectBuilder, Type};
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some($name::WORDS.iter().copied()))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}

        /// The same for JSON Schema (the built-in tools' answers).
        #[cfg(feature = "openapi")]
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"type": "string", "enum": $name::WORDS})
            }
        }
    };
    (
        $(#[$meta:meta])*
        closed enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $word:literal, )* }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every value, in the order of the contract.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $word, )*
                }
            }

            /// The value `word` names, or `None` for a word this build does not know.
            pub fn parse(word: &str) -> Option<$name> {
                match word {
                    $( $word => Some($name::$variant), )*
                    _ => None,
                }
            }
        }

        impl $crate::wire::Word for $name {
            fn as_str(&self) -> &str {
                $name::as_str(*self)
            }
            fn parse(word: &str) -> Option<$name> {
                $name::parse(word)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use words;
