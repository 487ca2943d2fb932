//! `Fusion<B>`: the fused op as ONE custom operation in Burn's fusion stream.
//!
//! `burn::backend::Wgpu` and `burn::backend::Cuda` are `Fusion<CubeBackend<..>>` under
//! Burn's default features, so this is the impl most GPU users run. Each method registers a
//! [`CustomOpIr`] whose execution calls the inner backend's method of the same name on the
//! inner primitives: on CUDA that is cuDNN, elsewhere the reference. The fusion stream
//! flushes the element-wise work queued before it, runs the op once, and treats its outputs
//! as ordinary tensors.
//!
//! # Note [Declared outputs]
//!
//! A custom op declares its outputs' shapes and dtypes when it is registered, before it
//! runs, and burn-fusion rebuilds the tensors it hands on from that declaration. The
//! outputs are `y`, `h_n` and (LSTM) `c_n` in the descriptor's shapes and the input's
//! dtype, then, for a training forward, the reserve as
//! [`FusedRnnBackend::fused_rnn_reserve_layout`] of the inner backend declares it; the
//! backward's are `dx`, `dh0`, (LSTM) `dc0` and the weight gradient. Optional inputs
//! (`h0`, `c0`, output gradients) are left out of the op's input list; which ones are
//! present travels with the op.
//!
//! The execution may come later, on another thread. Two things keep it to what was
//! declared:
//! - the settings the inner backend reads at each call (on CUDA, cuDNN's switch, algorithm
//!   and TF32, whose choice sets the reserve's length) are read once, at registration,
//!   carried in the op and pinned while it executes (Note [Pinned settings] in
//!   `crate::cudnn`), so that a setting changed in between cannot reach it;
//! - the execution compares the count, shape and dtype of every tensor the inner backend
//!   returned with the declaration, and panics naming the first mismatch instead of
//!   handing on a tensor whose buffer is not what its declared shape says.

use std::marker::PhantomData;

use burn::tensor::{DType, Shape, TensorMetadata};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};

use crate::backend::FusedRnnBackend;
use crate::descriptor::RnnDescriptor;
use crate::op_types::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};

type Handles<B> =
    HandleContainer<<<B as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle>;
type Tensor<B> = FusionTensor<<B as FusionBackend>::FusionRuntime>;

/// Which optional tensors an op carries (Note [Declared outputs]).
#[derive(Debug, Clone, Copy)]
struct Present {
    h0: bool,
    c0: bool,
    c_n: bool,
    dy: bool,
    dh_n: bool,
    dc_n: bool,
}

/// The process-wide settings an inner backend reads at each call, as they were when an op
/// was registered (Note [Declared outputs]). Only cuDNN has any.
#[derive(Debug, Clone, Copy)]
struct Settings {
    #[cfg(feature = "cuda")]
    cudnn: crate::cudnn::CallSettings,
}

impl Settings {
    fn now() -> Self {
        Self {
            #[cfg(feature = "cuda")]
            cudnn: crate::cudnn::CallSettings::current(),
        }
    }

    /// Runs `f` under these settings.
    fn apply<R>(self, f: impl FnOnce() -> R) -> R {
        #[cfg(feature = "cuda")]
        return self.cudnn.pin(f);
        #[cfg(not(feature = "cuda"))]
        f()
    }
}

#[derive(Debug)]
struct ForwardOp<B> {
    ir: CustomOpIr,
    desc: RnnDescriptor,
    present: Present,
    training: bool,
    settings: Settings,
    _backend: PhantomData<fn() -> B>,
}

#[derive(Debug)]
struct BackwardOp<B> {
    ir: CustomOpIr,
    desc: RnnDescriptor,
    present: Present,
    reserve_len: usize,
    settings: Settings,
    _backend: PhantomData<fn() -> B>,
}

/// Reads the op's inputs in order.
struct Reader<'a, B: FusionBackend> {
    handles: &'a mut Handles<B>,
    inputs: std::slice::Iter<'a, TensorIr>,
}

impl<B: FusionBackend> Reader<'_, B> {
    fn next(&mut self) -> B::FloatTensorPrimitive {
        let ir = self
            .inputs
            .next()
            .expect("the custom op holds every input it declared");
        self.handles.get_float_tensor::<B>(ir)
    }

    fn next_if(&mut self, present: bool) -> Option<B::FloatTensorPrimitive> {
        present.then(|| self.next())
    }
}

/// Panics unless the tensors an op's execution returned (`names`, shapes and dtypes) are
/// the ones it declared at registration, in count, shape and dtype (Note [Declared
/// outputs]).
fn check_declared(op: &str, names: &[String], declared: &[(Shape, DType)], got: &[(Shape, DType)]) {
    assert!(
        got.len() == declared.len(),
        "expected {op} to return the {} tensors it declared ({}), got {}: a setting the inner backend reads changed between registration and execution, or the backend declares its outputs wrongly",
        declared.len(),
        names.join(", "),
        got.len()
    );
    for ((name, (shape, dtype)), (got_shape, got_dtype)) in names.iter().zip(declared).zip(got) {
        assert!(
            shape == got_shape && dtype == got_dtype,
            "expected {op}'s {name} of shape {:?} and dtype {dtype:?}, as declared at registration, got shape {:?} and dtype {got_dtype:?}",
            shape.as_slice(),
            got_shape.as_slice()
        );
    }
}

/// Checks the tensors against the op's declaration, then registers them as its outputs.
fn register_outputs<B: FusionBackend>(
    handles: &mut Handles<B>,
    op: &str,
    names: &[String],
    outputs: &[TensorIr],
    tensors: Vec<B::FloatTensorPrimitive>,
) {
    let declared: Vec<(Shape, DType)> = outputs
        .iter()
        .map(|ir| (ir.shape.clone(), ir.dtype))
        .collect();
    let got: Vec<(Shape, DType)> = tensors.iter().map(|t| (t.shape(), t.dtype())).collect();
    check_declared(op, names, &declared, &got);
    for (ir, tensor) in outputs.iter().zip(tensors) {
        handles.register_float_tensor::<B>(&ir.id, tensor);
    }
}

/// The names of a forward's outputs, in declaration order.
fn forward_names(cell: bool, reserve: usize) -> Vec<String> {
    let mut names = vec!["y".to_string(), "h_n".to_string()];
    if cell {
        names.push("c_n".into());
    }
    names.extend((0..reserve).map(|i| format!("reserve[{i}]")));
    names
}

/// The names of a backward's outputs, in declaration order.
fn backward_names(cell: bool) -> Vec<String> {
    let mut names = vec!["dx".to_string(), "dh0".to_string()];
    if cell {
        names.push("dc0".into());
    }
    names.push("dweights".into());
    names
}

fn read_inputs<B: FusionBackend>(reader: &mut Reader<'_, B>, present: Present) -> RnnInputs<B> {
    let x = reader.next();
    let h0 = reader.next_if(present.h0);
    let c0 = reader.next_if(present.c0);
    let weights = reader.next();
    RnnInputs { x, h0, c0, weights }
}

impl<B: FusionBackend + FusedRnnBackend> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let mut reader = Reader::<B> {
            handles,
            inputs: self.ir.inputs.iter(),
        };
        let inputs = read_inputs(&mut reader, self.present);
        let handles = reader.handles;
        let (out, reserve) = self.settings.apply(|| {
            if self.training {
                let (out, reserve) = B::fused_rnn_forward_training(&self.desc, inputs);
                (out, reserve.tensors)
            } else {
                (B::fused_rnn_forward(&self.desc, inputs), Vec::new())
            }
        });
        let cell = out.c_n.is_some();
        let names = forward_names(cell, reserve.len());
        let tensors: Vec<_> = [out.y, out.h_n]
            .into_iter()
            .chain(out.c_n)
            .chain(reserve)
            .collect();
        register_outputs::<B>(handles, &self.ir.id, &names, &self.ir.outputs, tensors);
    }
}

impl<B: FusionBackend + FusedRnnBackend> Operation<B::FusionRuntime> for BackwardOp<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let mut reader = Reader::<B> {
            handles,
            inputs: self.ir.inputs.iter(),
        };
        let inputs = read_inputs(&mut reader, self.present);
        let output = RnnOutput {
            y: reader.next(),
            h_n: reader.next(),
            c_n: reader.next_if(self.present.c_n),
        };
        let reserve = RnnReserve {
            tensors: (0..self.reserve_len).map(|_| reader.next()).collect(),
        };
        let grads = RnnOutputGrads {
            dy: reader.next_if(self.present.dy),
            dh_n: reader.next_if(self.present.dh_n),
            dc_n: reader.next_if(self.present.dc_n),
        };
        let handles = reader.handles;
        let RnnGrads {
            dx,
            dh0,
            dc0,
            dweights,
        } = self
            .settings
            .apply(|| B::fused_rnn_backward(&self.desc, inputs, output, reserve, grads));
        let names = backward_names(dc0.is_some());
        let tensors: Vec<_> = [dx, dh0].into_iter().chain(dc0).chain([dweights]).collect();
        register_outputs::<B>(handles, &self.ir.id, &names, &self.ir.outputs, tensors);
    }
}

fn uninit<B: FusionBackend>(x: &Tensor<B>, shape: Vec<usize>, dtype: DType) -> TensorIr {
    TensorIr::uninit(x.client.create_empty_handle(), Shape::from(shape), dtype)
}

/// The forward's declared outputs (Note [Declared outputs]).
fn forward_outputs<B: FusionBackend + FusedRnnBackend>(
    desc: &RnnDescriptor,
    x: &Tensor<B>,
    training: bool,
    settings: Settings,
) -> Vec<TensorIr> {
    let dtype = x.dtype();
    let mut outs = vec![
        uninit::<B>(x, desc.output_shape().to_vec(), dtype),
        uninit::<B>(x, desc.hidden_shape().to_vec(), dtype),
    ];
    if desc.spec.mode.has_cell_state() {
        outs.push(uninit::<B>(x, desc.cell_shape().to_vec(), dtype));
    }
    if training {
        let device = x.client.device().clone();
        let layout = settings.apply(|| B::fused_rnn_reserve_layout(desc, dtype, &device));
        for (shape, reserve_dtype) in layout {
            outs.push(uninit::<B>(x, shape, reserve_dtype));
        }
    }
    outs
}

fn register_forward<B: FusionBackend + FusedRnnBackend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<Fusion<B>>,
    training: bool,
) -> (RnnOutput<Fusion<B>>, Vec<Tensor<B>>) {
    let present = Present {
        h0: inputs.h0.is_some(),
        c0: inputs.c0.is_some(),
        c_n: false,
        dy: false,
        dh_n: false,
        dc_n: false,
    };
    let client = inputs.x.client.clone();
    let settings = Settings::now();
    let outputs = forward_outputs::<B>(desc, &inputs.x, training, settings);
    let tensors: Vec<Tensor<B>> = [Some(inputs.x), inputs.h0, inputs.c0, Some(inputs.weights)]
        .into_iter()
        .flatten()
        .collect();
    let streams = OperationStreams::with_inputs(tensors.iter());
    let ir_inputs: Vec<TensorIr> = tensors.into_iter().map(FusionTensor::into_ir).collect();
    let ir = CustomOpIr::new("fused_rnn_forward", &ir_inputs, &outputs);
    let op = ForwardOp::<B> {
        ir: ir.clone(),
        desc: desc.clone(),
        present,
        training,
        settings,
        _backend: PhantomData,
    };
    let mut outs = client
        .register(streams, OperationIr::Custom(ir), op)
        .into_iter();
    let y = outs.next().expect("declared y");
    let h_n = outs.next().expect("declared h_n");
    let c_n = desc
        .spec
        .mode
        .has_cell_state()
        .then(|| outs.next().expect("declared c_n"));
    (RnnOutput { y, h_n, c_n }, outs.collect())
}

impl<B: FusionBackend + FusedRnnBackend> FusedRnnBackend for Fusion<B> {
    fn fused_rnn_forward(desc: &RnnDescriptor, inputs: RnnInputs<Self>) -> RnnOutput<Self> {
        register_forward::<B>(desc, inputs, false).0
    }

    fn fused_rnn_forward_training(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
    ) -> (RnnOutput<Self>, RnnReserve<Self>) {
        let (out, reserve) = register_forward::<B>(desc, inputs, true);
        (out, RnnReserve { tensors: reserve })
    }

    fn fused_rnn_reserve_layout(
        desc: &RnnDescriptor,
        dtype: DType,
        device: &Self::Device,
    ) -> Vec<(Vec<usize>, DType)> {
        B::fused_rnn_reserve_layout(desc, dtype, device)
    }

    fn fused_rnn_backward(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
        output: RnnOutput<Self>,
        reserve: RnnReserve<Self>,
        grads: RnnOutputGrads<Self>,
    ) -> RnnGrads<Self> {
        let present = Present {
            h0: inputs.h0.is_some(),
            c0: inputs.c0.is_some(),
            c_n: output.c_n.is_some(),
            dy: grads.dy.is_some(),
            dh_n: grads.dh_n.is_some(),
            dc_n: grads.dc_n.is_some(),
        };
        let x = inputs.x;
        let client = x.client.clone();
        let dtype = x.dtype();
        let has_cell = desc.spec.mode.has_cell_state();
        let mut outputs = vec![
            uninit::<B>(&x, desc.input_shape().to_vec(), dtype),
            uninit::<B>(&x, desc.hidden_shape().to_vec(), dtype),
        ];
        if has_cell {
            outputs.push(uninit::<B>(&x, desc.cell_shape().to_vec(), dtype));
        }
        outputs.push(uninit::<B>(&x, vec![desc.params_size()], dtype));

        let reserve_len = reserve.tensors.len();
        let tensors: Vec<Tensor<B>> = [Some(x), inputs.h0, inputs.c0, Some(inputs.weights)]
            .into_iter()
            .chain([Some(output.y), Some(output.h_n), output.c_n])
            .flatten()
            .chain(reserve.tensors)
            .chain([grads.dy, grads.dh_n, grads.dc_n].into_iter().flatten())
            .collect();
        let streams = OperationStreams::with_inputs(tensors.iter());
        let ir_inputs: Vec<TensorIr> = tensors.into_iter().map(FusionTensor::into_ir).collect();
        let ir = CustomOpIr::new("fused_rnn_backward", &ir_inputs, &outputs);
        let op = BackwardOp::<B> {
            ir: ir.clone(),
            desc: desc.clone(),
            present,
            reserve_len,
            settings: Settings::now(),
            _backend: PhantomData,
        };
        let mut outs = client
            .register(streams, OperationIr::Custom(ir), op)
            .into_iter();
        let dx = outs.next().expect("declared dx");
        let dh0 = outs.next().expect("declared dh0");
        let dc0 = has_cell.then(|| outs.next().expect("declared dc0"));
        let dweights = outs.next().expect("declared dweights");
        RnnGrads {
            dx,
            dh0,
            dc0,
            dweights,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(dims: &[usize]) -> Shape {
        Shape::from(dims.to_vec())
    }

    /// An LSTM training forward's declaration: y, h_n, c_n, a 1-D reserve.
    fn declared() -> Vec<(Shape, DType)> {
        vec![
            (s(&[5, 2, 3]), DType::F32),
            (s(&[1, 2, 3]), DType::F32),
            (s(&[1, 2, 3]), DType::F32),
            (s(&[104]), DType::F32),
        ]
    }

    fn check(got: &[(Shape, DType)]) -> Result<(), String> {
        let names = forward_names(true, 1);
        std::panic::catch_unwind(|| check_declared("fused_rnn_forward", &names, &declared(), got))
            .map_err(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "a panic without a message".into())
            })
    }

    #[test]
    fn the_declared_outputs_pass_the_check() {
        assert_eq!(check(&declared()), Ok(()));
        assert_eq!(
            forward_names(true, 1),
            ["y", "h_n", "c_n", "reserve[0]"],
            "one name per declared output"
        );
        assert_eq!(backward_names(false), ["dx", "dh0", "dweights"]);
    }

    #[test]
    fn another_count_shape_or_dtype_than_declared_panics_naming_it() {
        // A reserve of another algorithm (another tag in its length).
        let mut reserve = declared();
        reserve[3].0 = s(&[106]);
        let e = check(&reserve).unwrap_err();
        assert!(
            e.contains("expected fused_rnn_forward's reserve[0] of shape [104] and dtype F32, as declared at registration, got shape [106] and dtype F32"),
            "{e}"
        );
        // The reference's reserve (several tensors) where cuDNN's was declared.
        let mut more = declared();
        more.push((s(&[5, 2, 12]), DType::F32));
        let e = check(&more).unwrap_err();
        assert!(
            e.contains("expected fused_rnn_forward to return the 4 tensors it declared (y, h_n, c_n, reserve[0]), got 5"),
            "{e}"
        );
        let e = check(&declared()[..3]).unwrap_err();
        assert!(e.contains("got 3"), "{e}");
        let mut dtype = declared();
        dtype[1].1 = DType::F16;
        let e = check(&dtype).unwrap_err();
        assert!(
            e.contains("expected fused_rnn_forward's h_n of shape [1, 2, 3] and dtype F32, as declared at registration, got shape [1, 2, 3] and dtype F16"),
            "{e}"
        );
    }
}
