//! The Burn-free core of burn-fused-rnn: everything about a fused recurrent op that does
//! not name a tensor library, shared by the Burn front-ends (one crate per Burn version).
//!
//! - [`spec`]: what the network is ([`RnnMode`], [`InputMode`], [`RnnSpec`]);
//! - [`layout`]: the canonical weights (PyTorch's names, shapes and flat order, which are
//!   cuDNN's), with checked sizes;
//! - [`descriptor`]: one call ([`RnnDescriptor`]: spec, lengths, layout, dropout) and
//!   the sizes every implementation plans from;
//! - [`semantics`]: what every implementation computes at padded steps, in half
//!   precision, with lengths of 0 (notes only);
//! - [`host`]: what the host can allocate (Note [Host memory ceiling]);
//! - [`random`] and [`dropout`]: the crate's one seeded generator and the dropout masks
//!   every implementation draws bit for bit;
//! - [`reserve`]: the tag that names which implementation wrote a training reserve;
//! - [`gates`]: the gate orders of PyTorch/cuDNN, ONNX, Keras and TF1, and the reordering;
//! - [`interop`]: ONNX, Keras and TF1 weights to and from canonical weights, on the host;
//! - [`checksum`]: the checksum of the weights that checkpoints carry;
//! - [`parity`]: the engine of the front-ends' backend-parity suites (the grid of cases,
//!   their inputs, tolerances and the comparison);
//! - [`cpu`] (feature `cpu-kernel`, on by default): the native CPU kernel on slices,
//!   forward, backward and one-step calls, at every SIMD level;
//! - [`cube`]: the host side of the front-ends' CubeCL kernels (plan, tiles, reserve
//!   shapes, masks), without a device;
//! - [`declared`]: the outputs a fused custom op declares, and the check of what it
//!   returned.
//!
//! Nothing here depends on `burn` or `cubecl` (CI checks the dependency tree). Users add
//! a front-end, `burn-fused-rnn`, which re-exports what they need from here.
//!
//! ```
//! use burn_fused_rnn_core::{RnnLayout, RnnMode, RnnSpec};
//!
//! let spec = RnnSpec { num_layers: 2, bidirectional: true, ..RnnSpec::new(RnnMode::Lstm, 3, 5) };
//! let layout = RnnLayout::new(spec);
//! // Per pseudo-layer: W_ih [20, in], W_hh [20, 5], b_ih [20], b_hh [20].
//! assert_eq!(layout.params_size(), 2 * (20 * 3 + 20 * 5 + 40) + 2 * (20 * 10 + 20 * 5 + 40));
//! assert_eq!(layout.entries()[0].name(), "weight_ih_l0");
//! ```
#![warn(missing_docs)]

pub mod checksum;
#[cfg(feature = "cpu-kernel")]
pub mod cpu;
pub mod cube;
pub mod declared;
pub mod descriptor;
pub mod dropout;
pub mod gates;
pub mod host;
pub mod interop;
pub mod layout;
pub mod memo;
pub mod parity;
pub mod random;
pub mod reserve;
pub mod semantics;
pub mod spec;

pub use descriptor::{DropoutSpec, GradsWanted, RnnDescriptor};
pub use layout::{params_size, ParamKind, RnnLayout};
pub use spec::{InputMode, RnnMode, RnnSpec};
