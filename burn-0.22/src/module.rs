//! The [`FusedRnn`] module: one parameter per canonical tensor, named as PyTorch names it,
//! and a fused forward.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use burn::module::{
    Content, Devices, Initializer, Module, ModuleDisplay, ModuleDisplayDefault, ModuleMapper,
    ModuleVisitor, Param,
};
use burn::tensor::{Device, Tensor};

use crate::config::FusedRnnConfig;
use crate::descriptor::{DropoutSpec, RnnDescriptor};
use crate::layout::{ParamEntry, RnnLayout};
use crate::ops::{buffer_identity, fused_rnn, is_tracked};
use crate::spec::RnnSpec;
use burn_fused_rnn_core::memo::BufferMemo;

/// One canonical tensor: a matrix (`weight_*`) or a vector (`bias_*`).
#[derive(Clone, Debug)]
enum Weight {
    Matrix(Param<Tensor<2>>),
    Vector(Param<Tensor<1>>),
}

impl Weight {
    /// The tensor, flattened.
    fn flat(&self) -> Tensor<1> {
        match self {
            Weight::Matrix(p) => p.val().flatten(0, 1),
            Weight::Vector(p) => p.val(),
        }
    }
}

/// A stack of LSTM, GRU or plain RNN layers, in one or both directions, run as ONE fused
/// op: the native CPU kernel on NdArray and Flex (one backward node per call under
/// autodiff), the reference implementation on every other device (Note [Call routing] in
/// [`crate::ops`]).
///
/// # Note [Parameter names]
///
/// The module holds one parameter per canonical tensor (Note [RNN weight layout] in
/// [`crate::layout`]), named exactly as PyTorch names it: `weight_ih_l0`,
/// `weight_hh_l0_reverse`, `bias_ih_l1`, `weight_hr_l0`, ... So a model holding a
/// `FusedRnn` in field `rnn` saves it under the keys `rnn.weight_ih_l0`, ..., which are the
/// keys of a PyTorch model whose `nn.LSTM` sits in attribute `rnn`: Burn's `save_file` /
/// `load_file` and burn-store's safetensors and PyTorch stores read and write PyTorch's
/// names with no remapping.
///
/// # Note [Dropout seeds]
///
/// Dropout (between layers, never after the last) applies only in training calls, those
/// with a tracked tensor (Note [Call routing]). Training call `k` of a module made with seed `s`
/// draws its masks from `(s, k)`, so every step gets fresh masks while two modules with the
/// same seed see the same sequence; clones share the count.
#[derive(Clone, Debug)]
pub struct FusedRnn {
    /// The canonical tensors in the flat order, with their PyTorch names.
    weights: Vec<(String, Weight)>,
    spec: RnnSpec,
    batch_first: bool,
    dropout: DropoutSpec,
    /// Training forwards run so far (shared by clones).
    dropout_calls: Arc<AtomicU64>,
    /// The flat weights of the last inference call and what they were built from (Note
    /// [Flat weights across calls]); a clone, and a module whose parameters were mapped,
    /// start empty.
    flat_memo: FlatMemo,
}

/// A module's memo of its flat weights, keeping clones of the parameters it was
/// concatenated from (Note [Flat weights across calls] in the core crate's `memo`);
/// cloning gives an empty one.
type FlatMemo = BufferMemo<Vec<Weight>, Tensor<1>>;

/// The container type under which a `FusedRnn` visits its parameters (Burn's module
/// visitors see it; `checkpoint` finds the layers of a model by it).
pub(crate) const CONTAINER: &str = "Struct:FusedRnn";

impl Module for FusedRnn {
    fn visit<V: ModuleVisitor>(&self, visitor: &mut V) {
        for (name, weight) in &self.weights {
            visitor.enter_module(name, CONTAINER);
            match weight {
                Weight::Matrix(p) => p.visit(visitor),
                Weight::Vector(p) => p.visit(visitor),
            }
            visitor.exit_module(name, CONTAINER);
        }
    }

    fn map<M: ModuleMapper>(self, mapper: &mut M) -> Self {
        let weights = self
            .weights
            .into_iter()
            .map(|(name, weight)| {
                mapper.enter_module(&name, CONTAINER);
                let weight = match weight {
                    Weight::Matrix(p) => Weight::Matrix(Module::map(p, mapper)),
                    Weight::Vector(p) => Weight::Vector(Module::map(p, mapper)),
                };
                mapper.exit_module(&name, CONTAINER);
                (name, weight)
            })
            .collect();
        Self {
            weights,
            flat_memo: FlatMemo::default(),
            ..self
        }
    }

    fn collect_devices(&self, devices: Devices) -> Devices {
        self.weights
            .iter()
            .fold(devices, |devices, (_, weight)| match weight {
                Weight::Matrix(p) => p.collect_devices(devices),
                Weight::Vector(p) => p.collect_devices(devices),
            })
    }

    fn to_device(self, device: &Device) -> Self {
        self.each(|w| match w {
            Weight::Matrix(p) => Weight::Matrix(p.to_device(device)),
            Weight::Vector(p) => Weight::Vector(p.to_device(device)),
        })
    }

    fn fork(self, device: &Device) -> Self {
        self.each(|w| match w {
            Weight::Matrix(p) => Weight::Matrix(p.fork(device)),
            Weight::Vector(p) => Weight::Vector(p.fork(device)),
        })
    }

    fn valid(&self) -> Self {
        self.clone().each(|w| match w {
            Weight::Matrix(p) => Weight::Matrix(p.valid()),
            Weight::Vector(p) => Weight::Vector(p.valid()),
        })
    }

    fn train(self) -> Self {
        self.each(|w| match w {
            Weight::Matrix(p) => Weight::Matrix(p.train()),
            Weight::Vector(p) => Weight::Vector(p.train()),
        })
    }

    fn materialize(self) -> Self {
        self.each(|w| match w {
            Weight::Matrix(p) => Weight::Matrix(p.materialize()),
            Weight::Vector(p) => Weight::Vector(p.materialize()),
        })
    }
}

impl ModuleDisplayDefault for FusedRnn {
    fn content(&self, content: Content) -> Option<Content> {
        let spec = &self.spec;
        content
            .add("mode", &format!("{:?}", spec.mode))
            .add("d_input", &spec.d_input)
            .add("d_hidden", &spec.d_hidden)
            .add("num_layers", &spec.num_layers)
            .add("bidirectional", &spec.bidirectional)
            .add("params", &self.layout().params_size())
            .optional()
    }

    fn num_params(&self) -> usize {
        self.layout().params_size()
    }
}

impl ModuleDisplay for FusedRnn {}

impl FusedRnnConfig {
    /// Builds the module, weights initialized as described on
    /// [`FusedRnnConfig::initializer`]: every parameter is drawn here, eagerly, so a clone
    /// of the new module holds the same weights.
    ///
    /// Dropout with one layer does nothing (it acts between layers); as PyTorch does, this
    /// warns through the `log` crate.
    ///
    /// # Panics
    ///
    /// If the configuration is invalid (see [`FusedRnnConfig::spec`]).
    pub fn init(&self, device: &Device) -> FusedRnn {
        let spec = self.spec();
        self.warn_unused_dropout();
        let k = 1.0 / (self.d_hidden as f64).sqrt();
        let default = Initializer::Uniform { min: -k, max: k };
        let (matrix_init, bias_init) = match &self.initializer {
            None => (default.clone(), default),
            Some(init) => (init.clone(), Initializer::Zeros),
        };
        self.assemble(spec, |e| match e.shape[..] {
            [rows, cols] => Weight::Matrix(eager(matrix_init.init_with(
                [rows, cols],
                Some(cols),
                Some(rows),
                device,
            ))),
            _ => Weight::Vector(eager(bias_init.init([e.shape[0]], device))),
        })
    }

    /// Builds the module from a flat canonical params vector `[params_size]` (TF's
    /// `params_to_canonical`): the inverse of [`FusedRnn::flat_weights`].
    ///
    /// # Panics
    ///
    /// If the configuration is invalid, or `params` is not `[params_size]`.
    pub fn init_with_params(&self, params: Tensor<1>) -> FusedRnn {
        let spec = self.spec();
        self.warn_unused_dropout();
        let layout = RnnLayout::new(spec);
        let [len] = params.dims();
        assert!(
            len == layout.params_size(),
            "expected params of shape [params_size] = [{}], got [{len}]",
            layout.params_size()
        );
        self.assemble(spec, |e| {
            let part = params.clone().narrow(0, e.offset, e.len());
            match e.shape[..] {
                [rows, cols] => Weight::Matrix(Param::from_tensor(part.reshape([rows, cols]))),
                _ => Weight::Vector(Param::from_tensor(part)),
            }
        })
    }

    fn assemble(&self, spec: RnnSpec, weight: impl Fn(&ParamEntry) -> Weight) -> FusedRnn {
        let layout = RnnLayout::new(spec);
        let mut entries: Vec<&ParamEntry> = layout.entries().iter().collect();
        entries.sort_by_key(|e| e.offset);
        FusedRnn {
            weights: entries.iter().map(|e| (e.name(), weight(e))).collect(),
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

/// The parameter with its value drawn now (Burn draws a parameter's initial value when it
/// is first read; a clone of a parameter never read would draw its own).
fn eager<const D: usize>(param: Param<Tensor<D>>) -> Param<Tensor<D>> {
    let _ = param.val();
    param
}

impl FusedRnn {
    fn each(self, f: impl Fn(Weight) -> Weight) -> Self {
        Self {
            weights: self
                .weights
                .into_iter()
                .map(|(name, w)| (name, f(w)))
                .collect(),
            flat_memo: FlatMemo::default(),
            ..self
        }
    }

    /// The network this module runs.
    pub fn spec(&self) -> &RnnSpec {
        &self.spec
    }

    /// The canonical layout of its weights.
    pub fn layout(&self) -> RnnLayout {
        RnnLayout::new(self.spec)
    }

    /// Whether inputs and outputs are `[batch_size, seq_length, features]`.
    pub fn batch_first(&self) -> bool {
        self.batch_first
    }

    /// The configuration that builds a module like this one (its weights aside).
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

    /// The canonical tensors with their PyTorch names, in the flat order.
    pub fn named_weights(&self) -> Vec<(String, Tensor<1>)> {
        self.weights
            .iter()
            .map(|(name, w)| (name.clone(), w.flat()))
            .collect()
    }

    /// The flat canonical params vector `[params_size]` (TF's `canonical_to_params`),
    /// differentiable with respect to every parameter.
    pub fn flat_weights(&self) -> Tensor<1> {
        Tensor::cat(self.weights.iter().map(|(_, w)| w.flat()).collect(), 0)
    }

    /// [`FusedRnn::flat_weights`], kept from the last call while every parameter is an
    /// untracked tensor of a native CPU backend (NdArray, Flex) in the same buffer (Note
    /// [Flat weights across calls] in the core crate's `memo`: why the same buffers mean
    /// the same values, and what it buys: a module's inference calls, and one-step
    /// `forward`s, find their packed weights again). Tracked parameters (training), or
    /// parameters on another device, are concatenated every time.
    fn flat_weights_for_call(&self) -> Tensor<1> {
        let params: Vec<Weight> = self.weights.iter().map(|(_, w)| w.clone()).collect();
        let ids: Option<Vec<(usize, usize)>> = params
            .iter()
            .map(|w| match w {
                Weight::Matrix(p) => {
                    let t = p.val();
                    if is_tracked(&t) {
                        None
                    } else {
                        buffer_identity(&t)
                    }
                }
                Weight::Vector(p) => {
                    let t = p.val();
                    if is_tracked(&t) {
                        None
                    } else {
                        buffer_identity(&t)
                    }
                }
            })
            .collect();
        let Some(ids) = ids else {
            return self.flat_weights();
        };
        self.flat_memo
            .get_or_build(ids, params, || self.flat_weights())
    }

    /// The gradient of every canonical tensor in `grads`, flattened in the flat order
    /// (`[params_size]`, the layout of [`FusedRnn::flat_weights`]); `None` when a
    /// parameter has no gradient there (it was not used, or does not require one).
    #[cfg(feature = "autodiff")]
    pub fn flat_grad(&self, grads: &burn::tensor::Gradients) -> Option<Tensor<1>> {
        let parts = self
            .weights
            .iter()
            .map(|(_, w)| match w {
                Weight::Matrix(p) => p.val().grad(grads).map(|g| g.flatten(0, 1)),
                Weight::Vector(p) => p.val().grad(grads),
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Tensor::cat(parts, 0))
    }

    /// Runs every layer and direction over `input` in one fused call.
    ///
    /// `input` is `[batch_size, seq_length, d_input]` when batch-first, else
    /// `[seq_length, batch_size, d_input]`; `state` (zeros when `None`) is `[L*D,
    /// batch_size, P]` hidden and, for LSTM, `[L*D, batch_size, H]` cell. Returns the
    /// output `[.., D*P]` and the final state.
    ///
    /// # Panics
    ///
    /// With "expected …, got …" naming the argument when a shape does not fit.
    pub fn forward(&self, input: Tensor<3>, state: Option<RnnState>) -> (Tensor<3>, RnnState) {
        self.run(input, None, state)
    }

    /// [`FusedRnn::forward`] over a padded batch: sequence `b` has `seq_lengths[b]` valid
    /// steps. Outputs past a sequence's end are zero, its final state is taken at its last
    /// valid step (the reverse direction starts there), and padding never influences
    /// anything (Note [Padding never leaks] in the core crate's `semantics`).
    pub fn forward_with_lengths(
        &self,
        input: Tensor<3>,
        seq_lengths: &[usize],
        state: Option<RnnState>,
    ) -> (Tensor<3>, RnnState) {
        self.run(input, Some(seq_lengths.to_vec()), state)
    }

    fn run(
        &self,
        input: Tensor<3>,
        seq_lengths: Option<Vec<usize>>,
        state: Option<RnnState>,
    ) -> (Tensor<3>, RnnState) {
        let [d0, d1, _] = input.dims();
        let (batch, seq) = if self.batch_first { (d0, d1) } else { (d1, d0) };
        if batch == 0 || seq == 0 {
            let layout = if self.batch_first {
                "[batch_size, seq_length, d_input]"
            } else {
                "[seq_length, batch_size, d_input]"
            };
            let dim = if batch == 0 {
                "batch_size"
            } else {
                "seq_length"
            };
            panic!(
                "expected input of shape {layout} with {dim} > 0, got {:?}",
                input.dims()
            );
        }
        let (h0, c0) = split_state(&self.spec, state);
        let weights = self.flat_weights_for_call();
        let dtype = input.dtype();
        let weights = if weights.dtype() == dtype {
            weights
        } else {
            weights.cast(dtype)
        };
        let desc = RnnDescriptor::new(
            self.spec,
            seq,
            batch,
            self.batch_first,
            seq_lengths,
            self.call_dropout(&input, &weights),
        );
        let out = fused_rnn(&desc, input, h0, c0, weights);
        (out.output, RnnState::new(out.hidden, out.cell))
    }

    /// The dropout of one call: training calls (Note [Dropout seeds]) advance the count.
    fn call_dropout(&self, input: &Tensor<3>, weights: &Tensor<1>) -> DropoutSpec {
        if self.dropout.probability == 0.0 || !(is_tracked(input) || is_tracked(weights)) {
            return self.dropout;
        }
        let call = self.dropout_calls.fetch_add(1, Ordering::Relaxed);
        DropoutSpec {
            probability: self.dropout.probability,
            seed: burn_fused_rnn_core::dropout::mix_seed(self.dropout.seed, call),
        }
    }
}

/// The initial states of a call from `state` (an LSTM's must hold a cell state).
pub(crate) fn split_state(
    spec: &RnnSpec,
    state: Option<RnnState>,
) -> (Option<Tensor<3>>, Option<Tensor<3>>) {
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

/// Recurrent state: `[L*D, batch_size, P]` hidden and, for LSTM, `[L*D, batch_size, H]`
/// cell, indexed by `layer * D + direction`.
///
/// Build it with [`RnnState::lstm`]`(hidden, cell)` (PyTorch's `(h_0, c_0)` order) or
/// [`RnnState::hidden_only`]`(hidden)` (GRU, RNN). burn-nn's `LstmState::new` takes the
/// opposite order, `(cell, hidden)`.
#[derive(Debug, Clone)]
pub struct RnnState {
    /// Hidden state `h`.
    pub hidden: Tensor<3>,
    /// Cell state `c` (LSTM only).
    pub cell: Option<Tensor<3>>,
}

impl RnnState {
    /// A state from its parts, hidden first.
    pub fn new(hidden: Tensor<3>, cell: Option<Tensor<3>>) -> Self {
        Self { hidden, cell }
    }

    /// An LSTM state: hidden `[L*D, batch_size, P]`, then cell `[L*D, batch_size, H]`.
    pub fn lstm(hidden: Tensor<3>, cell: Tensor<3>) -> Self {
        Self {
            hidden,
            cell: Some(cell),
        }
    }

    /// A GRU or RNN state: hidden `[L*D, batch_size, H]` only. An LSTM refuses it.
    pub fn hidden_only(hidden: Tensor<3>) -> Self {
        Self { hidden, cell: None }
    }
}
