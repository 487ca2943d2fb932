//! Weights in from other frameworks and out to them: burn-nn's layers ([`burn_nn`], as
//! [`FusedRnn::from_burn_nn`]), ONNX nodes ([`onnx`]), Keras layers ([`keras`]) and TF1
//! canonical checkpoints ([`tf1`]). PyTorch's `state_dict` needs no conversion: the
//! module's parameters have its names (Note [Parameter names] on [`FusedRnn`]), so
//! burn-store's `PytorchStore` and `SafetensorsStore` load it directly.
//!
//! | from / to | module | what it reorders |
//! |---|---|---|
//! | burn-nn `Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn`, `BiRnn` (one or a stack) | [`burn_nn`] | one `Linear` per gate → stacked gates, transposed |
//! | ONNX `LSTM`, `GRU`, `RNN` nodes (`W`, `R`, `B`) | [`onnx`] | LSTM `i, o, f, c`; GRU `z, r, h` |
//! | Keras / TF2 `LSTM`, `GRU`, `SimpleRNN`, `Bidirectional` | [`keras`] | kernels transposed; GRU `z, r, h`; one LSTM bias |
//! | TF1 `tf.contrib.cudnn_rnn` canonical checkpoints | [`tf1`] | `[W R]` kernels; LSTM `i, c, f, o`; summed biases |
//!
//! The ONNX, Keras and TF1 conversions are the core crate's (`burn_fused_rnn_core::interop`,
//! shared with the Burn 0.21 line, whose tests check them against ONNX's reference
//! evaluator, Keras 3 and a transcription of TF1's cells); this module reads Burn 0.22's
//! [`TensorData`] into them and builds the [`FusedRnn`] they describe. What each refuses,
//! and why: the core crate's Note [What conversions refuse] (clipping, coupled gates, other
//! activations, GRU "reset before", a lone reverse direction, peepholes, stacks that
//! differ), and Note [What the import refuses] in [`burn_nn`].
//!
//! An imported module holds its weights in the dtype of the format's first weight tensor
//! (ONNX `nodes[0].W`, Keras `layers[0].forward.kernel`, TF1 the first tensor read), on
//! `device`; an export writes each tensor in the module's dtype.

use std::cell::Cell;

use burn::tensor::{DType, Device, Tensor, TensorData};

use crate::config::FusedRnnConfig;
use crate::module::FusedRnn;
use crate::spec::RnnSpec;
use burn_fused_rnn_core::interop::{out_of_range, HostTensor, Imported};

pub mod burn_nn;
pub mod keras;
pub mod onnx;
pub mod tf1;

/// Why weights could not be converted, naming the tensor, option or argument at fault (the
/// core crate's error, shared with every conversion).
pub use burn_fused_rnn_core::interop::InteropError;
pub use burn_nn::BurnNnLayer;
#[doc(hidden)]
pub use burn_nn::LayerParts;

/// Reads format tensors into host arrays, remembering the dtype of the first one.
struct Reader {
    dtype: Cell<Option<DType>>,
}

impl Reader {
    fn new() -> Self {
        Self {
            dtype: Cell::new(None),
        }
    }

    /// `data` as a host array, refused when it holds no floats; `key` names it in errors.
    fn read(&self, key: &str, data: &TensorData) -> Result<HostTensor, InteropError> {
        let dtype = data.dtype();
        if !dtype.is_float() {
            return Err(InteropError::Dtype {
                key: key.into(),
                dtype: format!("{dtype:?}"),
            });
        }
        if self.dtype.get().is_none() {
            self.dtype.set(Some(dtype));
        }
        let values = data
            .clone()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .map_err(|e| {
                InteropError::unsupported(key, dtype, format!("unreadable data: {e:?}"))
            })?;
        Ok(HostTensor::new(data.shape().to_vec(), values))
    }

    /// The module `imported` describes, on `device`, in the dtype of the first tensor read.
    /// Refused when a weight does not fit that dtype (finite in `f64`, infinite in `f16`),
    /// naming the canonical tensor.
    fn build(&self, imported: Imported, device: &Device) -> Result<FusedRnn, InteropError> {
        let Imported {
            spec,
            batch_first,
            params,
        } = imported;
        let dtype = self.dtype.get().unwrap_or(DType::F32);
        let n = params.len();
        let data = TensorData::new(params, [n]).convert_dtype(dtype);
        if let Some(flat) = data.iter::<f64>().position(|v| !v.is_finite()) {
            let value = data.iter::<f64>().nth(flat).unwrap_or(f64::NAN);
            return Err(out_of_range(&spec, flat, value, &format!("{dtype:?}")));
        }
        let config = config_of(&spec, batch_first);
        Ok(config.init_with_params(Tensor::<1>::from_data(data, (device, dtype))))
    }
}

fn config_of(spec: &RnnSpec, batch_first: bool) -> FusedRnnConfig {
    FusedRnnConfig::new(spec.mode, spec.d_input, spec.d_hidden)
        .with_num_layers(spec.num_layers)
        .with_bidirectional(spec.bidirectional)
        .with_bias(spec.bias)
        .with_batch_first(batch_first)
}

/// The flat weights of `rnn` on the host, and their dtype (what exports write).
fn host_weights(rnn: &FusedRnn) -> (Vec<f64>, DType) {
    let flat = rnn.flat_weights().detach();
    let dtype = flat.dtype();
    let values = flat
        .into_data()
        .convert::<f64>()
        .try_into_vec::<f64>()
        .expect("float weights convert to f64");
    (values, dtype)
}

/// A host array as a tensor of `dtype`.
fn to_data(t: HostTensor, dtype: DType) -> TensorData {
    TensorData::new(t.values, t.shape).convert_dtype(dtype)
}
