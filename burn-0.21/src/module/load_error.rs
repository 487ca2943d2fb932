//! Why a record could not be loaded: one sentence per failure, with Burn's error as the
//! source.

use core::fmt;
use std::path::PathBuf;

use burn::record::RecorderError;

/// Why a record could not be loaded into a [`FusedRnn`](crate::FusedRnn).
///
/// Errors from [`FusedRnn::try_load_file`](crate::FusedRnn::try_load_file) are
/// [`FusedRnnLoadError::File`] (the file could not be read as a record) or
/// [`FusedRnnLoadError::InFile`] (it was read, and its record failed a check); both name
/// the file and the recorder. [`FusedRnnLoadError::check`] gives the failed check
/// whichever way it came.
#[derive(Debug)]
pub enum FusedRnnLoadError {
    /// A recorder failed outside [`FusedRnn::try_load_file`](crate::FusedRnn::try_load_file)
    /// (for example a recorder error converted with `?`): Burn's error as it is.
    Recorder(RecorderError),
    /// The file could not be read as a record of this recorder.
    File {
        /// The file the recorder read (with the recorder's extension).
        path: PathBuf,
        /// The recorder, e.g. `NamedMpkFileRecorder<FullPrecisionSettings>`.
        recorder: String,
        /// What is wrong with the file.
        problem: FileProblem,
        /// Burn's error, when Burn reported one.
        source: Option<RecorderError>,
    },
    /// The file was read, and the record in it failed the check `error`.
    InFile {
        /// The file the recorder read (with the recorder's extension).
        path: PathBuf,
        /// The recorder, e.g. `NamedMpkFileRecorder<FullPrecisionSettings>`.
        recorder: String,
        /// The failed check: never `File` or `InFile`.
        error: Box<FusedRnnLoadError>,
    },
    /// The record has a different number of pseudo-layers (`num_layers * directions`).
    CellCount {
        /// Pseudo-layers the configuration has.
        expected: usize,
        /// Pseudo-layers the record has.
        got: usize,
    },
    /// A tensor's shape, or its presence, does not fit the configuration.
    Shape {
        /// PyTorch name of the tensor, e.g. `weight_ih_l1_reverse`.
        name: String,
        /// Shape the configuration expects (`None`: the configuration has no such tensor).
        expected: Option<Vec<usize>>,
        /// Shape in the record (`None`: the record has no such tensor).
        got: Option<Vec<usize>>,
    },
    /// A weight is NaN or infinite.
    NotFinite {
        /// PyTorch name of the tensor, e.g. `weight_hh_l1_reverse`.
        name: String,
        /// Index of the first non-finite element, e.g. `[3, 1]`.
        index: Vec<usize>,
        /// Its value.
        value: f64,
    },
    /// A tensor of the record cannot be a weight: not a float dtype, bytes that do not fit
    /// its shape, or a damaged parameter id.
    BadTensor {
        /// PyTorch name of the tensor.
        name: String,
        /// What is wrong, in words.
        problem: String,
    },
    /// A record in burn-nn's layout, given to a drop-in layer
    /// ([`crate::nn`]), does not fit the layer: the error names the tensor.
    BurnNn(crate::interop::InteropError),
    /// The weights are not the ones whose digest the record carries (Note [Weights digest]
    /// on [`WeightsDigest`](crate::WeightsDigest)).
    DigestMismatch {
        /// The digest the record carries.
        expected: crate::WeightsDigest,
        /// CRC-32 of the weights read.
        got: u32,
    },
}

/// What is wrong with a file that could not be read as a record
/// ([`FusedRnnLoadError::File`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileProblem {
    /// There is no such file; `other` lists files of the same name with another Burn
    /// recorder's extension (a record saved with another recorder, most likely).
    Missing {
        /// Existing files that differ only in the extension.
        other: Vec<PathBuf>,
    },
    /// The file exists but cannot be read (permissions, a folder, ...).
    Unreadable {
        /// The operating system's error.
        reason: String,
    },
    /// The file has no bytes.
    Empty,
    /// The file ends inside the record.
    Truncated,
    /// The file holds another recorder's format.
    OtherFormat {
        /// The format found, and which recorders write it.
        found: &'static str,
        /// The format this recorder reads.
        expected: &'static str,
    },
    /// The file is in none of the formats of Burn's file recorders.
    NotARecord,
    /// A record of this recorder, but not of a `FusedRnn` (or one damaged where its
    /// structure is stored).
    NotFusedRnn {
        /// The deserializer's complaint, e.g. "missing field `cells`".
        detail: String,
    },
    /// A record of this recorder's format that cannot be decoded.
    Corrupt {
        /// The deserializer's complaint.
        detail: String,
    },
}

impl FusedRnnLoadError {
    /// The failed check, without the file's context: `error` of [`FusedRnnLoadError::InFile`],
    /// else `self`.
    pub fn check(&self) -> &FusedRnnLoadError {
        match self {
            Self::InFile { error, .. } => error,
            other => other,
        }
    }

    /// The same error, in the context of a file read by a recorder.
    pub(crate) fn in_file(self, path: PathBuf, recorder: String) -> Self {
        match self {
            Self::File { .. } | Self::InFile { .. } => self,
            error => Self::InFile {
                path,
                recorder,
                error: Box::new(error),
            },
        }
    }
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { other } if other.is_empty() => write!(f, "no such file"),
            Self::Missing { other } => write!(
                f,
                "no such file, but {} exists (saved with another recorder?)",
                other
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            Self::Unreadable { reason } => write!(f, "the file cannot be read ({reason})"),
            Self::Empty => write!(f, "the file is empty"),
            Self::Truncated => write!(f, "the file is truncated (it ends inside the record)"),
            Self::OtherFormat { found, expected } => write!(
                f,
                "written by a different recorder format: expected {expected}, got {found}"
            ),
            Self::NotARecord => write!(
                f,
                "not a record of this recorder: the file is in none of the formats of Burn's \
                 file recorders (garbage, or another kind of file)"
            ),
            Self::NotFusedRnn { detail } => write!(
                f,
                "not a record of a FusedRnn, or one damaged in its structure ({detail})"
            ),
            Self::Corrupt { detail } => {
                write!(f, "not a record of this recorder: it is corrupt ({detail})")
            }
        }
    }
}

impl fmt::Display for FusedRnnLoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = |s: &Option<Vec<usize>>| s.as_ref().map_or("none".into(), |s| format!("{s:?}"));
        match self {
            Self::Recorder(e) => write!(f, "could not read the record: {e}"),
            Self::File {
                path,
                recorder,
                problem,
                ..
            } => write!(f, "cannot load {} with {recorder}: {problem}", path.display()),
            Self::InFile {
                path,
                recorder,
                error,
            } => write!(f, "cannot load {} with {recorder}: {error}", path.display()),
            Self::CellCount { expected, got } => write!(
                f,
                "record does not fit the configuration: expected {expected} cells (num_layers * directions), got {got}"
            ),
            Self::Shape {
                name,
                expected,
                got,
            } => write!(
                f,
                "record does not fit the configuration: expected {name} of shape {}, got {}",
                shape(expected),
                shape(got)
            ),
            Self::NotFinite { name, index, value } => {
                write!(
                    f,
                    "expected finite weights, got {name}{index:?} = {value} (the first non-finite value)"
                )?;
                if value.is_infinite() {
                    // The likely cause of an infinity in a checkpoint.
                    write!(f, "; half-precision recorders such as CompactRecorder store values beyond ±65504 as infinities")?;
                }
                Ok(())
            }
            Self::BurnNn(e) => write!(f, "burn-nn's record does not fit the layer: {e}"),
            Self::BadTensor { name, problem } => {
                write!(f, "the record's tensor {name} is damaged: {problem}")
            }
            Self::DigestMismatch { expected, got } => write!(
                f,
                "digest mismatch: the weights changed after saving (their CRC-32 is {got:08x}, \
                 the record's digest accepts {:08x}, {:08x} (f32), {:08x} (f16) or {:08x} (bf16))",
                expected.exact, expected.f32, expected.f16, expected.bf16
            ),
        }
    }
}

impl std::error::Error for FusedRnnLoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Recorder(e) => Some(e),
            Self::File { source, .. } => source.as_ref().map(|e| e as _),
            // `InFile` prints its check in its own message: no source, so that error
            // reporters do not print it twice.
            _ => None,
        }
    }
}

impl From<RecorderError> for FusedRnnLoadError {
    fn from(e: RecorderError) -> Self {
        Self::Recorder(e)
    }
}
