//! cuDNN's descriptors of a network and of a call shape: host-only calls (no handle, no
//! device memory), so cuDNN's acceptance of them is testable without a GPU.
//!
//! # Precision
//!
//! F32 uses FMA math (no TF32) unless `set_tf32` switches TF32 on; F16 and BF16 store in
//! half precision and compute in F32 (`mathPrec = FLOAT`, tensor-op math); F64 is F64.

use std::ffi::c_int;

use burn::tensor::DType;
use cudarc::cudnn::sys;

use super::algorithm::Algo;
use super::ffi::{self, int, CudnnError, DropoutDesc, Error, RnnDataDesc, RnnDesc, TensorDesc};
use crate::descriptor::RnnDescriptor;
use crate::spec::{RnnMode, RnnSpec};

/// `CUDNN_RNN_PADDED_IO_ENABLED`: a `#define` cudarc does not export.
const PADDED_IO_ENABLED: u32 = 1;

/// (data type, math precision, math type) for a dtype.
pub(crate) fn data_types(
    dtype: DType,
    tf32: bool,
) -> Option<(
    sys::cudnnDataType_t,
    sys::cudnnDataType_t,
    sys::cudnnMathType_t,
)> {
    use sys::cudnnDataType_t::*;
    use sys::cudnnMathType_t::*;
    Some(match dtype {
        DType::F32 if tf32 => (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH),
        DType::F32 => (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH),
        DType::F64 => (CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH),
        // PyTorch's choices: half data with F32 math on tensor cores.
        DType::F16 => (CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
        // cuDNN's RNN documentation does not list BF16: the probe decides (`cache`).
        DType::BF16 => (CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH),
        _ => return None,
    })
}

/// The RNN descriptor of a network run by `algo`.
pub(crate) fn rnn_descriptor(
    spec: &RnnSpec,
    dtype: DType,
    tf32: bool,
    algo: Algo,
    dropout: &DropoutDesc,
) -> Result<RnnDesc, Error> {
    use sys::cudnnDirectionMode_t::*;
    use sys::cudnnRNNBiasMode_t::*;
    use sys::cudnnRNNInputMode_t::*;
    use sys::cudnnRNNMode_t::*;
    let (data_type, math_prec, math_type) = data_types(dtype, tf32).ok_or(Error::Dtype(dtype))?;
    let rnn = RnnDesc::new()?;
    let params = ffi::RnnParams {
        algo: algo.raw(),
        cell: match spec.mode {
            RnnMode::Lstm => CUDNN_LSTM,
            RnnMode::Gru => CUDNN_GRU,
            RnnMode::RnnTanh => CUDNN_RNN_TANH,
            RnnMode::RnnRelu => CUDNN_RNN_RELU,
        },
        bias: if spec.bias {
            CUDNN_RNN_DOUBLE_BIAS
        } else {
            CUDNN_RNN_NO_BIAS
        },
        direction: if spec.bidirectional {
            CUDNN_BIDIRECTIONAL
        } else {
            CUDNN_UNIDIRECTIONAL
        },
        input_mode: if spec.skip_input {
            CUDNN_SKIP_INPUT
        } else {
            CUDNN_LINEAR_INPUT
        },
        data_type,
        math_prec,
        math_type,
        input_size: int(spec.d_input, "d_input")?,
        hidden_size: int(spec.d_hidden, "d_hidden")?,
        proj_size: int(spec.d_state(), "P")?,
        num_layers: int(spec.num_layers, "num_layers")?,
        aux_flags: PADDED_IO_ENABLED,
    };
    ffi::set_rnn_descriptor(&rnn, &params, dropout)?;
    Ok(rnn)
}

/// The data descriptors of one call shape and its host sequence lengths.
pub(crate) struct CallDescriptors {
    pub x: RnnDataDesc,
    pub y: RnnDataDesc,
    pub h: TensorDesc,
    pub c: TensorDesc,
    pub seq_lengths: Vec<c_int>,
}

/// The data descriptors of one call shape. A batch-first call uses cuDNN's batch-major
/// layout on the tensors as they are: no transpose or copy (PyTorch transposes batch-first
/// input to sequence-major and copies it).
pub(crate) fn call_descriptors(
    desc: &RnnDescriptor,
    data_type: sys::cudnnDataType_t,
) -> Result<CallDescriptors, Error> {
    use sys::cudnnRNNDataLayout_t::*;
    let spec = &desc.spec;
    let seq_lengths = (0..desc.batch_size)
        .map(|b| int(desc.seq_length_of(b), "a sequence length"))
        .collect::<Result<Vec<c_int>, Error>>()?;
    let layout = if desc.batch_first {
        CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED
    } else {
        CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED
    };
    let seq_length = int(desc.seq_length, "seq_length")?;
    let mut zero = [0u8; 8];
    let mut data = |vector_size: usize, what: &'static str| -> Result<RnnDataDesc, Error> {
        let d = RnnDataDesc::new()?;
        let vector_size = int(vector_size, what)?;
        ffi::set_rnn_data(
            &d,
            data_type,
            layout,
            seq_length,
            &seq_lengths,
            vector_size,
            &mut zero,
        )?;
        Ok(d)
    };
    let x = data(spec.d_input, "d_input")?;
    let y = data(spec.output_size(), "D*P")?;
    let state_desc = |shape: [usize; 3]| -> Result<TensorDesc, Error> {
        let [a, b, c] = shape;
        let dims = [
            int(a, "L*D")?,
            int(b, "batch_size")?,
            int(c, "the state size")?,
        ];
        let strides = [int(b * c, "a state stride")?, dims[2], 1];
        let t = TensorDesc::new()?;
        ffi::set_tensor_3d(&t, data_type, dims, strides)?;
        Ok(t)
    };
    let h = state_desc(desc.hidden_shape())?;
    let c = state_desc(desc.cell_shape())?;
    Ok(CallDescriptors {
        x,
        y,
        h,
        c,
        seq_lengths,
    })
}

/// Elements of a tensor descriptor cuDNN filled (0 for a descriptor with no dims).
pub(crate) fn tensor_len(desc: &TensorDesc) -> Result<usize, CudnnError> {
    let dims = ffi::tensor_dims(desc)?;
    if dims.is_empty() {
        return Ok(0);
    }
    Ok(dims.iter().map(|&d| d.max(0) as usize).product())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FusedRnnConfig;
    use crate::cudnn::algorithm::{refusal, RnnAlgorithm};

    /// cuDNN (the real library, host side: no GPU needed) accepts the RNN and data
    /// descriptors this crate builds for every parity case in every dtype and math mode
    /// with the standard algorithm; for each persistent algorithm it accepts or refuses
    /// the RNN descriptor exactly where this crate's rules (`algorithm::refusal`) say it
    /// does, so a configuration the rules let through is not refused for a reason they
    /// miss, and a refusal they predict is real; and it refuses a projection wider than
    /// the hidden size, so its checks are live. Needs a loadable libcudnn 9 (README,
    /// "GPU"); CI has none and prints SKIPPED.
    ///
    /// cuDNN checks more only with a GPU (hidden and batch sizes of the persistent
    /// kernels: `cudnnCreate` fails without a device); the GPU tests and the probes cover
    /// that.
    #[cfg(feature = "testing")]
    #[test]
    fn cudnn_accepts_every_descriptor_of_the_parity_suite() {
        if let Err(why) = crate::cudnn::cudnn_version() {
            eprintln!("SKIPPED cudnn_accepts_every_descriptor_of_the_parity_suite: {why}");
            return;
        }
        let dropout = DropoutDesc::new().unwrap();
        let dtypes = [
            (DType::F32, false),
            (DType::F32, true),
            (DType::F64, false),
            (DType::F16, false),
            (DType::BF16, false),
        ];
        // The one import that runs back up the layering (test code only): the descriptors
        // are checked on the very cases the parity suite runs, so that the two cannot drift.
        let cases = crate::testing::parity_cases();
        let (mut checked, mut persistent_accepted, mut persistent_refused) = (0, 0, 0);
        for case in &cases {
            let desc = case.descriptor();
            for (dtype, tf32) in dtypes {
                let name = format!("{} {dtype:?} tf32={tf32}", case.name());
                rnn_descriptor(&desc.spec, dtype, tf32, Algo::Standard, &dropout)
                    .unwrap_or_else(|e| panic!("{name}: RNN descriptor: {e}"));
                let (data_type, ..) = data_types(dtype, tf32).unwrap();
                call_descriptors(&desc, data_type)
                    .unwrap_or_else(|e| panic!("{name}: data descriptors: {e}"));
                checked += 1;
                for algorithm in &RnnAlgorithm::CONCRETE[1..] {
                    let algo = Algo::of(*algorithm).unwrap();
                    // Lengths are a property of the call, not of the RNN descriptor.
                    let predicted = refusal(algo, &desc.spec, dtype, false, None);
                    let got = rnn_descriptor(&desc.spec, dtype, tf32, algo, &dropout);
                    let not_supported = |e: &Error| {
                        matches!(
                            e,
                            Error::Cudnn {
                                error: CudnnError {
                                    call: "cudnnSetRNNDescriptor_v8",
                                    status: sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED,
                                },
                                ..
                            }
                        )
                    };
                    match (predicted, got) {
                        (None, Ok(_)) => persistent_accepted += 1,
                        (Some(_), Err(e)) if not_supported(&e) => persistent_refused += 1,
                        (predicted, got) => panic!(
                            "{name} with {algorithm}: expected {}, got {}",
                            predicted.map_or("acceptance".into(), |r| format!("a refusal ({r})")),
                            got.map_or_else(|e| format!("a refusal: {e}"), |_| "acceptance".into())
                        ),
                    }
                }
            }
        }
        assert_eq!(checked, dtypes.len() * cases.len());
        // Both outcomes occur, so the comparison above is not vacuous.
        assert!(persistent_accepted > 0 && persistent_refused > 0);
        let mut wide = FusedRnnConfig::new(RnnMode::Lstm, 4, 4)
            .with_proj_size(Some(3))
            .spec();
        wide.proj_size = Some(5);
        let err = rnn_descriptor(&wide, DType::F32, false, Algo::Standard, &dropout).err();
        assert!(
            matches!(
                err,
                Some(Error::Cudnn {
                    error: CudnnError {
                        call: "cudnnSetRNNDescriptor_v8",
                        ..
                    },
                    ..
                })
            ),
            "expected cuDNN to refuse a projection wider than the hidden size, got {err:?}"
        );
    }
}
