//! Checked loading from a file: the record is read into plain data, checked (shapes,
//! values, digest), and only then turned into tensors; a file that cannot be read is
//! named, with its recorder and what is wrong, in one sentence.
//!
//! # Note [Reading a record file]
//!
//! [`FusedRnn::try_load_file`] asks the recorder (Burn's own reader for its format) to
//! deserialize the file into [`FileRecord`], a plain-data mirror of the
//! [`FusedRnnRecord`] item that Burn writes: the same fields in the same order, each
//! tensor as Burn's `TensorData` (bytes, shape, dtype). So every check runs on host data
//! before a tensor exists: a damaged shape or byte count cannot reach a backend (where it
//! would panic), and the digest needs no device read-back. The tensors are then made as
//! Burn's `Param` record makes them (`convert` to the backend's float type, `from_data`,
//! `require_grad`, inside `memory_persistent_allocations`).
//!
//! When the recorder fails, the file is looked at only as far as naming the problem
//! needs: missing (and whether the same name exists with another recorder's extension),
//! empty, the format its first bytes show (gzip, JSON, a MessagePack map, or bincode's
//! length-prefixed float type name, which opens every Burn record's metadata) against the
//! recorder's, truncated (the deserializer ran out of bytes), a header that does not
//! decode, or a record of something other than a `FusedRnn`.

use core::any::type_name;
use std::path::{Path, PathBuf};

use burn::module::{Module, Param, ParamId};
use burn::record::{BurnMetadata, BurnRecordNoItem, FileRecorder, Recorder, RecorderError};
use burn::serde::Deserialize;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use super::digest::WeightsDigest;
use super::load_error::FileProblem;
use super::record::{check_shapes, check_values};
use super::{FusedRnn, FusedRnnLoadError, FusedRnnRecord, RnnCellRecord};
use crate::layout::{param_name, ParamKind, RnnLayout};

/// Burn's `BurnRecord<FusedRnnRecordItem, B>` as plain data (Note [Reading a record
/// file]). Field names and order follow Burn's serialization, which positional formats
/// (bincode) rely on.
#[derive(Deserialize)]
#[serde(crate = "burn::serde")]
struct FileRecord {
    #[allow(dead_code)] // read to advance positional formats past it
    metadata: BurnMetadata,
    item: FileItem,
}

#[derive(Deserialize)]
#[serde(crate = "burn::serde")]
struct FileItem {
    cells: Vec<FileCell>,
    digest: Option<WeightsDigest>,
}

/// `RnnCellRecordItem`: the fields of [`super::RnnCell`], in order.
#[derive(Deserialize)]
#[serde(crate = "burn::serde")]
struct FileCell {
    weight_ih: Option<FileParam>,
    weight_hh: FileParam,
    bias_ih: Option<FileParam>,
    bias_hh: Option<FileParam>,
    weight_hr: Option<FileParam>,
}

/// Burn's `ParamSerde<FloatTensorSerde>`: the parameter's id and its data.
#[derive(Deserialize)]
#[serde(crate = "burn::serde")]
struct FileParam {
    id: String,
    param: TensorData,
}

impl FileCell {
    /// The tensors, in [`ParamKind::ALL`] order.
    fn params(&self) -> [Option<&FileParam>; 5] {
        [
            self.weight_ih.as_ref(),
            Some(&self.weight_hh),
            self.bias_ih.as_ref(),
            self.bias_hh.as_ref(),
            self.weight_hr.as_ref(),
        ]
    }

    fn into_record<B: Backend>(self, device: &B::Device) -> RnnCellRecord<B> {
        RnnCellRecord {
            weight_ih: self.weight_ih.map(|p| p.into_param(device)),
            weight_hh: self.weight_hh.into_param(device),
            bias_ih: self.bias_ih.map(|p| p.into_param(device)),
            bias_hh: self.bias_hh.map(|p| p.into_param(device)),
            weight_hr: self.weight_hr.map(|p| p.into_param(device)),
        }
    }
}

impl FileParam {
    /// The parameter's id, or `None` when it is not one Burn writes. Burn's own
    /// `ParamId::try_deserialize` panics on a base32 string longer than 8 bytes, so such
    /// strings are refused first: Burn writes ids as at most 13 base32 characters, or (older
    /// records) as UUIDs with hyphens, which its base32 decoder refuses.
    fn id(&self) -> Option<ParamId> {
        (self.id.len() <= 13 || self.id.contains('-'))
            .then(|| ParamId::try_deserialize(&self.id))
            .flatten()
    }

    /// The parameter, made as Burn's `Param` record makes it.
    fn into_param<B: Backend, const D: usize>(self, device: &B::Device) -> Param<Tensor<B, D>> {
        let id = self.id().expect("checked by `FileItem::check`");
        B::memory_persistent_allocations(device, self, |p| {
            let data = p.param.convert::<B::FloatElem>();
            Param::initialized(id, Tensor::from_data(data, device).require_grad())
        })
    }
}

impl FileItem {
    /// Checks shapes, values and digest against `layout`.
    fn check(&self, layout: &RnnLayout) -> Result<(), FusedRnnLoadError> {
        let shapes: Vec<_> = self
            .cells
            .iter()
            .map(|cell| cell.params().map(|p| p.map(|p| p.param.shape.to_vec())))
            .collect();
        check_shapes(layout, &shapes)?;
        let nd = layout.spec().num_directions();
        for (idx, cell) in self.cells.iter().enumerate() {
            for (kind, p) in ParamKind::ALL.into_iter().zip(cell.params()) {
                if let Some(p) = p.filter(|p| p.id().is_none()) {
                    return Err(FusedRnnLoadError::BadTensor {
                        name: param_name(kind, idx / nd, idx % nd),
                        problem: format!("expected a parameter id, got {:?}", p.id),
                    });
                }
            }
        }
        let tensors = self.cells.iter().enumerate().flat_map(|(idx, cell)| {
            ParamKind::ALL
                .into_iter()
                .zip(cell.params())
                .filter_map(move |(kind, p)| {
                    p.map(|p| (param_name(kind, idx / nd, idx % nd), &p.param))
                })
        });
        check_values(tensors, self.digest.as_ref())
    }

    fn into_record<B: Backend>(self, device: &B::Device) -> FusedRnnRecord<B> {
        FusedRnnRecord {
            cells: self
                .cells
                .into_iter()
                .map(|cell| cell.into_record(device))
                .collect(),
            digest: self.digest,
        }
    }
}

impl<B: Backend> FusedRnn<B> {
    /// Reads a record with `recorder` and loads it after the checks of
    /// [`FusedRnn::try_load_record`]. The checks run on the file's data before any tensor
    /// is made (Note [Reading a record file]).
    ///
    /// As with Burn's `load_file`, the recorder sets the file's extension (`.mpk`, `.bin`,
    /// `.json`, ...); a path that already ends with it (`lstm.mpk.gz`) is used as it is.
    ///
    /// # Errors
    ///
    /// Every error names the file and the recorder:
    ///
    /// - [`FusedRnnLoadError::File`] when the file cannot be read as a record, with a
    ///   [`FileProblem`]: missing (naming files of the same name with another recorder's
    ///   extension), unreadable, empty, truncated, written in another recorder's format,
    ///   in no recorder's format, not a `FusedRnn` record, or corrupt; Burn's error is
    ///   the [`source`](std::error::Error::source);
    /// - [`FusedRnnLoadError::InFile`] wrapping an error of
    ///   [`FusedRnn::try_load_record`] (shapes, non-finite weights, digest mismatch).
    pub fn try_load_file<R: FileRecorder<B>, P: Into<PathBuf>>(
        self,
        path: P,
        recorder: &R,
        device: &B::Device,
    ) -> Result<Self, FusedRnnLoadError> {
        let extension = <R as FileRecorder<B>>::file_extension();
        // The recorder replaces the last extension: keep a path that already ends with the
        // recorder's (two-part, for the gzip recorders) extension as it is.
        let given = path.into();
        let stem = match given
            .to_str()
            .and_then(|p| p.strip_suffix(&format!(".{extension}")))
        {
            Some(stem) => PathBuf::from(stem),
            None => given,
        };
        let mut path = stem.clone();
        path.set_extension(extension);
        let recorder_name = short_type_name(type_name::<R>());
        let file = <R as Recorder<B>>::load_item::<FileRecord>(recorder, &mut stem.clone())
            .map_err(|error| {
                let problem = classify::<B, R>(recorder, &path, &stem, &error);
                FusedRnnLoadError::File {
                    path: path.clone(),
                    recorder: recorder_name.clone(),
                    problem,
                    source: Some(error),
                }
            })?;
        file.item
            .check(&self.layout())
            .map_err(|e| e.in_file(path, recorder_name))?;
        Ok(self.load_record(file.item.into_record(device)))
    }
}

/// `burn_core::record::file::BinFileRecorder<burn_core::record::settings::FullPrecisionSettings>`
/// → `BinFileRecorder<FullPrecisionSettings>`.
fn short_type_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut segment = String::new();
    for c in name.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            segment.push(c);
        } else {
            out.push_str(segment.rsplit("::").next().unwrap_or(""));
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(segment.rsplit("::").next().unwrap_or(""));
    out
}

/// The file formats of Burn's file recorders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    MessagePack,
    Bincode,
    Json,
    Gzip,
}

impl Format {
    /// The format a recorder with this file extension writes.
    fn of_extension(extension: &str) -> Option<Self> {
        match extension {
            e if e.ends_with("gz") => Some(Self::Gzip),
            "mpk" => Some(Self::MessagePack),
            "bin" => Some(Self::Bincode),
            "json" => Some(Self::Json),
            _ => None,
        }
    }

    /// The format the first bytes of a record file show (Note [Reading a record file]).
    fn sniff(bytes: &[u8]) -> Option<Self> {
        let text = bytes.iter().find(|b| !b.is_ascii_whitespace());
        match bytes {
            [0x1f, 0x8b, ..] => Some(Self::Gzip),
            // A record is a map {metadata, item}: fixmap, map16 or map32.
            [0x80..=0x8f | 0xde | 0xdf, ..] => Some(Self::MessagePack),
            _ if text == Some(&b'{') => Some(Self::Json),
            // The metadata's first field, the float type's name, as a length-prefixed
            // string (lengths below 251 take one byte).
            [n @ 1..=250, rest @ ..]
                if rest.len() >= *n as usize
                    && rest[..*n as usize].iter().all(u8::is_ascii_graphic) =>
            {
                Some(Self::Bincode)
            }
            _ => None,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::MessagePack => {
                "MessagePack (NamedMpkFileRecorder, so also DefaultRecorder and CompactRecorder)"
            }
            Self::Bincode => "bincode (BinFileRecorder)",
            Self::Json => "JSON (PrettyJsonFileRecorder)",
            Self::Gzip => "gzip (NamedMpkGzFileRecorder, BinGzFileRecorder or JsonGzFileRecorder)",
        }
    }
}

/// The message inside a recorder error.
fn message(error: &RecorderError) -> &str {
    match error {
        RecorderError::FileNotFound(m) | RecorderError::DeserializeError(m) => m,
        RecorderError::Unknown(m) => m,
    }
}

/// Whether the deserializer ran out of bytes: how each format's reader says so
/// (`std::io::ErrorKind::UnexpectedEof` from MessagePack and gzip, bincode's
/// `UnexpectedEnd`, serde_json's "EOF while parsing").
fn ran_out_of_bytes(error: &RecorderError) -> bool {
    let m = message(error);
    [
        "failed to fill whole buffer",
        "UnexpectedEnd",
        "EOF while parsing",
        "unexpected end of file",
        "UnexpectedEof",
    ]
    .iter()
    .any(|s| m.contains(s))
}

/// Names what is wrong with `path`, which `recorder` failed to read with `error`.
fn classify<B: Backend, R: FileRecorder<B>>(
    recorder: &R,
    path: &Path,
    stem: &Path,
    error: &RecorderError,
) -> FileProblem {
    if let RecorderError::FileNotFound(_) = error {
        return FileProblem::Missing {
            other: same_name_other_recorders::<B, R>(path),
        };
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            return FileProblem::Unreadable {
                reason: e.to_string(),
            }
        }
    };
    if bytes.is_empty() {
        return FileProblem::Empty;
    }
    let expected = Format::of_extension(<R as FileRecorder<B>>::file_extension());
    match (Format::sniff(&bytes), expected) {
        (None, _) => return FileProblem::NotARecord,
        (Some(found), Some(expected)) if found != expected => {
            return FileProblem::OtherFormat {
                found: found.describe(),
                expected: expected.describe(),
            }
        }
        _ => {}
    }
    if ran_out_of_bytes(error) {
        return FileProblem::Truncated;
    }
    let detail = message(error).to_string();
    // The header (Burn's metadata) decodes: a record of this recorder, but not of a
    // FusedRnn, or damaged past its header.
    match <R as Recorder<B>>::load_item::<BurnRecordNoItem>(recorder, &mut stem.to_path_buf()) {
        Ok(_) => FileProblem::NotFusedRnn { detail },
        Err(_) => FileProblem::Corrupt { detail },
    }
}

/// Files named like `path` with the extension of another of Burn's file recorders.
fn same_name_other_recorders<B: Backend, R: FileRecorder<B>>(path: &Path) -> Vec<PathBuf> {
    let own = <R as FileRecorder<B>>::file_extension();
    let name = path.to_string_lossy();
    let stem = name.strip_suffix(&format!(".{own}")).unwrap_or(&name);
    ["mpk", "mpk.gz", "bin", "bin.gz", "json", "json.gz"]
        .into_iter()
        .filter(|e| *e != own)
        .map(|e| PathBuf::from(format!("{stem}.{e}")))
        .filter(|p| p.is_file())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_names_lose_their_paths() {
        assert_eq!(
            short_type_name(
                "burn_core::record::file::BinFileRecorder<burn_core::record::settings::FullPrecisionSettings>"
            ),
            "BinFileRecorder<FullPrecisionSettings>"
        );
    }

    #[test]
    fn formats_are_told_apart_by_their_first_bytes() {
        assert_eq!(Format::sniff(&[0x1f, 0x8b, 8]), Some(Format::Gzip));
        assert_eq!(
            Format::sniff(b"\x82\xa8metadata"),
            Some(Format::MessagePack)
        );
        assert_eq!(Format::sniff(b"  {\"metadata\""), Some(Format::Json));
        assert_eq!(Format::sniff(b"\x03f32\x03i64"), Some(Format::Bincode));
        assert_eq!(Format::sniff(b"\x09f32"), None);
        assert_eq!(Format::sniff(b"PK\x03\x04"), None);
    }
}
