//! The lenient reading of input events without intermediate trees: a member of the wrong type
//! reads as absent, an item that is not an object is dropped, a list that is not a list reads
//! as empty, and nothing but malformed JSON fails.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, de};

use super::{EventKind, InputEvent};

/// A member's value as far as an input event cares.
enum Seen {
    Number(f64),
    Bool(bool),
    Kind(EventKind),
    Other,
}

impl<'de> Deserialize<'de> for Seen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Seen;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Seen, E> {
                Ok(Seen::Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seen, E> {
                Ok(Seen::Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seen, E> {
                Ok(Seen::Number(v as f64))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Seen, E> {
                Ok(Seen::Bool(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Seen, E> {
                let kind = EventKind::deserialize(de::value::StrDeserializer::<E>::new(v))
                    .unwrap_or(EventKind::Other);
                Ok(Seen::Kind(kind))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Seen, E> {
                Ok(Seen::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Seen, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Seen::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Seen, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Seen::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl Seen {
    fn number(self) -> Option<f64> {
        match self {
            Seen::Number(n) => Some(n),
            _ => None,
        }
    }
}

/// One item of `events`: an event if it is an object, else nothing.
struct Item(Option<InputEvent>);

/// A member's name in an event, told apart without copying it: a key read as a `String`
/// (or a `Cow`, which serde always makes owned) was an allocation per member, five per
/// event, about 4% of a saturated ingest benchmark's samples.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Member {
    T,
    X,
    Y,
    Type,
    Trusted,
    Field,
    #[serde(other)]
    Other,
}

/// A `field` member: the mark of the element the event reached, when it is one a page may
/// give (`[a-z0-9_-]`, 1 to 32 characters); anything else reads as no mark.
struct Mark(Option<Box<str>>);

impl<'de> Deserialize<'de> for Mark {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Mark;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field mark")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Mark, E> {
                Ok(Mark(super::field_mark(v).then(|| v.into())))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Mark, E> {
                Ok(Mark(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Mark, E> {
                Ok(Mark(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Mark, E> {
                Ok(Mark(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Mark, E> {
                Ok(Mark(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Mark, E> {
                Ok(Mark(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Mark, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Mark(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Mark, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Mark(None))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Item;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an input event")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item, A::Error> {
                let mut e = InputEvent::default();
                while let Some(member) = map.next_key::<Member>()? {
                    if let Member::Field = member {
                        e.field = map.next_value::<Mark>()?.0;
                        continue;
                    }
                    let seen = map.next_value::<Seen>()?;
                    match member {
                        Member::Field => {}
                        Member::T => e.t = seen.number(),
                        Member::X => e.x = seen.number(),
                        Member::Y => e.y = seen.number(),
                        Member::Type => {
                            e.kind = match seen {
                                Seen::Kind(k) => Some(k),
                                _ => None,
                            }
                        }
                        Member::Trusted => {
                            e.trusted = match seen {
                                Seen::Bool(b) => Some(b),
                                _ => None,
                            }
                        }
                        Member::Other => {}
                    }
                }
                Ok(Item(Some(e)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Item(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Item, E> {
                Ok(Item(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Item, E> {
                Ok(Item(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Item, E> {
                Ok(Item(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Item, E> {
                Ok(Item(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Item, E> {
                Ok(Item(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Item, E> {
                Ok(Item(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// `InteractionBatch::events`.
pub fn events<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<InputEvent>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<InputEvent>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of input events")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            // serde_json gives no length: grown from empty, a batch's events were
            // reallocated five times over. The SDK sends a few dozen a batch.
            let mut events = Vec::with_capacity(seq.size_hint().unwrap_or(64).min(1024));
            while let Some(Item(item)) = seq.next_element::<Item>()? {
                events.extend(item);
            }
            Ok(events)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Vec::new())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(V)
}
