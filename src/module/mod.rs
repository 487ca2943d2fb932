//! The [`FusedRnn`] module: canonical per-matrix parameters, a fused forward, checked
//! record loading.

mod digest;
mod file;
mod load_error;
mod record;
mod step;

pub use digest::WeightsDigest;
pub use load_error::{FileProblem, FusedRnnLoadError};
pub use record::FusedRnnRecord;
pub use step::PreparedRnn;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use burn::module::{Initializer, Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::backend::FusedRnnBackend;
use crate::config::{FusedRnnConfig, RnnSpec};
use crate::descriptor::{DropoutSpec, RnnDescriptor};
use crate::layout::{ParamEntry, ParamKind, RnnLayout};
use crate::ops::fused_rnn;

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

/// Recurrent state: `[L*D, batch_size, P]` hidden and, for LSTM, `[L*D, batch_size, H]` cell,
/// indexed by `layer * D + direction`.
///
/// Build it with the named constructors, [`RnnState::lstm`]`(hidden, cell)` (PyTorch's
/// `(h_0, c_0)` order) and [`RnnState::hidden_only`]`(hidden)` (GRU, RNN), or from burn-nn's
/// states with `From` (by field). Both tensors of an LSTM state have the same type, so no
/// constructor can stop a swapped call from compiling: the names say the order, and
/// burn-nn's `LstmState::new(cell, hidden)` takes the opposite one.
#[derive(Debug, Clone)]
pub struct RnnState<B: Backend> {
    /// Hidden state `h`.
    pub hidden: Tensor<B, 3>,
    /// Cell state `c` (LSTM only).
    pub cell: Option<Tensor<B, 3>>,
}

impl<B: Backend> RnnState<B> {
    /// A state from its parts, hidden first. Kept for existing code; prefer
    /// [`RnnState::lstm`] and [`RnnState::hidden_only`], whose names say what each
    /// argument is.
    pub fn new(hidden: Tensor<B, 3>, cell: Option<Tensor<B, 3>>) -> Self {
        Self { hidden, cell }
    }

    /// An LSTM state: hidden `[L*D, batch_size, P]`, then cell `[L*D, batch_size, H]`
    /// (PyTorch's `(h_0, c_0)` order; burn-nn's `LstmState::new` takes `(cell, hidden)`).
    pub fn lstm(hidden: Tensor<B, 3>, cell: Tensor<B, 3>) -> Self {
        Self {
            hidden,
            cell: Some(cell),
        }
    }

    /// A GRU or RNN state: hidden `[L*D, batch_size, H]` only.
    pub fn hidden_only(hidden: Tensor<B, 3>) -> Self {
        Self { hidden, cell: None }
    }

    /// This state with the cell state `cell` (`[L*D, batch_size, H]`), e.g.
    /// `RnnState::hidden_only(h).with_cell(c)`.
    pub fn with_cell(self, cell: Tensor<B, 3>) -> Self {
        Self {
            cell: Some(cell),
            ..self
        }
    }

    /// The state of a stack from the states of its parts, bottom first (concatenated along
    /// the first axis): e.g. the per-layer states of a stack of burn-nn layers.
    ///
    /// # Panics
    ///
    /// If `parts` is empty, or some parts have a cell state and others not.
    pub fn from_layers(parts: Vec<RnnState<B>>) -> Self {
        assert!(!parts.is_empty(), "expected at least one state, got none");
        let with_cell = parts.iter().filter(|p| p.cell.is_some()).count();
        assert!(
            with_cell == 0 || with_cell == parts.len(),
            "expected every state to have a cell state or none to, got {with_cell} of {}",
            parts.len()
        );
        let (hidden, cell): (Vec<_>, Vec<_>) =
            parts.into_iter().map(|p| (p.hidden, p.cell)).unzip();
        Self {
            hidden: Tensor::cat(hidden, 0),
            cell: (with_cell > 0).then(|| Tensor::cat(cell.into_iter().flatten().collect(), 0)),
        }
    }

    /// Splits the state into `parts` equal states along the first axis, bottom first: for
    /// a module with `L` layers and `D` directions, `into_layers(L)` gives one
    /// `[D, batch_size, _]` state per layer (the inverse of [`RnnState::from_layers`]).
    ///
    /// # Panics
    ///
    /// If the first axis is not a multiple of `parts`.
    pub fn into_layers(self, parts: usize) -> Vec<RnnState<B>> {
        let [n, _, _] = self.hidden.dims();
        assert!(
            parts > 0 && n % parts == 0,
            "expected parts dividing the state's first axis {n}, got {parts}"
        );
        let hidden = self.hidden.chunk(parts, 0);
        let cells = match self.cell {
            Some(c) => c.chunk(parts, 0).into_iter().map(Some).collect(),
            None => vec![None; parts],
        };
        hidden
            .into_iter()
            .zip(cells)
            .map(|(hidden, cell)| Self { hidden, cell })
            .collect()
    }
}

/// A stack of LSTM, GRU or plain RNN layers, in one or both directions, run as ONE fused
/// op (cuDNN on CUDA, the reference implementation elsewhere).
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
}

impl FusedRnnConfig {
    /// Builds the module, weights initialized as described on
    /// [`FusedRnnConfig::initializer`].
    ///
    /// # Panics
    ///
    /// If the configuration is invalid (see [`FusedRnnConfig::spec`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> FusedRnn<B> {
        let spec = self.spec();
        let k = 1.0 / (self.d_hidden as f64).sqrt();
        let default = Initializer::Uniform { min: -k, max: k };
        let (matrix_init, bias_init) = match &self.initializer {
            None => (default.clone(), default),
            Some(init) => (init.clone(), Initializer::Zeros),
        };
        let cells = build_cells(
            &RnnLayout::new(spec),
            |e| {
                let [rows, cols] = [e.shape[0], e.shape[1]];
                matrix_init.init_with([rows, cols], Some(cols), Some(rows), device)
            },
            |e| bias_init.init([e.shape[0]], device),
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
        }
    }
}

/// One [`RnnCell`] per pseudo-layer, each tensor made from its layout entry.
fn build_cells<B: Backend>(
    layout: &RnnLayout,
    matrix: impl Fn(&ParamEntry) -> Param<Tensor<B, 2>>,
    bias: impl Fn(&ParamEntry) -> Param<Tensor<B, 1>>,
) -> Vec<RnnCell<B>> {
    let spec = layout.spec();
    let nd = spec.num_directions();
    (0..spec.num_pseudo_layers())
        .map(|idx| {
            let (layer, direction) = (idx / nd, idx % nd);
            let entry = |kind| layout.entry(layer, direction, kind);
            RnnCell {
                weight_ih: entry(ParamKind::WeightIh).map(&matrix),
                weight_hh: matrix(entry(ParamKind::WeightHh).expect("W_hh always exists")),
                bias_ih: entry(ParamKind::BiasIh).map(&bias),
                bias_hh: entry(ParamKind::BiasHh).map(&bias),
                weight_hr: entry(ParamKind::WeightHr).map(&matrix),
            }
        })
        .collect()
}

impl<B: Backend> RnnCell<B> {
    /// The tensor of `kind`, flattened, with its shape; `None` when absent.
    fn flat(&self, kind: ParamKind) -> Option<(Tensor<B, 1>, Vec<usize>)> {
        let m = |p: &Param<Tensor<B, 2>>| {
            let t = p.val();
            let dims = t.dims().to_vec();
            (t.reshape([dims[0] * dims[1]]), dims)
        };
        let b = |p: &Param<Tensor<B, 1>>| {
            let t = p.val();
            let dims = t.dims().to_vec();
            (t, dims)
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

    /// The flat canonical params vector `[params_size]` (TF's `canonical_to_params`), in
    /// the order of Note [RNN weight layout]. Gradients flow back to each parameter.
    ///
    /// # Panics
    ///
    /// If a parameter is missing, present where the layout has none, or of the wrong
    /// shape (possible only after an unchecked `load_record`), naming the tensor.
    pub fn flat_weights(&self) -> Tensor<B, 1> {
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
                match (expected, cell.flat(kind)) {
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
        Tensor::cat(parts, 0)
    }
}

impl<B: FusedRnnBackend> FusedRnn<B> {
    /// The dropout of this call: fresh masks for every training forward, reproducible from
    /// the config's seed (Note [Dropout seeds]).
    fn call_dropout(&self, device: &B::Device) -> DropoutSpec {
        if self.dropout.probability == 0.0 || !B::ad_enabled(device) {
            return self.dropout;
        }
        let call = self.dropout_calls.fetch_add(1, Ordering::Relaxed);
        DropoutSpec {
            probability: self.dropout.probability,
            seed: crate::reference::mix_seed(self.dropout.seed, call),
        }
    }

    /// Runs every layer and direction over full-length sequences.
    ///
    /// # Shapes
    ///
    /// - `input`: `[batch_size, seq_length, d_input]` if batch-first, else
    ///   `[seq_length, batch_size, d_input]`.
    /// - `state`: `hidden` `[L*D, batch_size, P]`, `cell` `[L*D, batch_size, H]` (LSTM);
    ///   zeros when `None`.
    ///
    /// # Returns
    ///
    /// The output `[batch_size, seq_length, D*P]` (or sequence-first) and the final state.
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
        let desc = RnnDescriptor::new(
            self.spec,
            seq,
            batch,
            self.batch_first,
            seq_lengths,
            self.call_dropout(&input.device()),
        );
        let (h0, c0) = match state {
            Some(s) => (Some(s.hidden), s.cell),
            None => (None, None),
        };
        // The module runs in its input's dtype: weights are cast to it (a tracked cast, so
        // gradients reach the parameters in their own dtype), states must match it.
        let weights = self.flat_weights();
        let weights = if weights.dtype() == input.dtype() {
            weights
        } else {
            weights.cast(input.dtype())
        };
        let out = fused_rnn(&desc, input, h0, c0, weights);
        (out.output, RnnState::new(out.hidden, out.cell))
    }
}
