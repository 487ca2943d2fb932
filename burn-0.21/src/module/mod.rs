//! The [`FusedRnn`] module: canonical per-matrix parameters, a fused forward, checked
//! record loading.

mod alloc;
mod digest;
mod file;
mod load_error;
mod record;
mod state;
mod step;

pub use digest::WeightsDigest;
pub use load_error::{FileProblem, FusedRnnLoadError};
pub use record::FusedRnnRecord;
pub use state::RnnState;
pub use step::PreparedRnn;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use burn::module::{Initializer, Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Element, Tensor};

use crate::backend::FusedRnnBackend;
use crate::config::FusedRnnConfig;
use crate::descriptor::{DropoutSpec, RnnDescriptor};
use crate::layout::{ParamEntry, ParamKind, RnnLayout};
use crate::ops::fused_rnn;
use crate::spec::RnnSpec;
use burn_fused_rnn_core::memo::BufferMemo;

/// The canonical tensors of one pseudo-layer (layer `l`, direction `d`), in PyTorch's
/// orientation and cuDNN's gate order: field `weight_ih` of `cells[l * D + d]` is
/// PyTorch's `weight_ih_l{l}{_reverse}`, and so on (Note [RNN weight layout] in
/// [`crate::layout`]).
#[derive(Module, Debug)]
pub struct RnnCell<B: Backend> {
    /// `W_ih`, `[G*H, in_l]`; absent in layer 0 with skip input.
    pub weight_ih: Option<Param<Tensor<B, 2>>>,
    /// `W_hh`, `[G*H, P]`.
    pub weight_hh: Param<Tensor<B, 2>>,
    /// `b_ih`, `[G*H]`; absent without bias, or in layer 0 with skip input.
    pub bias_ih: Option<Param<Tensor<B, 1>>>,
    /// `b_hh`, `[G*H]`; absent without bias.
    pub bias_hh: Option<Param<Tensor<B, 1>>>,
    /// `W_hr`, `[P, H]`; LSTM projection only.
    pub weight_hr: Option<Param<Tensor<B, 2>>>,
}

/// A stack of LSTM, GRU or plain RNN layers, in one or both directions, run as ONE fused
/// op: the native CPU kernel on NdArray and Flex, cuDNN on CUDA (the CubeCL kernels where
/// cuDNN cannot), the CubeCL kernels on Wgpu, the reference implementation elsewhere.
///
/// # Note [Dropout seeds]
///
/// Dropout (between layers, never after the last) applies only in training, that is on an
/// `Autodiff` backend with tracked tensors; an inference forward ignores it. Training call
/// `k` of a module made with seed `s` draws its masks from `(s, k)`, so every step gets
/// fresh masks while two modules with the same seed see the same sequence. The backward
/// pass reuses the forward's masks (they are part of the reserve).
///
/// Made by [`FusedRnnConfig::init`]. Its record holds the canonical weights
/// ([`RnnCell`]), so Burn's recorders save and restore it on any backend; use
/// [`FusedRnn::try_load_record`] or [`FusedRnn::try_load_file`] to get an error, rather than
/// a wrong model, when a record does not fit the configuration, holds non-finite weights,
/// or was damaged after saving (its [`WeightsDigest`]).
///
/// # Note [Thread safety]
///
/// `FusedRnn` and [`PreparedRnn`] are `Send + Sync` (when the backend's tensors are), and
/// any number of threads may call `forward`, `forward_with_lengths`, training forwards and
/// backwards, `prepare` and `step` at once, on one module, on clones of it, or on modules
/// of their own. Each call's result is the one it would give alone, bit for bit (the
/// native CPU kernel splits its work by the call's shape, never by how busy its thread
/// pool is). Three process-wide pieces of state are shared, and all are safe to share:
///
/// - the module's memo of its flat weights (Note [Flat weights across calls] in the core
///   crate's `memo`): behind a mutex, and only ever handed to a call whose parameters are
///   the very buffers it was built from; a clone starts with a memo of its own;
/// - the native kernel's cache of packed weights for one-step and inference calls (Note
///   [Packed weights across calls] in the kernel): behind a mutex, keyed by the weights' buffer, holding
///   at most [`PACKED_WEIGHTS_CACHE_ENTRIES`](crate::PACKED_WEIGHTS_CACHE_ENTRIES)
///   networks whatever the number of threads;
/// - the native kernel's spare training reserves and scratch buffers (Notes [Reserve
///   reuse] and [Scratch reuse] in the kernel): behind mutexes, a buffer taken out of a
///   list belongs to one call until its backward (a reserve) or the call itself (scratch)
///   hands it back, and nothing of its old contents is read;
///   [`release_reserves`](crate::release_reserves) frees them and empties the cache of packed
///   weights.
///
/// Settings that are process-wide by design (`cudnn::set_algorithm`, `cube::set_enabled`,
/// `BURN_FUSED_RNN_SIMD`) apply to every thread; a thread's own SIMD level is
/// [`with_simd_level`](crate::with_simd_level). `tests/concurrency.rs` runs six threads at
/// once (two on clones of one module) at every SIMD level and checks every result against
/// the same work run alone.
// `Module` is implemented by hand in `record.rs`, as `#[derive(Module)]` would, except that
// the record also carries the digest of the weights.
#[derive(Debug)]
pub struct FusedRnn<B: Backend> {
    /// Canonical weights of each pseudo-layer, index `layer * D + direction`.
    pub cells: Vec<RnnCell<B>>,
    spec: RnnSpec,
    batch_first: bool,
    dropout: DropoutSpec,
    /// Training forwards run so far (shared by clones): call `k` draws its dropout masks
    /// from `(seed, k)`.
    dropout_calls: Arc<AtomicU64>,
    /// The flat weights of the last inference call and clones of the parameters they were
    /// built from (Note [Flat weights across calls] in the core crate's `memo`); a clone
    /// starts empty.
    flat_memo: FlatMemo<B>,
}

/// A module's memo of its flat weights, keeping clones of the parameters' primitives.
type FlatMemo<B> =
    BufferMemo<Vec<<B as burn::tensor::backend::BackendTypes>::FloatTensorPrimitive>, Tensor<B, 1>>;

/// The identity of a float primitive's buffer, or `None` (see
/// `FusedRnnBackend::fused_rnn_buffer_identity`).
type BufferIdentity<B> =
    fn(&<B as burn::tensor::backend::BackendTypes>::FloatTensorPrimitive) -> Option<(usize, usize)>;

/// A float tensor primitive of `B`.
type FloatPrimitive<B> = <B as burn::tensor::backend::BackendTypes>::FloatTensorPrimitive;

/// How a call builds its flat weights from the canonical tensors (see
/// `FusedRnnBackend::fused_rnn_concat`).
type Concat<B> = fn(Vec<FloatPrimitive<B>>) -> FloatPrimitive<B>;

impl FusedRnnConfig {
    /// Builds the module, weights initialized as described on
    /// [`FusedRnnConfig::initializer`].
    ///
    /// Every parameter is drawn here, eagerly: a clone of the new module holds the same
    /// weights, so `module.clone().save_file(..)` saves the weights the module runs with.
    /// (Burn's own modules initialize lazily: a clone of a parameter never read draws its
    /// own values.)
    ///
    /// Dropout with one layer does nothing (it acts between layers); as PyTorch does, this
    /// warns through the `log` crate.
    ///
    /// # Panics
    ///
    /// If the configuration is invalid (see [`FusedRnnConfig::spec`]), or its parameters
    /// cannot be allocated (Note [Allocation checks]): the message names the fields.
    pub fn init<B: Backend>(&self, device: &B::Device) -> FusedRnn<B> {
        let spec = self.spec();
        self.warn_unused_dropout();
        let layout = checked_layout::<B>(spec);
        let k = 1.0 / (self.d_hidden as f64).sqrt();
        let default = Initializer::Uniform { min: -k, max: k };
        let (matrix_init, bias_init) = match &self.initializer {
            None => (default.clone(), default),
            Some(init) => (init.clone(), Initializer::Zeros),
        };
        let cells = build_cells(
            &layout,
            |e| {
                let [rows, cols] = [e.shape[0], e.shape[1]];
                eager(matrix_init.init_with([rows, cols], Some(cols), Some(rows), device))
            },
            |e| eager(bias_init.init([e.shape[0]], device)),
        );
        self.assemble(spec, cells)
    }

    /// Builds the module from a flat canonical params vector `[params_size]` (TF's
    /// `params_to_canonical`): the inverse of [`FusedRnn::flat_weights`].
    ///
    /// # Panics
    ///
    /// If the configuration is invalid, or `params` is not `[params_size]`.
    pub fn init_with_params<B: Backend>(&self, params: Tensor<B, 1>) -> FusedRnn<B> {
        let spec = self.spec();
        self.warn_unused_dropout();
        let layout = RnnLayout::new(spec);
        let [len] = params.dims();
        assert!(
            len == layout.params_size(),
            "expected params of shape [params_size] = [{}], got [{len}]",
            layout.params_size()
        );
        let slice = |e: &ParamEntry| params.clone().narrow(0, e.offset, e.len());
        let cells = build_cells(
            &layout,
            |e| Param::from_tensor(slice(e).reshape([e.shape[0], e.shape[1]])),
            |e| Param::from_tensor(slice(e)),
        );
        self.assemble(spec, cells)
    }

    /// The module of `spec` with the given cells and this config's settings.
    fn assemble<B: Backend>(&self, spec: RnnSpec, cells: Vec<RnnCell<B>>) -> FusedRnn<B> {
        FusedRnn {
            cells,
            spec,
            batch_first: self.batch_first,
            dropout: DropoutSpec {
                probability: self.dropout,
                seed: self.seed,
            },
            dropout_calls: Arc::default(),
            flat_memo: FlatMemo::default(),
        }
    }
}

impl FusedRnnConfig {
    /// Builds the module the way burn-nn builds its recurrent layers: every gate's input
    /// and recurrent matrices drawn by `initializer` as burn-nn's `Linear` draws them
    /// (shape `[fan_in, d_hidden]`, then transposed into the canonical orientation), every
    /// bias drawn by `initializer` too (fan-in the input or hidden size), eagerly. The
    /// drop-in layers of [`crate::nn`] use it, so that their weights have burn-nn's
    /// distributions.
    ///
    /// # Panics
    ///
    /// As [`FusedRnnConfig::init`]; and if the configuration has a projection (burn-nn has
    /// none).
    pub(crate) fn init_like_burn_nn<B: Backend>(
        &self,
        initializer: &Initializer,
        device: &B::Device,
    ) -> FusedRnn<B> {
        let spec = self.spec();
        assert!(
            spec.proj_size.is_none(),
            "expected proj_size = None for a burn-nn layer, got {:?}",
            spec.proj_size
        );
        self.warn_unused_dropout();
        let layout = checked_layout::<B>(spec);
        let (g, h) = (spec.mode.num_gates(), spec.d_hidden);
        // Each block is drawn as a parameter of its own, which requires gradients; the
        // stacked parameter is a new leaf made from their values.
        let value = |p: Param<Tensor<B, 2>>| p.val().detach().set_require_grad(false);
        let matrix = |e: &ParamEntry| {
            let fan_in = e.shape[1];
            let blocks = (0..g)
                .map(|_| {
                    value(initializer.init_with([fan_in, h], Some(fan_in), Some(h), device))
                        .transpose()
                })
                .collect();
            Param::from_tensor(Tensor::cat(blocks, 0))
        };
        let bias = |e: &ParamEntry| {
            let fan_in = match e.kind {
                ParamKind::BiasIh => spec.layer_input_size(e.layer),
                _ => h,
            };
            let blocks = (0..g)
                .map(|_| {
                    initializer
                        .init_with([h], Some(fan_in), Some(h), device)
                        .val()
                        .detach()
                        .set_require_grad(false)
                })
                .collect();
            Param::from_tensor(Tensor::cat(blocks, 0))
        };
        let cells = build_cells(&layout, matrix, bias);
        self.assemble(spec, cells)
    }
}

/// The layout of `spec`, after checking that its parameters can be allocated on `B`
/// (Note [Allocation checks]).
fn checked_layout<B: Backend>(spec: RnnSpec) -> RnnLayout {
    let params_size = crate::layout::params_size_closed_form(&spec);
    alloc::check_params::<B>(
        &spec,
        params_size,
        <B::FloatElem as Element>::dtype().size(),
    );
    RnnLayout::new(spec)
}

/// `param`, its value drawn now rather than at first use, so that clones share it.
fn eager<const D: usize, B: Backend>(param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
    let _ = param.val();
    param
}

/// One [`RnnCell`] per pseudo-layer, each tensor made from its layout entry.
///
/// # Panics
///
/// Naming `num_layers`, when the list of cells cannot be allocated (Note [Allocation
/// checks]).
fn build_cells<B: Backend>(
    layout: &RnnLayout,
    matrix: impl Fn(&ParamEntry) -> Param<Tensor<B, 2>>,
    bias: impl Fn(&ParamEntry) -> Param<Tensor<B, 1>>,
) -> Vec<RnnCell<B>> {
    let spec = layout.spec();
    let nd = spec.num_directions();
    let count = spec.num_pseudo_layers();
    let mut cells = Vec::new();
    if let Err(reason) = crate::host::try_reserve(&mut cells, count) {
        panic!(
            "invalid FusedRnnConfig: expected num_layers small enough to allocate one cell per \
             layer and direction, got num_layers = {} ({count} cells, {reason})",
            spec.num_layers,
        );
    }
    cells.extend((0..spec.num_pseudo_layers()).map(|idx| {
        let (layer, direction) = (idx / nd, idx % nd);
        let entry = |kind| layout.entry(layer, direction, kind);
        RnnCell {
            weight_ih: entry(ParamKind::WeightIh).map(&matrix),
            weight_hh: matrix(entry(ParamKind::WeightHh).expect("W_hh always exists")),
            bias_ih: entry(ParamKind::BiasIh).map(&bias),
            bias_hh: entry(ParamKind::BiasHh).map(&bias),
            weight_hr: entry(ParamKind::WeightHr).map(&matrix),
        }
    }));
    cells
}

impl<B: Backend> RnnCell<B> {
    /// The tensor of `kind` as stored, with its shape; `None` when absent.
    fn canonical(&self, kind: ParamKind) -> Option<(FloatPrimitive<B>, Vec<usize>)> {
        let m = |p: &Param<Tensor<B, 2>>| {
            let t = p.val();
            let dims = t.dims().to_vec();
            (t.into_primitive().tensor(), dims)
        };
        let b = |p: &Param<Tensor<B, 1>>| {
            let t = p.val();
            let dims = t.dims().to_vec();
            (t.into_primitive().tensor(), dims)
        };
        match kind {
            ParamKind::WeightIh => self.weight_ih.as_ref().map(m),
            ParamKind::WeightHh => Some(m(&self.weight_hh)),
            ParamKind::BiasIh => self.bias_ih.as_ref().map(b),
            ParamKind::BiasHh => self.bias_hh.as_ref().map(b),
            ParamKind::WeightHr => self.weight_hr.as_ref().map(m),
        }
    }
}

impl<B: Backend> FusedRnn<B> {
    /// The resolved network description.
    pub fn spec(&self) -> &RnnSpec {
        &self.spec
    }

    /// The canonical weight layout.
    pub fn layout(&self) -> RnnLayout {
        RnnLayout::new(self.spec)
    }

    /// Whether inputs and outputs are batch-first.
    pub fn batch_first(&self) -> bool {
        self.batch_first
    }

    /// A configuration that builds a module like this one: its network, layout and dropout
    /// (the initializer is the default; the weights are not part of a configuration).
    pub fn config(&self) -> FusedRnnConfig {
        let spec = &self.spec;
        FusedRnnConfig::new(spec.mode, spec.d_input, spec.d_hidden)
            .with_num_layers(spec.num_layers)
            .with_bidirectional(spec.bidirectional)
            .with_input_mode(if spec.skip_input {
                crate::spec::InputMode::Skip
            } else {
                crate::spec::InputMode::Linear
            })
            .with_bias(spec.bias)
            .with_proj_size(spec.proj_size)
            .with_batch_first(self.batch_first)
            .with_dropout(self.dropout.probability)
            .with_seed(self.dropout.seed)
    }

    /// The flat canonical params vector `[params_size]` (TF's `canonical_to_params`), in
    /// the order of Note [RNN weight layout]. Gradients flow back to each parameter.
    ///
    /// # Panics
    ///
    /// If a parameter is missing, present where the layout has none, or of the wrong
    /// shape (possible only after an unchecked `load_record`), naming the tensor.
    pub fn flat_weights(&self) -> Tensor<B, 1> {
        self.flat_weights_with(crate::backend::concat_parts::<B>)
    }

    /// The flat weights, the canonical tensors concatenated by `concat`.
    fn flat_weights_with(&self, concat: Concat<B>) -> Tensor<B, 1> {
        crate::op_types::float(concat(self.canonical_parts()))
    }

    /// The flat weights built by `concat` (`FusedRnnBackend::fused_rnn_concat` for the
    /// op's calls: Note [Flat weights from parts] in `crate::backend`), kept from the last
    /// call while every parameter is the same buffer, on a backend that can name a buffer
    /// (`FusedRnnBackend::fused_rnn_buffer_identity`: the native CPU backends; Note [Flat
    /// weights across calls] in the core crate's `memo`: why the same buffers mean the same
    /// values, and what it buys: inference calls and one-step `forward`s find their packed
    /// weights again, as cheap as [`PreparedRnn::step`]). Under `Autodiff` the identity is
    /// unknown (`None`), so training concatenates on every call, tracked as one chain of
    /// links (Note [Concatenation as a chain] in `crate::autodiff`).
    fn flat_weights_for_call(
        &self,
        identity: BufferIdentity<B>,
        concat: Concat<B>,
    ) -> Tensor<B, 1> {
        // The parameters themselves, as stored (a reshape may copy on some backends).
        let params: Vec<_> = self
            .cells
            .iter()
            .flat_map(|cell| {
                let matrices = cell
                    .weight_ih
                    .iter()
                    .chain([&cell.weight_hh])
                    .map(|p| p.val().into_primitive().tensor());
                let biases = [&cell.bias_ih, &cell.bias_hh]
                    .into_iter()
                    .flatten()
                    .map(|p| p.val().into_primitive().tensor());
                matrices.chain(biases).collect::<Vec<_>>()
            })
            .collect();
        let ids: Option<Vec<(usize, usize)>> = params.iter().map(identity).collect();
        let Some(ids) = ids else {
            return self.flat_weights_with(concat);
        };
        self.flat_memo
            .get_or_build(ids, params, || self.flat_weights_with(concat))
    }

    /// Every canonical tensor as stored, in the layout's order, its shape checked against
    /// the layout.
    fn canonical_parts(&self) -> Vec<FloatPrimitive<B>> {
        let layout = self.layout();
        assert_eq!(
            self.cells.len(),
            self.spec.num_pseudo_layers(),
            "expected {} cells (num_layers * directions), got {}",
            self.spec.num_pseudo_layers(),
            self.cells.len()
        );
        let nd = self.spec.num_directions();
        let mut parts = Vec::with_capacity(layout.entries().len());
        for (idx, cell) in self.cells.iter().enumerate() {
            let (layer, direction) = (idx / nd, idx % nd);
            for kind in ParamKind::ALL {
                let expected = layout.entry(layer, direction, kind);
                match (expected, cell.canonical(kind)) {
                    (None, None) => {}
                    (Some(e), Some((t, dims))) if dims == e.shape => parts.push(t),
                    (e, got) => panic!(
                        "expected {} of shape {}, got {}",
                        crate::layout::param_name(kind, layer, direction),
                        e.map_or("none".to_string(), |e| format!("{:?}", e.shape)),
                        got.map_or("none".to_string(), |(_, d)| format!("{d:?}")),
                    ),
                }
            }
        }
        parts
    }
}

/// The initial hidden and cell states of a call, after refusing an LSTM state without a
/// cell state (which would silently start the cell at zero).
///
/// # Panics
///
/// If `spec` is an LSTM and `state` has no cell state.
pub(crate) fn split_state<B: Backend>(
    spec: &RnnSpec,
    state: Option<RnnState<B>>,
) -> (Option<Tensor<B, 3>>, Option<Tensor<B, 3>>) {
    match state {
        Some(RnnState { hidden, cell: None }) if spec.mode.has_cell_state() => panic!(
            "expected state.cell, the initial cell state [L*D, batch_size, H] of an LSTM, got \
             None with a hidden state of shape {:?}: RnnState::hidden_only is a GRU or RNN \
             state; build an LSTM's with RnnState::lstm(hidden, cell), or pass no state for \
             zeros",
            hidden.dims()
        ),
        Some(s) => (Some(s.hidden), s.cell),
        None => (None, None),
    }
}

/// What a call of the op needs besides its input, checked.
struct Call<B: Backend> {
    desc: RnnDescriptor,
    h0: Option<Tensor<B, 3>>,
    c0: Option<Tensor<B, 3>>,
    weights: Tensor<B, 1>,
}

impl<B: Backend> FusedRnn<B> {
    /// The dropout of this call: fresh masks for every training forward, reproducible from
    /// the config's seed (Note [Dropout seeds]).
    fn call_dropout(&self, device: &B::Device) -> DropoutSpec {
        if self.dropout.probability == 0.0 || !B::ad_enabled(device) {
            return self.dropout;
        }
        let call = self.dropout_calls.fetch_add(1, Ordering::Relaxed);
        DropoutSpec {
            probability: self.dropout.probability,
            seed: crate::dropout::mix_seed(self.dropout.seed, call),
        }
    }

    /// The descriptor, initial states and weights of a call on `input`, after the checks
    /// that name `input` and the state, and the size checks of Note [Allocation checks];
    /// `reserve_bytes` gives the training reserve's size on `B`, `identity` the identity of a
    /// parameter's buffer (`FusedRnnBackend::fused_rnn_buffer_identity`).
    fn call(
        &self,
        input: &Tensor<B, 3>,
        seq_lengths: Option<Vec<usize>>,
        state: Option<RnnState<B>>,
        reserve_bytes: impl FnOnce(&RnnDescriptor, burn::tensor::DType, &B::Device) -> usize,
        identity: BufferIdentity<B>,
        concat: Concat<B>,
    ) -> Call<B> {
        let [d0, d1, _] = input.dims();
        let (batch, seq) = if self.batch_first { (d0, d1) } else { (d1, d0) };
        // Checked here, where the argument is `input`, rather than by the descriptor,
        // whose arguments are `batch_size` and `seq_length`.
        if batch == 0 || seq == 0 {
            let (layout, dim) = match (self.batch_first, batch == 0) {
                (true, true) => ("[batch_size, seq_length, d_input]", "batch_size"),
                (true, false) => ("[batch_size, seq_length, d_input]", "seq_length"),
                (false, true) => ("[seq_length, batch_size, d_input]", "batch_size"),
                (false, false) => ("[seq_length, batch_size, d_input]", "seq_length"),
            };
            panic!(
                "expected input of shape {layout} with {dim} > 0, got {:?}",
                input.dims()
            );
        }
        let (h0, c0) = split_state(&self.spec, state);
        let device = input.device();
        let desc = RnnDescriptor::new(
            self.spec,
            seq,
            batch,
            self.batch_first,
            seq_lengths,
            self.call_dropout(&device),
        );
        let dtype = input.dtype();
        alloc::check_call::<B>(&self.spec, seq, batch, dtype.size(), || {
            if B::ad_enabled(&device) {
                reserve_bytes(&desc, dtype, &device)
            } else {
                0
            }
        });
        // The module runs in its input's dtype: weights are cast to it (a tracked cast, so
        // gradients reach the parameters in their own dtype), states must match it.
        let weights = self.flat_weights_for_call(identity, concat);
        let weights = if weights.dtype() == dtype {
            weights
        } else {
            weights.cast(dtype)
        };
        Call {
            desc,
            h0,
            c0,
            weights,
        }
    }

    /// [`FusedRnn::forward`] on any backend, through the reference implementation run
    /// as Burn tensor ops (so `Autodiff` differentiates it op by op, without the fused
    /// backward): what a drop-in layer of [`crate::nn`] runs on a backend that it does not
    /// know to implement the fused op (Note [Drop-in dispatch] in `crate::nn`).
    pub(crate) fn forward_reference(
        &self,
        input: Tensor<B, 3>,
        state: Option<RnnState<B>>,
    ) -> (Tensor<B, 3>, RnnState<B>) {
        use crate::op_types::{float, prim};

        // The reference reads no buffer in place: no identity, no flat weights kept.
        let no_identity: BufferIdentity<B> = |_| None;
        let reserve = |desc: &RnnDescriptor, dtype: burn::tensor::DType, _: &B::Device| {
            crate::reference::reserve_layout(desc, dtype)
                .iter()
                .map(|(shape, dtype)| {
                    shape
                        .iter()
                        .fold(dtype.size(), |acc, &d| acc.saturating_mul(d))
                })
                .fold(0usize, usize::saturating_add)
        };
        let call = self.call(
            &input,
            None,
            state,
            reserve,
            no_identity,
            crate::backend::concat_parts::<B>,
        );
        call.desc.check_inputs(
            &input.dims(),
            call.h0.as_ref().map(|h| h.dims()).as_ref().map(|d| &d[..]),
            call.c0.as_ref().map(|c| c.dims()).as_ref().map(|d| &d[..]),
            &call.weights.dims(),
        );
        let device = input.device();
        let inputs = crate::op_types::RnnInputs {
            x: prim(input),
            h0: call.h0.map(prim),
            c0: call.c0.map(prim),
            weights: prim(call.weights),
        };
        let out = if call.desc.dropout.probability > 0.0 && B::ad_enabled(&device) {
            crate::reference::forward_training::<B>(&call.desc, inputs).0
        } else {
            crate::reference::forward::<B>(&call.desc, inputs)
        };
        (
            float(out.y),
            RnnState::new(float(out.h_n), out.c_n.map(float)),
        )
    }
}

impl<B: FusedRnnBackend> FusedRnn<B> {
    /// Runs every layer and direction over full-length sequences.
    ///
    /// # Shapes
    ///
    /// - `input`: `[batch_size, seq_length, d_input]` if batch-first, else
    ///   `[seq_length, batch_size, d_input]`.
    /// - `state`: `hidden` `[L*D, batch_size, P]`, `cell` `[L*D, batch_size, H]` (LSTM);
    ///   zeros when `None`. An LSTM needs both: a state without `cell` is refused.
    ///
    /// # Returns
    ///
    /// The output `[batch_size, seq_length, D*P]` (or sequence-first) and the final state.
    ///
    /// # Panics
    ///
    /// With "expected …, got …" naming the argument when a shape does not fit, an LSTM's
    /// state has no cell state, or the call's buffers cannot be allocated (Note
    /// [Allocation checks]).
    pub fn forward(
        &self,
        input: Tensor<B, 3>,
        state: Option<RnnState<B>>,
    ) -> (Tensor<B, 3>, RnnState<B>) {
        self.run(input, None, state)
    }

    /// Like [`FusedRnn::forward`], for a padded batch of sequences of different lengths.
    ///
    /// `seq_lengths[b]` (in `0..=seq_length`, any order) is the valid length of sequence `b`.
    /// Outputs past a sequence's end are zero; its final state is taken at its last valid
    /// step, and the reverse direction starts there; a length of 0 gives zero outputs and
    /// the initial state as final state.
    pub fn forward_with_lengths(
        &self,
        input: Tensor<B, 3>,
        seq_lengths: &[usize],
        state: Option<RnnState<B>>,
    ) -> (Tensor<B, 3>, RnnState<B>) {
        self.run(input, Some(seq_lengths.to_vec()), state)
    }

    fn run(
        &self,
        input: Tensor<B, 3>,
        seq_lengths: Option<Vec<usize>>,
        state: Option<RnnState<B>>,
    ) -> (Tensor<B, 3>, RnnState<B>) {
        let call = self.call(
            &input,
            seq_lengths,
            state,
            |desc, dtype, device| crate::ops::reserve_bytes::<B>(desc, dtype, device),
            B::fused_rnn_buffer_identity,
            B::fused_rnn_concat,
        );
        let out = fused_rnn(&call.desc, input, call.h0, call.c0, call.weights);
        (out.output, RnnState::new(out.hidden, out.cell))
    }
}
