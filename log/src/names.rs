//! Topic and consumer-group names: checked once at construction against the rules Kafka applies
//! to topic names (1 to 249 of `[A-Za-z0-9._-]`, not `.` or `..`), so a name that works on one
//! backend works on the other, and the embedded log can length-prefix them in a single byte.

use std::fmt;
use std::sync::Arc;

use crate::{LogError, Result};

/// Kafka's limit on a topic name's length.
const MAX_NAME_LEN: usize = 249;

fn check(kind: &str, name: &str) -> Result<()> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || name == "."
        || name == ".."
        || !name.chars().all(legal)
    {
        return Err(LogError::Invalid(format!(
            "{kind} name `{name}` must be 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 . _ - (and not `.` or `..`)"
        )));
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn new(name: &str) -> Result<Self> {
                check($kind, name)?;
                Ok(Self(Arc::from(name)))
            }

            /// For names fixed in the source (`schemas/`): panics on an illegal one, which a
            /// test of that constant catches.
            pub fn from_static(name: &'static str) -> Self {
                match Self::new(name) {
                    Ok(named) => named,
                    Err(e) => panic!("{e}"),
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

name_type!(
    /// The name of a topic (`collect.batches`, `events`, ...).
    Topic,
    "topic"
);

name_type!(
    /// The name of a consumer group: the unit whose committed positions a consumer resumes from
    /// (`processor`, `dispatcher`, ...).
    Group,
    "group"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legal_names() {
        for name in [
            "collect.batches",
            "events",
            "a",
            "A-b_c.9",
            &"x".repeat(249),
        ] {
            assert_eq!(Topic::new(name).unwrap().as_str(), name);
            assert_eq!(Group::new(name).unwrap().to_string(), name);
        }
    }

    #[test]
    fn illegal_names() {
        for name in ["", ".", "..", "a b", "a/b", "é", "a:b", &"x".repeat(250)] {
            assert!(
                matches!(Topic::new(name), Err(LogError::Invalid(_))),
                "{name}"
            );
            assert!(
                matches!(Group::new(name), Err(LogError::Invalid(_))),
                "{name}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "topic name")]
    fn from_static_panics_on_an_illegal_name() {
        Topic::from_static("no spaces");
    }
}
