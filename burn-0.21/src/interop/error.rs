//! The error of every conversion in [`crate::interop`].

use core::fmt;
use std::path::PathBuf;

/// Why weights could not be imported, exported or converted.
///
/// Every variant names the tensor (by the key or name of the format it came from) or the
/// option at fault, so that the message alone says what to fix.
#[derive(Debug)]
#[non_exhaustive]
pub enum InteropError {
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong, as the reader or writer reported it.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A tensor has a shape the configuration does not allow.
    Shape {
        /// The tensor's key in its format, e.g. `encoder.rnn.weight_ih_l1_reverse`.
        key: String,
        /// The shape the configuration requires.
        expected: Vec<usize>,
        /// The shape found.
        got: Vec<usize>,
        /// Why that shape was expected, when it is not obvious (may be empty).
        context: String,
    },
    /// A tensor that the configuration requires is absent. The message starts with
    /// `missing tensor <key>` and lists the keys found.
    Missing {
        /// The key it was looked up under.
        key: String,
        /// The shape it would have (`None`: unknown, the configuration is inferred from it).
        expected: Option<Vec<usize>>,
        /// Why it is needed, and the keys found (may be empty).
        context: String,
    },
    /// A tensor that the configuration has no place for (another layer or direction,
    /// a projection the mode does not have, an unknown name under the prefix). The message
    /// starts with `unexpected tensor <key>` and lists the keys found.
    Unexpected {
        /// The tensor's key.
        key: String,
        /// Its shape.
        shape: Vec<usize>,
        /// Why it does not fit, and the keys found (may be empty).
        context: String,
    },
    /// A weight is NaN or infinite.
    NotFinite {
        /// The tensor's key.
        key: String,
        /// Index of the first non-finite element, in the tensor's shape in its source.
        index: Vec<usize>,
        /// Its value.
        value: f64,
    },
    /// A conversion of a list (of layers, nodes) was given an empty one.
    Empty {
        /// The argument, e.g. `layers`.
        argument: String,
        /// What it must hold at least one of, e.g. `burn-nn layer`.
        what: String,
    },
    /// A tensor is not of a float dtype.
    Dtype {
        /// The tensor's key.
        key: String,
        /// Its dtype.
        dtype: burn::tensor::DType,
    },
    /// An option that the fused op cannot express, or two layers that cannot be fused.
    Unsupported {
        /// The option, as its framework names it (e.g. `clip`, `input_forget`,
        /// `linear_before_reset`, `layers[1].d_hidden`).
        option: String,
        /// The value found.
        value: String,
        /// Why the fused op cannot express it, and what to do instead.
        reason: String,
    },
}

impl fmt::Display for InteropError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ctx = |c: &String| {
            if c.is_empty() {
                String::new()
            } else {
                format!(" ({c})")
            }
        };
        match self {
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Self::Shape {
                key,
                expected,
                got,
                context,
            } => write!(
                f,
                "{key}: expected shape {expected:?}, got {got:?}{}",
                ctx(context)
            ),
            Self::Missing {
                key,
                expected,
                context,
            } => match expected {
                Some(shape) => write!(
                    f,
                    "missing tensor {key}: expected a tensor of shape {shape:?}, got none{}",
                    ctx(context)
                ),
                None => write!(
                    f,
                    "missing tensor {key}: expected a tensor, got none{}",
                    ctx(context)
                ),
            },
            Self::Unexpected {
                key,
                shape,
                context,
            } => write!(
                f,
                "unexpected tensor {key}: expected no such tensor, got one of shape {shape:?}{}",
                ctx(context)
            ),
            Self::NotFinite { key, index, value } => write!(
                f,
                "{key}: expected finite weights, got {value} at index {index:?}"
            ),
            Self::Empty { argument, what } => {
                write!(f, "{argument}: expected at least one {what}, got none")
            }
            Self::Dtype { key, dtype } => {
                write!(f, "{key}: expected a float tensor, got dtype {dtype:?}")
            }
            Self::Unsupported {
                option,
                value,
                reason,
            } => write!(f, "unsupported {option} = {value}: {reason}"),
        }
    }
}

impl std::error::Error for InteropError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl InteropError {
    /// An [`InteropError::Unsupported`].
    pub(crate) fn unsupported(
        option: impl Into<String>,
        value: impl fmt::Debug,
        reason: impl Into<String>,
    ) -> Self {
        Self::Unsupported {
            option: option.into(),
            value: format!("{value:?}"),
            reason: reason.into(),
        }
    }

    /// An [`InteropError::Empty`].
    pub(crate) fn empty(argument: &str, what: &str) -> Self {
        Self::Empty {
            argument: argument.into(),
            what: what.into(),
        }
    }

    /// An [`InteropError::Shape`] without context.
    pub(crate) fn shape(key: impl Into<String>, expected: &[usize], got: &[usize]) -> Self {
        Self::Shape {
            key: key.into(),
            expected: expected.to_vec(),
            got: got.to_vec(),
            context: String::new(),
        }
    }
}
