//! [`InteropError`]: why weights could not be converted, naming the tensor or option at
//! fault.

use core::fmt;

/// Why a conversion failed. Each variant names the tensor (`nodes[1].W`), the option
/// (`layers[0].reset_after`) or the argument at fault, with what was expected and what was
/// found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InteropError {
    /// A tensor of the wrong shape.
    Shape {
        /// The tensor, as the source names it.
        key: String,
        /// The shape it must have.
        expected: Vec<usize>,
        /// The shape it has.
        got: Vec<usize>,
        /// More about why (may be empty).
        context: String,
    },
    /// A tensor the configuration needs and the source lacks.
    Missing {
        /// The tensor, as the source would name it.
        key: String,
        /// Its shape, when known.
        expected: Option<Vec<usize>>,
        /// More about why, and the tensors that were found (may be empty).
        context: String,
    },
    /// A tensor the configuration has no place for.
    Unexpected {
        /// The tensor, as the source names it.
        key: String,
        /// Its shape.
        shape: Vec<usize>,
        /// Why there is no place for it, and the tensors found.
        context: String,
    },
    /// A weight that is NaN or infinite.
    NotFinite {
        /// The tensor, as the source names it.
        key: String,
        /// The element's index in the tensor.
        index: Vec<usize>,
        /// The element.
        value: f64,
    },
    /// A list of layers or nodes that is empty.
    Empty {
        /// The argument (`nodes`, `layers`).
        argument: String,
        /// What it lists (`ONNX node`).
        what: String,
    },
    /// A tensor that holds no floats.
    Dtype {
        /// The tensor, as the source names it.
        key: String,
        /// Its dtype, as the front-end names it.
        dtype: String,
    },
    /// An option the fused op cannot express (Note [What conversions refuse] in
    /// [`crate::interop`]), or layers that cannot be fused into one module.
    Unsupported {
        /// The option, under its layer's path (`nodes[1].clip`).
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
                expected: Some(shape),
                context,
            } => write!(
                f,
                "missing tensor {key}: expected a tensor of shape {shape:?}, got none{}",
                ctx(context)
            ),
            Self::Missing {
                key,
                expected: None,
                context,
            } => write!(
                f,
                "missing tensor {key}: expected a tensor, got none{}",
                ctx(context)
            ),
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
                write!(f, "{key}: expected a float tensor, got dtype {dtype}")
            }
            Self::Unsupported {
                option,
                value,
                reason,
            } => write!(f, "unsupported {option} = {value}: {reason}"),
        }
    }
}

impl std::error::Error for InteropError {}

impl InteropError {
    /// [`InteropError::Unsupported`], the value written with `Debug`.
    pub fn unsupported(
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

    /// [`InteropError::Empty`].
    pub fn empty(argument: &str, what: &str) -> Self {
        Self::Empty {
            argument: argument.into(),
            what: what.into(),
        }
    }

    /// [`InteropError::Shape`] without context.
    pub fn shape(key: impl Into<String>, expected: &[usize], got: &[usize]) -> Self {
        Self::Shape {
            key: key.into(),
            expected: expected.to_vec(),
            got: got.to_vec(),
            context: String::new(),
        }
    }
}
