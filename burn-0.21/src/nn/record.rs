//! The record of a drop-in layer: the canonical weights, or burn-nn's layout of the same
//! layer, read from the same place in a model's checkpoint (Note [Two layouts, one
//! record]).
//!
//! # Note [Two layouts, one record]
//!
//! A model that held `burn::nn::Lstm` was saved with burn-nn's record layout at that
//! field (`input_gate.input_transform.weight`, ...); the drop-in writes the canonical one
//! (`cells`, `digest`: PyTorch's tensors, see [`FusedRnnRecord`]). After the `use` swap
//! the model's `load_file` must read both, with no call of the user's own.
//!
//! - **Saving** always writes the canonical layout, byte for byte what
//!   [`FusedRnn`](crate::FusedRnn) writes: a drop-in's checkpoint still loads into a
//!   `FusedRnn` and back.
//! - **Reading** decides by the first field name of the stored map: `cells` or `digest`
//!   are the canonical layout, anything else is handed to burn-nn's record type (whose
//!   error, e.g. "missing field `hidden_transform`", names what is wrong). Every recorder
//!   that stores field names reads both layouts this way: the named MessagePack recorders
//!   (`CompactRecorder`, `NamedMpkFileRecorder`, `NamedMpkGzFileRecorder`, and
//!   `DefaultRecorder`) and the JSON ones (`PrettyJsonFileRecorder`,
//!   `JsonGzFileRecorder`), at any precision.
//! - **Bincode** (`BinFileRecorder`, `BinGzFileRecorder`) stores fields by position with
//!   no names, no types and no framing, so the layout is told from the first bytes
//!   instead. Both layouts begin with a length: the canonical one with the number of cells
//!   (`Vec`), burn-nn's with the length of its first parameter's id (`String`). The byte
//!   after it is the canonical layout's first `Option` tag (0 or 1), or the id's first
//!   character (Burn writes ids in base32, digits and lower-case letters: never 0 or 1).
//!   The reader takes those elements one by one, then hands the chosen layout's type a
//!   deserializer that replays them ([`Head`]) and reads everything after them from the
//!   file as it comes ([`Tail`]). For that, the struct is announced with
//!   [`SLOTS`] field names: bincode reads no names, it counts them as the number of
//!   elements the reader may take.
//! - **Checks.** A canonical record is copied as Burn copies records (unchecked; the
//!   checked form is `try_load_record`). A burn-nn record is converted through
//!   [`load_burn_nn_record`](super::Lstm::load_burn_nn_record), which checks it against
//!   the layer's configuration (sizes, bias, number of layers, finite weights): Burn's
//!   `load_record` cannot return an error, so a mismatch there panics with the layer's
//!   type and configuration and the tensor, and `try_load_record` returns it as
//!   [`FusedRnnLoadError::BurnNn`](crate::FusedRnnLoadError::BurnNn).

use core::fmt;
use core::marker::PhantomData;

use burn::record::{PrecisionSettings, Record};
use burn::tensor::backend::Backend;
use serde::de::value::{MapAccessDeserializer, StringDeserializer};
use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::FusedRnnRecord;

/// The record of a drop-in layer (`Lstm`, `Gru`, ...): its canonical weights, or a record
/// of burn-nn's layer of the same name (`N`, e.g. `burn::nn::LstmRecord<B>`), as read from
/// a checkpoint written before the `use` swap (Note [Two layouts, one record]).
///
/// `into_record` gives `Canonical`; `load_record` and `try_load_record` take either.
pub enum DropInRecord<B: Backend, N> {
    /// The canonical weights (what the drop-in saves).
    Canonical(FusedRnnRecord<B>),
    /// burn-nn's record of the layer.
    BurnNn(N),
}

impl<B: Backend, N> From<FusedRnnRecord<B>> for DropInRecord<B, N> {
    fn from(record: FusedRnnRecord<B>) -> Self {
        Self::Canonical(record)
    }
}

impl<B: Backend, N: Record<B>> Record<B> for DropInRecord<B, N> {
    type Item<S: PrecisionSettings> =
        DropInRecordItem<<FusedRnnRecord<B> as Record<B>>::Item<S>, N::Item<S>>;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        match self {
            Self::Canonical(record) => DropInRecordItem::Canonical(record.into_item()),
            Self::BurnNn(record) => DropInRecordItem::BurnNn(record.into_item()),
        }
    }

    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, device: &B::Device) -> Self {
        match item {
            DropInRecordItem::Canonical(item) => {
                Self::Canonical(FusedRnnRecord::from_item(item, device))
            }
            DropInRecordItem::BurnNn(item) => Self::BurnNn(N::from_item(item, device)),
        }
    }
}

/// The serialized form of a [`DropInRecord`]: `C` is the canonical item, `N` burn-nn's.
/// Each variant serializes as its item alone; reading picks the variant by the first
/// field name (Note [Two layouts, one record]).
#[derive(Debug, Clone)]
pub enum DropInRecordItem<C, N> {
    /// The canonical item.
    Canonical(C),
    /// burn-nn's item.
    BurnNn(N),
}

/// The field names of the canonical layout ([`FusedRnnRecord`]).
const CANONICAL_FIELDS: &[&str] = &["cells", "digest"];

/// The field names given to `deserialize_struct`: the canonical layout's, then unnamed
/// slots. Formats with names ignore the list; bincode takes its length as the number of
/// elements `visit_seq` may read (Note [Two layouts, one record]), which must cover every
/// element the replaying reader takes from the file one by one (a bidirectional burn-nn
/// layer takes about 40).
static SLOTS: [&str; 256] = {
    let mut names = [""; 256];
    names[0] = CANONICAL_FIELDS[0];
    names[1] = CANONICAL_FIELDS[1];
    names
};

impl<C: Serialize, N: Serialize> Serialize for DropInRecordItem<C, N> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        match self {
            Self::Canonical(item) => item.serialize(serializer),
            Self::BurnNn(item) => item.serialize(serializer),
        }
    }
}

impl<'de, C: Deserialize<'de>, N: Deserialize<'de>> Deserialize<'de> for DropInRecordItem<C, N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("FusedRnnRecordItem", &SLOTS, ItemVisitor(PhantomData))
    }
}

struct ItemVisitor<C, N>(PhantomData<(C, N)>);

impl<'de, C: Deserialize<'de>, N: Deserialize<'de>> Visitor<'de> for ItemVisitor<C, N> {
    type Value = DropInRecordItem<C, N>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "the record of a recurrent layer: the canonical layout (fields `cells`, `digest`) \
             or burn-nn's"
        )
    }

    /// Fields by position (bincode): the first two elements decide (Note [Two layouts, one
    /// record]).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let ends = || A::Error::custom("expected the record of a recurrent layer, got its end");
        let len: u64 = seq.next_element()?.ok_or_else(ends)?;
        let first: u8 = seq.next_element()?.ok_or_else(ends)?;
        if first <= 1 {
            let mut prefix = Prefix::SeqLen(len, first);
            C::deserialize(Head {
                prefix: &mut prefix,
                seq: &mut seq,
            })
            .map(DropInRecordItem::Canonical)
        } else {
            // Burn's ids are 13 characters; anything much longer is not an id.
            if len > 64 {
                return Err(A::Error::custom(format!(
                    "expected the record of a recurrent layer (the canonical layout or \
                     burn-nn's), got a first length of {len}"
                )));
            }
            let mut id = vec![first];
            for _ in 1..len {
                id.push(seq.next_element()?.ok_or_else(ends)?);
            }
            let id = String::from_utf8(id).map_err(A::Error::custom)?;
            let mut prefix = Prefix::Id(id);
            N::deserialize(Head {
                prefix: &mut prefix,
                seq: &mut seq,
            })
            .map(DropInRecordItem::BurnNn)
        }
    }

    /// Named fields: the first name decides.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Err(serde::de::Error::custom(
                "expected the record of a recurrent layer, got an empty map",
            ));
        };
        let canonical = CANONICAL_FIELDS.contains(&first.as_str());
        let rest = MapAccessDeserializer::new(Replay {
            first: Some(first),
            map,
        });
        if canonical {
            C::deserialize(rest).map(DropInRecordItem::Canonical)
        } else {
            N::deserialize(rest).map(DropInRecordItem::BurnNn)
        }
    }
}

/// A map whose first key was already read: gives it back first, then the rest.
struct Replay<A> {
    first: Option<String>,
    map: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Replay<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        match self.first.take() {
            Some(key) => seed
                .deserialize(StringDeserializer::<A::Error>::new(key))
                .map(Some),
            None => self.map.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map
            .size_hint()
            .map(|n| n + usize::from(self.first.is_some()))
    }
}

/// What [`Head`] still has to give back of the elements already read.
enum Prefix {
    /// A sequence's length, then the first `Option` tag inside it (canonical layout).
    SeqLen(u64, u8),
    /// An `Option` tag (canonical layout, once the length was given).
    OptionTag(u8),
    /// A string (burn-nn's layout: the first parameter's id).
    Id(String),
    /// Everything was given back.
    Done,
}

/// A deserializer that gives back the elements already read ([`Prefix`]) where the type
/// being read asks for its first field, first element, option or string, and reads
/// everything else from the file through [`Tail`] (Note [Two layouts, one record]).
struct Head<'a, A> {
    prefix: &'a mut Prefix,
    seq: &'a mut A,
}

impl<A> Head<'_, A> {
    fn unexpected<T, E: serde::de::Error>(&self, what: &str) -> Result<T, E> {
        Err(E::custom(format!(
            "expected the record of a recurrent layer (the canonical layout or burn-nn's), \
             got a layout whose first element is read as {what}"
        )))
    }
}

impl<'de, A: SeqAccess<'de>> Deserializer<'de> for Head<'_, A> {
    type Error = A::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_seq(HeadSeq {
            prefix: self.prefix,
            seq: self.seq,
            first: true,
            remaining: fields.len(),
        })
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_seq(HeadSeq {
            prefix: self.prefix,
            seq: self.seq,
            first: true,
            remaining: len,
        })
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_tuple(len, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        let Prefix::SeqLen(len, tag) = *self.prefix else {
            return self.unexpected("a sequence");
        };
        *self.prefix = Prefix::OptionTag(tag);
        let remaining = usize::try_from(len).map_err(A::Error::custom)?;
        visitor.visit_seq(HeadSeq {
            prefix: self.prefix,
            seq: self.seq,
            first: true,
            remaining,
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        let Prefix::OptionTag(tag) = *self.prefix else {
            return self.unexpected("an option");
        };
        *self.prefix = Prefix::Done;
        match tag {
            0 => visitor.visit_none(),
            _ => visitor.visit_some(Tail(self.seq)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match core::mem::replace(self.prefix, Prefix::Done) {
            Prefix::Id(id) => visitor.visit_string(id),
            other => {
                *self.prefix = other;
                self.unexpected("a string")
            }
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_string(visitor)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        self.unexpected("a self-describing value")
    }

    fn is_human_readable(&self) -> bool {
        false
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf unit
        unit_struct map enum identifier ignored_any
    }
}

/// The elements of a struct, tuple or sequence whose first element holds the rest of the
/// prefix ([`Head`]); the others are read from the file ([`Tail`]).
struct HeadSeq<'a, A> {
    prefix: &'a mut Prefix,
    seq: &'a mut A,
    first: bool,
    remaining: usize,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for HeadSeq<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        if self.remaining == 0 {
            return Ok(None);
        }
        self.remaining -= 1;
        if core::mem::take(&mut self.first) {
            seed.deserialize(Head {
                prefix: &mut *self.prefix,
                seq: &mut *self.seq,
            })
            .map(Some)
        } else {
            seed.deserialize(Tail(&mut *self.seq)).map(Some)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.remaining)
    }
}

/// A deserializer that reads one value as the next element of the file's sequence: with
/// bincode, reading a value as the next element of a struct is reading it in place.
struct Tail<'a, A>(&'a mut A);

/// The `deserialize_*` call a [`Tail`] forwards, with its arguments.
enum Call {
    Any,
    Bool,
    I8,
    I16,
    I32,
    I64,
    I128,
    U8,
    U16,
    U32,
    U64,
    U128,
    F32,
    F64,
    Char,
    Str,
    String,
    Bytes,
    ByteBuf,
    Option,
    Unit,
    UnitStruct(&'static str),
    NewtypeStruct(&'static str),
    Seq,
    Tuple(usize),
    TupleStruct(&'static str, usize),
    Map,
    Struct(&'static str, &'static [&'static str]),
    Enum(&'static str, &'static [&'static str]),
    Identifier,
    IgnoredAny,
}

/// A seed that makes `call` on the deserializer it is given.
struct Forward<V> {
    call: Call,
    visitor: V,
}

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for Forward<V> {
    type Value = V::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        let v = self.visitor;
        match self.call {
            Call::Any => d.deserialize_any(v),
            Call::Bool => d.deserialize_bool(v),
            Call::I8 => d.deserialize_i8(v),
            Call::I16 => d.deserialize_i16(v),
            Call::I32 => d.deserialize_i32(v),
            Call::I64 => d.deserialize_i64(v),
            Call::I128 => d.deserialize_i128(v),
            Call::U8 => d.deserialize_u8(v),
            Call::U16 => d.deserialize_u16(v),
            Call::U32 => d.deserialize_u32(v),
            Call::U64 => d.deserialize_u64(v),
            Call::U128 => d.deserialize_u128(v),
            Call::F32 => d.deserialize_f32(v),
            Call::F64 => d.deserialize_f64(v),
            Call::Char => d.deserialize_char(v),
            Call::Str => d.deserialize_str(v),
            Call::String => d.deserialize_string(v),
            Call::Bytes => d.deserialize_bytes(v),
            Call::ByteBuf => d.deserialize_byte_buf(v),
            Call::Option => d.deserialize_option(v),
            Call::Unit => d.deserialize_unit(v),
            Call::UnitStruct(name) => d.deserialize_unit_struct(name, v),
            Call::NewtypeStruct(name) => d.deserialize_newtype_struct(name, v),
            Call::Seq => d.deserialize_seq(v),
            Call::Tuple(len) => d.deserialize_tuple(len, v),
            Call::TupleStruct(name, len) => d.deserialize_tuple_struct(name, len, v),
            Call::Map => d.deserialize_map(v),
            Call::Struct(name, fields) => d.deserialize_struct(name, fields, v),
            Call::Enum(name, variants) => d.deserialize_enum(name, variants, v),
            Call::Identifier => d.deserialize_identifier(v),
            Call::IgnoredAny => d.deserialize_ignored_any(v),
        }
    }
}

impl<'de, A: SeqAccess<'de>> Tail<'_, A> {
    fn next<V: Visitor<'de>>(self, call: Call, visitor: V) -> Result<V::Value, A::Error> {
        self.0
            .next_element_seed(Forward { call, visitor })?
            .ok_or_else(|| {
                A::Error::custom(
                    "expected the rest of a recurrent layer's record, got the end of the \
                     elements bincode allows (a record larger than the reader's slots)",
                )
            })
    }
}

macro_rules! forward_calls {
    ($($method:ident => $call:ident,)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.next(Call::$call, visitor)
        }
    )*};
}

impl<'de, A: SeqAccess<'de>> Deserializer<'de> for Tail<'_, A> {
    type Error = A::Error;

    forward_calls! {
        deserialize_any => Any,
        deserialize_bool => Bool,
        deserialize_i8 => I8,
        deserialize_i16 => I16,
        deserialize_i32 => I32,
        deserialize_i64 => I64,
        deserialize_i128 => I128,
        deserialize_u8 => U8,
        deserialize_u16 => U16,
        deserialize_u32 => U32,
        deserialize_u64 => U64,
        deserialize_u128 => U128,
        deserialize_f32 => F32,
        deserialize_f64 => F64,
        deserialize_char => Char,
        deserialize_str => Str,
        deserialize_string => String,
        deserialize_bytes => Bytes,
        deserialize_byte_buf => ByteBuf,
        deserialize_option => Option,
        deserialize_unit => Unit,
        deserialize_seq => Seq,
        deserialize_map => Map,
        deserialize_identifier => Identifier,
        deserialize_ignored_any => IgnoredAny,
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.next(Call::UnitStruct(name), visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.next(Call::NewtypeStruct(name), visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.next(Call::Tuple(len), visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.next(Call::TupleStruct(name, len), visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.next(Call::Struct(name, fields), visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.next(Call::Enum(name, variants), visitor)
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}
