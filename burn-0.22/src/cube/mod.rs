//! Fused RNN kernels written in CubeCL (feature `wgpu`), the same kernels as the Burn 0.21
//! line's, on cubecl 0.11.
//!
//! Burn 0.22's CubeCL backend (`CubeBackend`, one type for every cubecl runtime) runs them
//! for calls on a Wgpu device (Vulkan, Metal, DX12, WebGPU), under autodiff inside the one
//! backward node of [`crate::autodiff`]. With the `fusion` feature (Burn's kernel fusion)
//! each call is one custom operation in the fusion stream (module `fusion`). The kernels
//! are written for every cubecl runtime, but only Wgpu devices route here: only Wgpu (on
//! lavapipe) has run them on this line (the crate's GPU machine has no Vulkan loader, and
//! Burn 0.22's CUDA runtime does not build there), so a CUDA, ROCm or CPU-runtime device
//! of the same build runs the reference.
//!
//! Where the reference ([`crate::reference`]) launches a recurrent matmul and about ten
//! element-wise kernels per step, these kernels launch one per step for both directions of
//! a layer:
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
//! [Variable lengths] and Note [Padding never leaks] in the core crate's `semantics`), both
//! layouts, initial states, and dropout between layers with the reference's masks bit for
//! bit (computed on the host and uploaded, Note [Dropout masks] in the core crate's
//! `dropout`).
//! F16 and BF16 inputs are computed in F32, like the reference (Note [Half precision] in
//! the core crate's `semantics`): the inputs are cast up once, the results cast back once.
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
//! device. Every access is bounds-checked by cubecl: the 0.21 line's kernels skip the
//! check in the product loops (`read_unchecked`, safe in cubecl 0.10), but cubecl 0.11
//! makes an unchecked read an `unsafe` block, and this crate keeps `unsafe` to its FFI
//! and GEMM modules. The indices are in bounds by construction all the same (rows and
//! columns are clamped to the buffers' sizes before the loop).
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
//! A training forward keeps, per layer `l`, as 2-D `F32` tensors:
//! - if `l > 0`: the layer's input after dropout, `[T·B, D·P]`;
//! - the gate rows of both directions, `[D·T·B, W]`: LSTM `i, f, g, o` (activated) and the
//!   cell state entering the step (`W = 5H`); GRU `r, z, n` and `R_n h + b_Rn` (`4H`);
//!   RNN the step's output (`H`);
//! - the state entering each step of both directions, `[D·T·B, P]`.
//!
//! Padded rows are zero. Nothing else is kept: `tanh(c')` is recomputed from the gates,
//! dropout masks from the seed. The reserve lives in the call's backward node only
//! ([`crate::autodiff`]), typed as the kernels' own, so no other backward can be handed it.
//!
//! # Note [Cube fallback]
//!
//! The reference runs instead of the kernels when [`set_enabled`] is off, for `F64`
//! inputs (the kernels compute in F32, which would lose the precision F64 was asked for),
//! and when a buffer would hold more than 2^31 elements (the kernels take 32-bit sizes and
//! offsets). The choice is made per call, before its backward node exists, so a training
//! call's backward always runs where its forward ran.

mod backward;
mod forward;
#[cfg(feature = "fusion")]
mod fusion;
mod kernel;
mod plan;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use burn::backend::tensor::FloatTensor;
use burn::backend::{DType, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;

use crate::descriptor::RnnDescriptor;
use crate::prims::{FusedKernel, Grads, Inputs, Outputs};
use burn_fused_rnn_core::GradsWanted;
use plan::Plan;

static ENABLED: AtomicBool = AtomicBool::new(true);
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Switches the CubeCL kernels off (`false`) or back on. While off, calls on Wgpu run the
/// reference implementation instead: for comparisons and benchmarks. A backward follows
/// the forward it belongs to, whatever the switch says.
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

/// Whether dispatch's CubeCL backend is one the kernels run on: `CubeBackend` itself, or
/// with this crate's `fusion` feature `Fusion<CubeBackend>` (not when Burn's `fusion`
/// feature came from elsewhere: Note [Call routing] in [`crate::ops`]).
pub(crate) fn routable() -> bool {
    use std::any::TypeId;
    let cube = TypeId::of::<burn::backend::Cube>();
    #[cfg(feature = "fusion")]
    if cube == TypeId::of::<burn_fusion::Fusion<CubeBackend>>() {
        return true;
    }
    cube == TypeId::of::<CubeBackend>()
}

fn count() {
    CALLS.fetch_add(1, Ordering::Relaxed);
}

/// A result of the kernels (packed `F32`) in the caller's `shape` and `dtype`.
fn back(t: CubeTensor, shape: &[usize], dtype: DType) -> CubeTensor {
    plan::cast(forward::with_shape(t, shape), dtype)
}

impl FusedKernel for CubeBackend {
    /// Per layer: its input after dropout (layers above the first), its gate rows and the
    /// state entering each step (Note [Cube reserve]).
    type Reserve = Vec<CubeTensor>;

    fn fused_forward(
        desc: &RnnDescriptor,
        inputs: &Inputs<Self>,
        training: bool,
    ) -> (Outputs<Self>, Option<Vec<CubeTensor>>) {
        count();
        let dtype = inputs.x.dtype();
        let plan = Plan::new(desc);
        let device_inputs = forward::device_inputs(&plan, inputs);
        let (out, rows) = forward::forward(&plan, device_inputs, training);
        let outputs = Outputs {
            y: back(out.y, &desc.output_shape(), dtype),
            h_n: back(out.h_n, &desc.hidden_shape(), dtype),
            c_n: out.c_n.map(|c| back(c, &desc.cell_shape(), dtype)),
        };
        (outputs, training.then_some(rows))
    }

    fn fused_backward(
        desc: &RnnDescriptor,
        inputs: &Inputs<Self>,
        _y: &FloatTensor<Self>,
        reserve: Vec<CubeTensor>,
        dy: Option<CubeTensor>,
        dh_n: Option<CubeTensor>,
        dc_n: Option<CubeTensor>,
        wanted: GradsWanted,
    ) -> Grads<Self> {
        let expected = plan::reserve_shapes(desc);
        let got: Vec<Vec<usize>> = reserve.iter().map(|t| t.shape().to_vec()).collect();
        assert!(
            got.iter()
                .map(Vec::as_slice)
                .eq(expected.iter().map(|s| &s[..])),
            "expected the CubeCL kernels' reserve for this call (shapes {expected:?}, Note \
             [Cube reserve]), got shapes {got:?}"
        );
        count();
        let dtype = inputs.x.dtype();
        let plan = Plan::new(desc);
        let rows = plan.rows();
        let device_inputs = forward::device_inputs(&plan, inputs);
        let grads = backward::OutputGrads {
            dy: dy.map(|t| forward::reshape_rows(plan::f32_contiguous(t), rows)),
            dh_n: dh_n.map(plan::f32_contiguous),
            dc_n: dc_n.map(plan::f32_contiguous),
        };
        let reserve = reserve.into_iter().map(into_contiguous).collect();
        // Only the wanted gradients are computed (Note [Cube gradients not wanted]).
        let g = backward::backward(&plan, device_inputs, reserve, grads, wanted);
        Grads {
            dx: g.dx.map(|dx| back(dx, &desc.input_shape(), dtype)),
            dh0: back(g.dh0, &desc.hidden_shape(), dtype),
            dc0: g.dc0.map(|c| back(c, &desc.cell_shape(), dtype)),
            dweights: g.dweights.map(|dw| back(dw, &[desc.params_size()], dtype)),
        }
    }
}
