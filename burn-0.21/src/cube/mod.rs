//! Fused RNN kernels written in CubeCL, for every CubeCL runtime: Wgpu (Vulkan, Metal,
//! DX12, WebGPU) and CUDA.
//!
//! Burn's Wgpu backend runs them (`CubeBackend<WgpuRuntime, ..>`, and through
//! [`Fusion`](crate::fusion) `burn::backend::Wgpu`); on CUDA they are what runs when cuDNN
//! cannot. Where the reference ([`crate::reference`]) launches a recurrent matmul and about
//! ten element-wise kernels per step, these kernels launch one per step for both
//! directions of a layer:
//!
//! - **Per layer**, one matmul (Burn's, i.e. cubecl's) projects the input of every step
//!   for both directions: `X · [W_ih0; W_ih1]^T`, `[T·B, D·G·H]`.
//! - **Per step**, ONE launch of the step kernel (two with an LSTM projection) computes
//!   `h_{t-1} · W_hh^T` for a tile of hidden units across all of their gates, then the
//!   biases, activations, cell update and variable-length select, and writes `y_t`,
//!   `h_t` and `c_t` (Note [Step kernel]).
//! - **Backward**, per step ONE launch (two with a projection) runs the element-wise
//!   backward of the step together with the previous step's `dG · W_hh` (Note [Backward
//!   step kernel]); the weight gradients, the input gradient and the layer below's output
//!   gradient are matmuls over every step at once.
//!
//! Every feature of the op is there, with the reference's semantics: the four modes,
//! layers, directions, LSTM projection, skip input, no bias, variable lengths (Note
//! [Variable lengths] and Note [Padding never leaks] in [`crate::op_types`]), both
//! layouts, initial states, and dropout between layers with the reference's masks bit for
//! bit (computed on the host and uploaded, Note [Dropout masks] in `crate::dropout`).
//! F16 and BF16 inputs are computed in F32, like the reference (Note [Half precision] in
//! [`crate::reference`]): the inputs are cast up once, the results cast back once.
//!
//! [`kernel_calls`] counts the calls that ran these kernels; [`set_enabled`] switches
//! them off (the reference then runs), for comparisons and benchmarks.
//!
//! # Note [Cube rows]
//!
//! Sequence tensors (`x`, `y`, a layer's output, the reserve's rows, the gradients) are
//! matrices of `T·B` rows in the caller's layout, never transposed: row `b·T + t` for
//! batch-first calls, `t·B + b` otherwise. The matmuls over all steps do not care about
//! the order of rows; the kernels compute the row of `(t, b)` themselves.
//!
//! # Note [Cube buffers]
//!
//! The kernels index every buffer by hand as a packed, row-major `F32` array: inputs are
//! cast and made contiguous (`into_contiguous`, which also removes the row pitch some
//! runtimes give new tensors), and every buffer a kernel writes is freshly allocated
//! packed (`empty_device_contiguous_dtype`), so a kernel never writes into a caller's
//! tensor. Kernels write every element of what they produce, padded rows included (as
//! zeros), so no uninitialised memory is ever read.
//!
//! # Note [Step kernel]
//!
//! A unit of the forward step kernel owns a tile of `UNITS` hidden units × `ROWS`
//! sequences in one direction, for all `G` gates: it accumulates the tile's recurrent
//! products `h_{t-1} · W_hh^T` in `G · UNITS · ROWS` registers, each loaded weight serving
//! `ROWS` sequences and each loaded state value `G · UNITS` products. The recurrent
//! weights are transposed once per call to `[D, P, G·H]` and the tiles of a cube's units
//! interleave (column `u` of unit `i` is `(cube · UNITS + u) · CUBE + i`), so neighbouring
//! units read neighbouring weights. The unit then stages its products in a scratch buffer
//! (its own tile only) and runs the cell one (unit, sequence) at a time, in a loop rather
//! than unrolled, so that the shader holds the cell's code once: input projection and
//! biases, activations (`σ` and `tanh` through one `exp`, saturating without NaN), the
//! cell state updated in place, the new state, `y_t` (zero past a sequence's length,
//! where the state is held instead) and, when training, the reserve's rows. The state
//! ping-pongs between two buffers (every unit of a step reads all of the previous state).
//! Cubes tile units along `x`, sequences along `y`, directions along `z`: both directions
//! of a layer advance in the same launch, forward at `t = s`, reverse at `t = T - 1 - s`.
//!
//! With an LSTM projection the cell's output `m = o ∘ tanh(c')` goes to a scratch buffer
//! and a second launch computes `h' = m W_hr^T` for a tile of state units and does the
//! select and the writes.
//!
//! The tile depends on the device (`plan::Tiles`): on a CPU Vulkan driver such as
//! lavapipe, where every load whose address differs between lanes costs one load per
//! lane, 4 units × 4 sequences (8 for one-gate products) in cubes of 32 units (measured
//! there: about twice as fast as 1 × 4); on GPUs, 1 unit × 8 sequences in cubes of 64
//! units, so that neighbouring units' weight loads coalesce (chosen, not measured: no GPU
//! was at hand). Small problems get smaller tiles (a tile past the problem repeats work,
//! and a bigger tile is a bigger shader to compile: lavapipe takes seconds per variant).
//! `BURN_FUSED_RNN_CUBE_TILES=units,rows,cube` overrides the choice, for tuning on a new
//! device. The product loops read with `read_unchecked`: their indices
//! are in bounds by construction (rows and columns are clamped to the buffers' sizes
//! before the loop), and there cubecl's per-access bounds check costs more than the
//! arithmetic; every other access is checked.
//!
//! # Note [Backward step kernel]
//!
//! The backward scan runs against the forward's order. The gradient `dh` carried into a
//! step needs the previous step's gate gradients of *every* hidden unit (`dG_prev ·
//! W_hh`), so a launch first finishes the previous step's recurrence for its units (at
//! the sequences that step was valid for; elsewhere the carried gradient passes
//! unchanged), then runs this step's element-wise backward: `dh = dy_t + carry`, the
//! gates' pre-activation gradients into `dG` (`[T·B, D·G·H]`, zero at padded rows), the
//! cell gradient `dc` in place, and what the carry keeps for the next launch (GRU's
//! `dh' ∘ z`, else zero). One more launch after the last step finishes its recurrence, and
//! the carry buffers then hold `dh0` and `dc0`. With an LSTM projection the first launch
//! stops at `dh'` (kept per step for `dW_hr`), and a second one computes `dm = dh' W_hr`
//! and the cell's backward. Then, per layer: `dW_ih = dG^T · input` and the layer input's
//! gradient `dG · [W_ih0; W_ih1]` for both directions in one matmul each; `dW_hh = dG^T ·
//! h_prev` and `dW_hr = dh'^T · m` per direction; bias gradients as column sums.
//!
//! # Note [Cube gradients not wanted]
//!
//! The autodiff node asks only for the gradients of its tracked inputs (`GradsWanted`,
//! the core crate's Note [Gradients not wanted]). The scans always run (they carry `dh0`,
//! `dc0` and every layer's input gradient down), but the matmuls over every step that
//! only serve an unwanted gradient do not: without the weights' gradient, no `dW_ih`,
//! `dW_hh`, `dW_hr` or bias sum, and layer 0's input (with its padded rows zeroed) is not
//! read; without `x`'s, layer 0's `dG · [W_ih0; W_ih1]` (or the skip input's sum). The
//! unwanted gradient comes back as `None`. Under Fusion only the wanted gradients are
//! declared as the custom op's outputs, so the same work is skipped there.
//!
//! # Note [Cube reserve]
//!
//! A training forward keeps a first 1-D tensor that only carries the kernels' tag (Note
//! [Reserve tag] in [`crate::op_types`]; never read), then, per layer `l`, as 2-D `F32`
//! tensors:
//! - if `l > 0`: the layer's input after dropout, `[T·B, D·P]`;
//! - the gate rows of both directions, `[D·T·B, W]`: LSTM `i, f, g, o` (activated) and the
//!   cell state entering the step (`W = 5H`); GRU `r, z, n` and `R_n h + b_Rn` (`4H`);
//!   RNN the step's output (`H`);
//! - the state entering each step of both directions, `[D·T·B, P]`.
//!
//! Padded rows are zero. Nothing else is kept: `tanh(c')` is recomputed from the gates,
//! dropout masks from the seed. A backward tells this reserve from the reference's (3-D
//! tensors, untagged) and cuDNN's (one tagged 1-D buffer) by its tag.
//!
//! # Note [Cube fallback]
//!
//! The reference runs instead of the kernels when [`set_enabled`] is off, for `F64`
//! inputs (the kernels compute in F32, which would lose the precision F64 was asked for),
//! and when a buffer would hold more than 2^31 elements (the kernels take 32-bit sizes and
//! offsets). A backward follows the reserve it is given: the kernels' own (2-D tensors,
//! Note [Cube reserve]) runs the kernels, any other the reference.

// With `cuda` alone, the entry points below serve the CUDA backend's fallback to the
// reference (Note [cuDNN fallback] in `crate::cudnn`) once it calls them.
#![cfg_attr(not(feature = "wgpu"), allow(dead_code))]

mod backward;
mod forward;
mod kernel;
mod plan;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use burn::tensor::{DType, FloatDType, TensorMetadata};
use burn_cubecl::tensor::CubeTensor;

use crate::descriptor::{GradsWanted, RnnDescriptor};
use crate::op_types::{ReserveTag, RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::reference;
pub(crate) use plan::CubeOps;
use plan::Plan;

static ENABLED: AtomicBool = AtomicBool::new(true);
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Switches the CubeCL kernels off (`false`) or back on. While off, CubeCL backends that
/// would run them run the reference implementation instead: for comparisons and
/// benchmarks. Switch between calls, not while a fused op is queued (a fused custom op
/// declares its reserve when it is registered); a backward follows the reserve it is
/// given, whatever the switch says.
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// Whether the CubeCL kernels are switched on ([`set_enabled`]).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// How many calls of the op (inference forward, training forward, backward) this process
/// has run through the CubeCL kernels: a diagnostic that shows which path ran.
pub fn kernel_calls() -> u64 {
    CALLS.load(Ordering::Relaxed)
}

/// Whether the kernels run a call of `desc` on inputs of `dtype` (Note [Cube fallback]).
pub(crate) fn runs(desc: &RnnDescriptor, dtype: DType) -> bool {
    enabled() && dtype != DType::F64 && plan::fits(desc)
}

/// The length of the reserve's first tensor, which only carries the kernels' tag (Note
/// [Reserve tag] in [`crate::op_types`]).
fn tag_len() -> usize {
    ReserveTag::Cube.tagged_len(0)
}

/// Whether `reserve` is the kernels' (Note [Cube reserve]): its first tensor is 1-D and
/// tagged [`ReserveTag::Cube`].
pub(crate) fn owns_reserve<B: CubeOps>(reserve: &RnnReserve<B>) -> bool {
    reserve.tensors.first().is_some_and(|t| {
        let shape = t.shape();
        shape.num_dims() == 1 && ReserveTag::of_len(shape[0]) == Some(ReserveTag::Cube)
    })
}

fn count() {
    CALLS.fetch_add(1, Ordering::Relaxed);
}

/// The output of the kernels in the caller's shapes and dtype.
fn output<B: CubeOps>(
    desc: &RnnDescriptor,
    out: forward::Outputs<B::Runtime>,
    dtype: DType,
) -> RnnOutput<B> {
    let back = |t: CubeTensor<B::Runtime>, shape: &[usize]| {
        crate::op_types::cast::<B>(forward::with_shape(t, shape), dtype)
    };
    RnnOutput {
        y: back(out.y, &desc.output_shape()),
        h_n: back(out.h_n, &desc.hidden_shape()),
        c_n: out.c_n.map(|c| back(c, &desc.cell_shape())),
    }
}

/// Inference forward on any CubeCL runtime: the kernels, or the reference where they do
/// not run (Note [Cube fallback]).
pub(crate) fn forward<B: CubeOps>(desc: &RnnDescriptor, inputs: RnnInputs<B>) -> RnnOutput<B> {
    let dtype = inputs.x.dtype();
    if !runs(desc, dtype) {
        return reference::forward::<B>(desc, inputs);
    }
    count();
    let plan = Plan::new(desc);
    let inputs = forward::device_inputs::<B>(&plan, inputs);
    let (out, _) = forward::forward::<B>(&plan, inputs, false);
    output::<B>(desc, out, dtype)
}

/// Training forward on any CubeCL runtime: the output and the reserve of Note [Cube
/// reserve], or the reference's where the kernels do not run.
pub(crate) fn forward_training<B: CubeOps>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
) -> (RnnOutput<B>, RnnReserve<B>) {
    let dtype = inputs.x.dtype();
    if !runs(desc, dtype) {
        return reference::forward_training::<B>(desc, inputs);
    }
    count();
    let device = B::float_device(&inputs.x);
    let plan = Plan::new(desc);
    let inputs = forward::device_inputs::<B>(&plan, inputs);
    let (out, rows) = forward::forward::<B>(&plan, inputs, true);
    let tag = B::float_zeros([tag_len()].into(), &device, FloatDType::F32);
    let mut tensors = Vec::with_capacity(rows.len() + 1);
    tensors.push(tag);
    tensors.extend(rows);
    (output::<B>(desc, out, dtype), RnnReserve { tensors })
}

/// The reserve's shapes and dtypes (`FusedRnnBackend::fused_rnn_reserve_layout`).
pub(crate) fn reserve_layout(desc: &RnnDescriptor, dtype: DType) -> Vec<(Vec<usize>, DType)> {
    if !runs(desc, dtype) {
        return reference::reserve_layout(desc, dtype);
    }
    std::iter::once((vec![tag_len()], DType::F32))
        .chain(
            plan::reserve_shapes(desc)
                .into_iter()
                .map(|shape| (shape.to_vec(), DType::F32)),
        )
        .collect()
}

/// Backward pass on any CubeCL runtime, from the reserve of [`forward_training`]: the
/// kernels for their own reserve, the reference for the reference's.
///
/// # Panics
///
/// If `reserve` is tagged as the kernels' but is not their reserve for `desc` (another
/// call's), naming both.
pub(crate) fn backward<B: CubeOps>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    output: RnnOutput<B>,
    reserve: RnnReserve<B>,
    grads: RnnOutputGrads<B>,
    wanted: GradsWanted,
) -> RnnGrads<B> {
    if !owns_reserve(&reserve) {
        return reference::backward::<B>(desc, inputs, output, reserve, grads, wanted);
    }
    drop(output);
    let expected: Vec<Vec<usize>> = std::iter::once(vec![tag_len()])
        .chain(plan::reserve_shapes(desc).into_iter().map(|s| s.to_vec()))
        .collect();
    let got: Vec<Vec<usize>> = reserve.tensors.iter().map(|t| t.shape().to_vec()).collect();
    let f32_only = reserve.tensors.iter().all(|t| t.dtype() == DType::F32);
    assert!(
        got == expected && f32_only,
        "expected reserve to be the CubeCL kernels' training-forward reserve for this call \
         (F32 tensors of shapes {expected:?}, Note [Cube reserve]), got shapes {got:?} of dtypes {:?}",
        reserve.tensors.iter().map(|t| t.dtype()).collect::<Vec<_>>()
    );
    count();
    let dtype = inputs.x.dtype();
    let plan = Plan::new(desc);
    let rows = plan.rows();
    let inputs = forward::device_inputs::<B>(&plan, inputs);
    let grads = backward::OutputGrads {
        dy: grads
            .dy
            .map(|t| forward::reshape_rows(plan::f32_contiguous::<B>(t), rows)),
        dh_n: grads.dh_n.map(plan::f32_contiguous::<B>),
        dc_n: grads.dc_n.map(plan::f32_contiguous::<B>),
    };
    let reserve = reserve
        .tensors
        .into_iter()
        .skip(1) // the tag
        .map(burn_cubecl::kernel::into_contiguous)
        .collect();
    // Only the wanted gradients are computed (Note [Cube gradients not wanted]).
    let g = backward::backward::<B>(&plan, inputs, reserve, grads, wanted);
    let back = |t: CubeTensor<B::Runtime>, shape: &[usize]| {
        crate::op_types::cast::<B>(forward::with_shape(t, shape), dtype)
    };
    RnnGrads {
        dx: g.dx.map(|dx| back(dx, &desc.input_shape())),
        dh0: back(g.dh0, &desc.hidden_shape()),
        dc0: g.dc0.map(|c| back(c, &desc.cell_shape())),
        dweights: g.dweights.map(|dw| back(dw, &[desc.params_size()])),
    }
}
