//! The CubeCL kernels under Fusion (feature `fusion`): each call is ONE custom operation
//! in Burn's fusion stream.
//!
//! With Burn's `fusion` feature, dispatch's CubeCL backend is `Fusion<CubeBackend>`, so this
//! is what a Wgpu user with fusion runs. A forward or backward registers a `CustomOpIr`
//! whose execution reads the inner `CubeBackend` tensors from the stream's handles and runs
//! the kernels' forward or backward on them (the [`FusedKernel`] impl of `CubeBackend` in
//! `super`). The stream flushes the element-wise work queued before the op, runs it once,
//! and treats its outputs as ordinary tensors, which Fusion may fuse into what follows.
//!
//! # Note [Declared outputs]
//!
//! A custom op declares its outputs' shapes and dtypes when it is registered, before it
//! runs, and Fusion builds the tensors it hands on from that declaration. A forward's
//! outputs are `y`, `h_n` and (LSTM) `c_n` in the descriptor's shapes and the input's
//! dtype, then, for a training forward, the reserve (Note [Cube reserve] in `super`: `F32`
//! tensors whose shapes follow from the descriptor alone); a backward's are `dx` (when
//! wanted, Note [Cube gradients not wanted] in `super`), `dh0`, (LSTM) `dc0` and the weight
//! gradient (when wanted). Output gradients that are zero (`None`) are left
//! out of the backward's inputs; which ones are present travels with the op. The
//! execution compares the count, shape and dtype of every tensor the kernels returned with
//! the declaration and fails the op naming the first mismatch, instead of handing on a
//! tensor whose buffer is not what its declared shape says.

use burn::backend::{DType, Shape, TensorMetadata};
use burn_cubecl::CubeBackend;
use burn_fusion::custom::{
    CustomOpIr, HandleContainer, Operation, OperationIr, StreamId, TensorIr,
};
use burn_fusion::{ExecutionError, Fusion, FusionBackend, FusionRuntime, FusionTensor};

use burn_fused_rnn_core::declared::{
    backward_names, backward_outputs, check_declared, forward_names,
};

use crate::descriptor::RnnDescriptor;
use crate::prims::{FusedKernel, Grads, Inputs, Outputs};
use burn_fused_rnn_core::GradsWanted;

type Runtime = <CubeBackend as FusionBackend>::FusionRuntime;
type Handles = HandleContainer<<Runtime as FusionRuntime>::FusionHandle>;
type Lazy = FusionTensor<Runtime>;
type Inner = burn_cubecl::tensor::CubeTensor;

/// Which output gradients a backward carries (Note [Declared outputs]).
#[derive(Debug, Clone, Copy)]
struct Present {
    dy: bool,
    dh_n: bool,
    dc_n: bool,
}

#[derive(Debug)]
struct ForwardOp {
    ir: CustomOpIr,
    desc: RnnDescriptor,
    training: bool,
}

#[derive(Debug)]
struct BackwardOp {
    ir: CustomOpIr,
    desc: RnnDescriptor,
    present: Present,
    /// The gradients declared as outputs; the kernels skip the others.
    wanted: GradsWanted,
}

/// Reads an op's inputs in order.
struct Reader<'a> {
    handles: &'a mut Handles,
    inputs: std::slice::Iter<'a, TensorIr>,
}

impl Reader<'_> {
    fn next(&mut self) -> Inner {
        let ir = self
            .inputs
            .next()
            .expect("the custom op holds every input it declared");
        self.handles.get_float_tensor::<CubeBackend>(ir)
    }

    fn next_if(&mut self, present: bool) -> Option<Inner> {
        present.then(|| self.next())
    }

    fn call_inputs(&mut self, desc: &RnnDescriptor) -> Inputs<CubeBackend> {
        Inputs {
            x: self.next(),
            h0: self.next(),
            c0: self.next_if(desc.spec.mode.has_cell_state()),
            weights: self.next(),
        }
    }
}

/// Checks the tensors against the op's declaration, then registers them as its outputs.
fn register_outputs(
    handles: &mut Handles,
    ir: &CustomOpIr,
    names: &[String],
    tensors: Vec<Inner>,
) -> Result<(), ExecutionError> {
    let declared: Vec<(Vec<usize>, DType)> = ir
        .outputs
        .iter()
        .map(|t| (t.shape.as_slice().to_vec(), t.dtype))
        .collect();
    let got: Vec<(Vec<usize>, DType)> = tensors
        .iter()
        .map(|t| (t.shape().as_slice().to_vec(), t.dtype()))
        .collect();
    check_declared(&ir.id, names, &declared, &got).map_err(ExecutionError::generic)?;
    for (out, tensor) in ir.outputs.iter().zip(tensors) {
        handles.register_float_tensor::<CubeBackend>(&out.id, tensor);
    }
    Ok(())
}

impl Operation<Runtime> for ForwardOp {
    fn execute(&self, handles: &mut Handles) -> Result<(), ExecutionError> {
        let mut reader = Reader {
            handles,
            inputs: self.ir.inputs.iter(),
        };
        let inputs = reader.call_inputs(&self.desc);
        let handles = reader.handles;
        let (out, reserve) = CubeBackend::fused_forward(&self.desc, &inputs, self.training);
        let reserve = reserve.unwrap_or_default();
        let names = forward_names(out.c_n.is_some(), reserve.len());
        let tensors: Vec<Inner> = [out.y, out.h_n]
            .into_iter()
            .chain(out.c_n)
            .chain(reserve)
            .collect();
        register_outputs(handles, &self.ir, &names, tensors)
    }
}

impl Operation<Runtime> for BackwardOp {
    fn execute(&self, handles: &mut Handles) -> Result<(), ExecutionError> {
        let mut reader = Reader {
            handles,
            inputs: self.ir.inputs.iter(),
        };
        let inputs = reader.call_inputs(&self.desc);
        let reserve_len = super::plan::reserve_shapes(&self.desc).len();
        let reserve: Vec<Inner> = (0..reserve_len).map(|_| reader.next()).collect();
        let dy = reader.next_if(self.present.dy);
        let dh_n = reader.next_if(self.present.dh_n);
        let dc_n = reader.next_if(self.present.dc_n);
        let handles = reader.handles;
        let y = inputs.x.clone(); // unread by the kernels' backward
        let g = CubeBackend::fused_backward(
            &self.desc,
            &inputs,
            &y,
            reserve,
            dy,
            dh_n,
            dc_n,
            self.wanted,
        );
        let names = backward_names(g.dc0.is_some(), self.wanted);
        let tensors = backward_outputs(self.wanted, g.dx, g.dh0, g.dc0, g.dweights);
        register_outputs(handles, &self.ir, &names, tensors)
    }
}

fn uninit(x: &Lazy, shape: &[usize], dtype: DType) -> TensorIr {
    TensorIr::uninit(
        x.client.create_empty_handle(),
        Shape::from(shape.to_vec()),
        dtype,
    )
}

/// The call's inputs, in the order the ops read them.
fn input_tensors(inputs: &Inputs<Fusion<CubeBackend>>) -> Vec<Lazy> {
    [
        Some(inputs.x.clone()),
        Some(inputs.h0.clone()),
        inputs.c0.clone(),
        Some(inputs.weights.clone()),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Registers `ir` with `op` on the current stream; its declared outputs, lazily.
fn register(x: &Lazy, ir: CustomOpIr, op: impl Operation<Runtime> + 'static) -> Vec<Lazy> {
    x.client
        .register(StreamId::current(), OperationIr::Custom(ir), op)
}

impl FusedKernel for Fusion<CubeBackend> {
    type Reserve = Vec<Lazy>;

    fn fused_forward(
        desc: &RnnDescriptor,
        inputs: &Inputs<Self>,
        training: bool,
    ) -> (Outputs<Self>, Option<Vec<Lazy>>) {
        let x = &inputs.x;
        let dtype = x.dtype();
        let mut outputs = vec![
            uninit(x, &desc.output_shape(), dtype),
            uninit(x, &desc.hidden_shape(), dtype),
        ];
        let cell = desc.spec.mode.has_cell_state();
        if cell {
            outputs.push(uninit(x, &desc.cell_shape(), dtype));
        }
        if training {
            for shape in super::plan::reserve_shapes(desc) {
                outputs.push(uninit(x, &shape, DType::F32));
            }
        }
        let ir_inputs: Vec<TensorIr> = input_tensors(inputs)
            .into_iter()
            .map(FusionTensor::into_ir)
            .collect();
        let ir = CustomOpIr::new("fused_rnn_forward", &ir_inputs, &outputs);
        let op = ForwardOp {
            ir: ir.clone(),
            desc: desc.clone(),
            training,
        };
        let mut outs = register(x, ir, op).into_iter();
        let y = outs.next().expect("declared y");
        let h_n = outs.next().expect("declared h_n");
        let c_n = cell.then(|| outs.next().expect("declared c_n"));
        let reserve = training.then(|| outs.collect());
        (Outputs { y, h_n, c_n }, reserve)
    }

    fn fused_backward(
        desc: &RnnDescriptor,
        inputs: &Inputs<Self>,
        _y: &Lazy,
        reserve: Vec<Lazy>,
        dy: Option<Lazy>,
        dh_n: Option<Lazy>,
        dc_n: Option<Lazy>,
        wanted: GradsWanted,
    ) -> Grads<Self> {
        let x = &inputs.x;
        let dtype = x.dtype();
        let cell = desc.spec.mode.has_cell_state();
        // Only the wanted gradients are declared (and computed).
        let mut outputs = Vec::with_capacity(4);
        if wanted.x {
            outputs.push(uninit(x, &desc.input_shape(), dtype));
        }
        outputs.push(uninit(x, &desc.hidden_shape(), dtype));
        if cell {
            outputs.push(uninit(x, &desc.cell_shape(), dtype));
        }
        if wanted.weights {
            outputs.push(uninit(x, &[desc.params_size()], dtype));
        }
        let present = Present {
            dy: dy.is_some(),
            dh_n: dh_n.is_some(),
            dc_n: dc_n.is_some(),
        };
        let tensors: Vec<Lazy> = input_tensors(inputs)
            .into_iter()
            .chain(reserve)
            .chain([dy, dh_n, dc_n].into_iter().flatten())
            .collect();
        let ir_inputs: Vec<TensorIr> = tensors.into_iter().map(FusionTensor::into_ir).collect();
        let ir = CustomOpIr::new("fused_rnn_backward", &ir_inputs, &outputs);
        let op = BackwardOp {
            ir: ir.clone(),
            desc: desc.clone(),
            present,
            wanted,
        };
        let mut outs = register(x, ir, op).into_iter();
        let dx = wanted.x.then(|| outs.next().expect("declared dx"));
        let dh0 = outs.next().expect("declared dh0");
        let dc0 = cell.then(|| outs.next().expect("declared dc0"));
        let dweights = wanted
            .weights
            .then(|| outs.next().expect("declared dweights"));
        Grads {
            dx,
            dh0,
            dc0,
            dweights,
        }
    }
}
