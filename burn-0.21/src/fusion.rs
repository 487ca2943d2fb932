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
//! backward's are `dx` (when wanted, `GradsWanted`), `dh0`, (LSTM) `dc0` and the weight
//! gradient (when wanted). Optional inputs (`h0`, `c0`, output gradients) are left out of
//! the op's input list; which ones are present travels with the op.
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
use burn_fused_rnn_core::declared::{
    backward_names, backward_outputs, check_declared, forward_names,
};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};

use crate::backend::FusedRnnBackend;
use crate::descriptor::{GradsWanted, RnnDescriptor};
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
    /// The gradients declared as outputs (the others are not computed where the inner
    /// backend can skip them).
    wanted: GradsWanted,
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

/// Checks the tensors against the op's declaration, then registers them as its outputs.
fn register_outputs<B: FusionBackend>(
    handles: &mut Handles<B>,
    op: &str,
    names: &[String],
    outputs: &[TensorIr],
    tensors: Vec<B::FloatTensorPrimitive>,
) {
    let declared: Vec<(Vec<usize>, DType)> = outputs
        .iter()
        .map(|ir| (ir.shape.as_slice().to_vec(), ir.dtype))
        .collect();
    let got: Vec<(Vec<usize>, DType)> = tensors
        .iter()
        .map(|t| (t.shape().as_slice().to_vec(), t.dtype()))
        .collect();
    // A panic: burn-fusion 0.21's operations cannot fail (Note [Declared outputs]).
    if let Err(e) = check_declared(op, names, &declared, &got) {
        panic!("{e}");
    }
    for (ir, tensor) in outputs.iter().zip(tensors) {
        handles.register_float_tensor::<B>(&ir.id, tensor);
    }
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
        } = self.settings.apply(|| {
            B::fused_rnn_backward(&self.desc, inputs, output, reserve, grads, self.wanted)
        });
        let names = backward_names(dc0.is_some(), self.wanted);
        let tensors = backward_outputs(self.wanted, dx, dh0, dc0, dweights);
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
        wanted: GradsWanted,
    ) -> RnnGrads<Self> {
        // Only the wanted gradients are declared as the op's outputs (and computed where
        // the inner backend skips the others).
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
        let mut outputs = Vec::with_capacity(4);
        if wanted.x {
            outputs.push(uninit::<B>(&x, desc.input_shape().to_vec(), dtype));
        }
        outputs.push(uninit::<B>(&x, desc.hidden_shape().to_vec(), dtype));
        if has_cell {
            outputs.push(uninit::<B>(&x, desc.cell_shape().to_vec(), dtype));
        }
        if wanted.weights {
            outputs.push(uninit::<B>(&x, vec![desc.params_size()], dtype));
        }

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
            wanted,
            settings: Settings::now(),
            _backend: PhantomData,
        };
        let mut outs = client
            .register(streams, OperationIr::Custom(ir), op)
            .into_iter();
        let dx = wanted.x.then(|| outs.next().expect("declared dx"));
        let dh0 = outs.next().expect("declared dh0");
        let dc0 = has_cell.then(|| outs.next().expect("declared dc0"));
        let dweights = wanted
            .weights
            .then(|| outs.next().expect("declared dweights"));
        RnnGrads {
            dx,
            dh0,
            dc0,
            dweights,
        }
    }
}
