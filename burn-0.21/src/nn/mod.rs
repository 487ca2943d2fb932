//! Drop-in replacements for burn-nn's recurrent layers, running the fused op inside.
//!
//! `Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn` and `BiRnn`, with their configs, have burn-nn
//! 0.21's names, constructor arguments, builder methods, `forward` signatures and state
//! types (`LstmState` and `RnnState` are burn-nn's own, re-exported), so that a model
//! written against `burn::nn` moves over by changing its `use` line:
//!
//! ```
//! // use burn::nn::{Lstm, LstmConfig, LstmState};
//! use burn_fused_rnn::nn::{Lstm, LstmConfig, LstmState};
//!
//! use burn::backend::NdArray;
//! use burn::tensor::{Distribution, Tensor};
//!
//! let device = Default::default();
//! let lstm: Lstm<NdArray> = LstmConfig::new(8, 16, true).init(&device);
//! let x = Tensor::<NdArray, 3>::random([4, 10, 8], Distribution::Default, &device);
//! let h0 = Tensor::zeros([4, 16], &device);
//! let c0 = Tensor::zeros([4, 16], &device);
//! let (y, state) = lstm.forward(x, Some(LstmState::new(c0, h0))); // burn-nn's order: (cell, hidden)
//! assert_eq!(y.dims(), [4, 10, 16]);
//! assert_eq!(state.hidden.dims(), [4, 16]);
//! ```
//!
//! # Note [Drop-in layers]
//!
//! - **Same API.** Configs are `XConfig::new(d_input, d_hidden, bias)` with burn-nn's
//!   fields and defaults (`initializer = XavierNormal { gain: 1.0 }`, `batch_first = true`,
//!   `reverse`, `clip`, `input_forget`, the activations, GRU's `reset_after`). `forward`
//!   takes and returns what burn-nn's does: `Lstm` 2-D `LstmState`s, `BiLstm` 3-D ones,
//!   `Gru` an optional `[batch_size, d_hidden]` state and one output tensor, `BiGru` a
//!   `[2, batch_size, d_hidden]` state, `Rnn` / `BiRnn` burn-nn's `RnnState`.
//! - **Same weights' distributions.** Each gate's matrices and biases are drawn by the
//!   config's initializer with burn-nn's shapes and fans, so a model keeps its
//!   initialization. They are drawn when `init` runs (eagerly), not at first use.
//! - **Options beyond burn-nn's.** `num_layers` stacks layers in ONE fused op (layer `k`
//!   takes layer `k - 1`'s output), `dropout` acts between them in training, `seed` seeds
//!   the dropout masks. With `num_layers > 1`, `Lstm`, `Gru` and `Rnn` return the top
//!   layer's final state, and refuse an initial state (a 2-D state holds one layer); the
//!   `Bi*` layers take and return `[2 * num_layers, batch_size, d_hidden]` states, layer
//!   `l`'s directions at `2l` (forward) and `2l + 1` (reverse), PyTorch's order.
//!   `forward_stack` takes and returns every layer's state as this crate's
//!   [`RnnState`](crate::RnnState), and [`Lstm::fused`] (on each type) gives the fused
//!   module, e.g. for variable-length batches.
//! - **What the fused cells cannot compute is refused** when `init` runs, with a panic
//!   naming the field: `clip`, `input_forget`, activations other than the standard ones
//!   (sigmoid gates, tanh candidates; tanh or relu for `Rnn`), and `reset_after = false`.
//!   Use burn-nn's layer for those. `reverse` is supported (the sequence is flipped
//!   around a forward run).
//! - **Checkpoints.** A drop-in saves the canonical
//!   [`FusedRnnRecord`](crate::FusedRnnRecord) (PyTorch's names and orientation): a file
//!   saved from a drop-in loads into a [`FusedRnn`] and back. Its record type
//!   ([`LstmRecord`], ...: a [`DropInRecord`]) also reads **burn-nn's layout**, so a
//!   **whole model's checkpoint written while the model held burn-nn's layers loads after
//!   the `use` swap** through the model's own `load_file` / `load_record`, with every
//!   file recorder of Burn 0.21 at any precision (Note [Two layouts, one record] in
//!   `nn::record`). The burn-nn record is checked against the drop-in's configuration
//!   (sizes, bias, layers, finite weights); a mismatch panics naming the layer type, its
//!   configuration and the tensor (Burn's `load_record` cannot return an error, and does
//!   not know the field's path in the model). Saving again writes the canonical layout.
//!   On one layer, `try_load_file` / `try_load_record` take either layout and return
//!   errors instead, and `load_burn_nn_file(path, &recorder, &device)` /
//!   `load_burn_nn_record(record)` read burn-nn's alone.
//! - **Fields.** `d_hidden`, `batch_first` and `reverse` are public fields, as in burn-nn,
//!   and `forward` reads `batch_first` and `reverse` from them. burn-nn's other fields
//!   (`input_gate`, `forward`, ...) do not exist: the weights are the canonical tensors of
//!   [`Lstm::fused`]. Outputs agree with burn-nn's to float rounding (tested on random
//!   inputs for every type).

mod dispatch;
mod gru;
mod lstm;
mod record;
mod rnn;

pub use burn::nn::{LstmState, RnnState};
pub use gru::{BiGru, BiGruConfig, BiGruRecord, Gru, GruConfig, GruRecord};
pub use lstm::{BiLstm, BiLstmConfig, BiLstmRecord, Lstm, LstmConfig, LstmRecord};
pub use record::{DropInRecord, DropInRecordItem};
pub use rnn::{BiRnn, BiRnnConfig, BiRnnRecord, Rnn, RnnConfig, RnnRecord};

use burn::nn::activation::ActivationConfig;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::interop::burn_nn::{stack_canonical, BurnNnLayer};
use crate::interop::InteropError;
use crate::module::FusedRnn;

/// Panics naming `field` of config `config` when `value` is not what the fused cells
/// compute; `use_instead` names the burn-nn type that can.
fn refuse(
    config: &str,
    field: &str,
    value: impl core::fmt::Debug,
    why: &str,
    use_instead: &str,
) -> ! {
    panic!(
        "invalid {config}: {why}, got {field} = {value:?}; the fused op cannot compute it (use \
         burn::nn::{use_instead} for this option)"
    )
}

/// Whether `activation` is `expected` (`"Sigmoid"`, `"Tanh"` or `"Relu"`).
fn is_activation(activation: &ActivationConfig, expected: &str) -> bool {
    matches!(
        (activation, expected),
        (ActivationConfig::Sigmoid, "Sigmoid")
            | (ActivationConfig::Tanh, "Tanh")
            | (ActivationConfig::Relu, "Relu")
    )
}

/// Refuses an activation other than `expected` in field `field`.
fn check_activation(
    config: &str,
    field: &str,
    activation: &ActivationConfig,
    expected: &str,
    use_instead: &str,
) {
    if !is_activation(activation, expected) {
        refuse(
            config,
            field,
            activation,
            &format!("expected {field} = ActivationConfig::{expected}"),
            use_instead,
        );
    }
}

/// Refuses `clip = Some(..)`.
fn check_clip(config: &str, clip: Option<f64>, what: &str, use_instead: &str) {
    if clip.is_some() {
        refuse(
            config,
            "clip",
            clip,
            &format!("expected clip = None (the fused cells, as cuDNN's, do not clip the {what})"),
            use_instead,
        );
    }
}

/// `x` with its time axis reversed (axis 1 batch-first, 0 otherwise).
fn flip_time<B: Backend>(x: Tensor<B, 3>, batch_first: bool) -> Tensor<B, 3> {
    x.flip([if batch_first { 1 } else { 0 }])
}

/// The fused module's forward over full-length sequences (Note [Drop-in dispatch]), in
/// the layout `batch_first` (the layer's public field, which may differ from the fused
/// module's), with the time axis flipped around it for a `reverse` layer.
fn run<B: Backend>(
    fused: &FusedRnn<B>,
    batch_first: bool,
    reverse: bool,
    input: Tensor<B, 3>,
    state: Option<crate::RnnState<B>>,
) -> (Tensor<B, 3>, crate::RnnState<B>) {
    let swap = batch_first != fused.batch_first();
    let input = if swap { input.swap_dims(0, 1) } else { input };
    let inner = fused.batch_first();
    let (y, state) = if reverse {
        let (y, state) = dispatch::forward(fused, flip_time(input, inner), state);
        (flip_time(y, inner), state)
    } else {
        dispatch::forward(fused, input, state)
    };
    (if swap { y.swap_dims(0, 1) } else { y }, state)
}

/// A one-layer state `[batch_size, H]` as the `[1, batch_size, H]` state of the fused
/// module, which must have one layer and one direction.
///
/// # Panics
///
/// If the module has more than one layer: a 2-D state holds one layer's.
fn one_layer<B: Backend>(fused: &FusedRnn<B>, name: &str, t: Tensor<B, 2>) -> Tensor<B, 3> {
    let layers = fused.spec().num_layers;
    assert!(
        layers == 1,
        "expected no initial state for a {name} with num_layers = {layers} (a 2-D state \
         [batch_size, d_hidden] holds one layer's), got one of shape {:?}; use forward_stack \
         for the states of every layer",
        t.dims()
    );
    t.unsqueeze_dim(0)
}

/// The top layer's part `[batch_size, H]` of a `[L, batch_size, H]` state.
fn top_layer<B: Backend>(t: Tensor<B, 3>) -> Tensor<B, 2> {
    let [n, _, _] = t.dims();
    t.narrow(0, n - 1, 1).squeeze_dim(0)
}

/// The device of a module's weights.
fn device_of<B: Backend>(fused: &FusedRnn<B>) -> B::Device {
    fused.cells[0].weight_hh.lazy_device()
}

/// A module of `fused`'s configuration holding the weights of `layer` (a burn-nn module
/// rebuilt from its record), checked against that configuration.
fn with_weights_of<B: Backend, L: BurnNnLayer<B>>(
    fused: &FusedRnn<B>,
    layer: &L,
) -> Result<FusedRnn<B>, InteropError> {
    let (canonical, _, _) = stack_canonical(core::slice::from_ref(layer))?;
    canonical.build(&fused.config(), &device_of(fused))
}

/// Defines the configurations of a drop-in pair, `$uni` and `$bi` (`LstmConfig` and
/// `BiLstmConfig`, ...): the fields every burn-nn recurrent config has (`d_input`,
/// `d_hidden`, `bias`, `initializer`, `batch_first`), `reverse` for a `$uni` marked
/// `reversible`, the pair's own fields (`$fields`), then this crate's `num_layers`,
/// `dropout` and `seed`; and for each, `init_fused`, the fused module it describes, drawn as
/// burn-nn draws its layer's weights.
macro_rules! drop_in_configs {
    (
        $(#[$uni_doc:meta])* $uni:ident $(+ $reverse:ident)?;
        $(#[$bi_doc:meta])* $bi:ident;
        { $($fields:tt)* }
    ) => {
        $crate::nn::drop_in_configs!(@one $(#[$uni_doc])* $uni {
            $(
                /// Runs the sequence from its last step to its first (the outputs stay
                /// aligned with the inputs).
                #[config(default = false)]
                pub $reverse: bool,
            )?
            $($fields)*
        });
        $crate::nn::drop_in_configs!(@one $(#[$bi_doc])* $bi { $($fields)* });
    };
    (
        @one $(#[$doc:meta])*
        // The types as tokens (`Option<f64>`, not a `ty` fragment): Burn's `Config` derive
        // recognises an optional field by its `Option` ident.
        $name:ident { $($(#[$field_doc:meta])* pub $field:ident: $ty:ident $(<$arg:ident>)?,)* }
    ) => {
        $(#[$doc])*
        #[derive(burn::config::Config, Debug)]
        pub struct $name {
            /// The size of the input features.
            pub d_input: usize,
            /// The size of the hidden state (of each direction).
            pub d_hidden: usize,
            /// Whether the gates have biases.
            pub bias: bool,
            /// Initializer of every gate's weights and biases, drawn as burn-nn draws them.
            #[config(default = "burn::module::Initializer::XavierNormal{gain:1.0}")]
            pub initializer: burn::module::Initializer,
            /// If true, inputs and outputs are `[batch_size, seq_length, features]`;
            /// otherwise `[seq_length, batch_size, features]` (burn-nn's `Gru` has no such
            /// field: it is always batch-first).
            #[config(default = true)]
            pub batch_first: bool,
            $($(#[$field_doc])* pub $field: $ty $(<$arg>)?,)*
            /// Layers stacked in one fused op (beyond burn-nn).
            #[config(default = 1)]
            pub num_layers: usize,
            /// Dropout between stacked layers, in training (beyond burn-nn).
            #[config(default = 0.0)]
            pub dropout: f64,
            /// Seed of the dropout masks (beyond burn-nn).
            #[config(default = 0)]
            pub seed: u64,
        }

        impl $name {
            /// The fused module of this configuration with cell `mode`, every weight drawn
            /// now by `initializer` with burn-nn's shapes and fans.
            fn init_fused<B: burn::tensor::backend::Backend>(
                &self,
                mode: $crate::RnnMode,
                bidirectional: bool,
                device: &B::Device,
            ) -> $crate::FusedRnn<B> {
                $crate::FusedRnnConfig::new(mode, self.d_input, self.d_hidden)
                    .with_num_layers(self.num_layers)
                    .with_bidirectional(bidirectional)
                    .with_bias(self.bias)
                    .with_batch_first(self.batch_first)
                    .with_dropout(self.dropout)
                    .with_seed(self.seed)
                    .init_like_burn_nn(&self.initializer, device)
            }
        }
    };
}

use drop_in_configs;

/// Defines a drop-in layer `$name { fused: FusedRnn<B>, d_hidden, batch_first, reverse }`
/// for burn-nn's `$burn_nn`, with what every drop-in has: `forward_stack`, `from_burn_nn`,
/// `load_burn_nn_record` (through `$to_layer`, which rebuilds burn-nn's layer from its
/// record `$record`, given the cell mode and device), the file loaders, and `Module`,
/// `AutodiffModule` and the display traits, delegated to the fused module: the record is
/// the fused module's, the canonical [`FusedRnnRecord`](crate::FusedRnnRecord).
///
/// `reversible` for the types whose burn-nn layer has a `reverse` flag (`Lstm`, `Rnn`):
/// `from_burn_nn` takes it over; `forward_only` for the others.
macro_rules! drop_in_layer {
    (
        $(#[$doc:meta])*
        $name:ident for burn::nn::$burn_nn:ident, $record:ident => $to_layer:expr, $reverse:ident
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name<B: burn::tensor::backend::Backend> {
            fused: $crate::FusedRnn<B>,
            /// The size of the hidden state (of each direction).
            pub d_hidden: usize,
            /// The layout of inputs and outputs: `[batch_size, seq_length, features]` when
            /// true, `[seq_length, batch_size, features]` otherwise.
            pub batch_first: bool,
            /// Whether the sequence runs from its last step to its first (`Lstm` and `Rnn`
            /// only; always false for the others).
            pub reverse: bool,
        }

        impl<B: burn::tensor::backend::Backend> $name<B> {
            #[doc = concat!("Like [`", stringify!($name), "::forward`], with the states of every \
                layer as this crate's [`RnnState`](crate::RnnState): `hidden` (and an \
                LSTM's `cell`) `[num_layers * directions, batch_size, d_hidden]`, layer \
                `l`'s directions at `2l` and `2l + 1` (Note [Drop-in layers]).")]
            pub fn forward_stack(
                &self,
                batched_input: burn::tensor::Tensor<B, 3>,
                state: Option<$crate::RnnState<B>>,
            ) -> (burn::tensor::Tensor<B, 3>, $crate::RnnState<B>) {
                $crate::nn::run(
                    &self.fused,
                    self.batch_first,
                    self.reverse,
                    batched_input,
                    state,
                )
            }

            #[doc = concat!(
                "The drop-in holding the weights and settings of burn-nn's `",
                stringify!($burn_nn), "` `layer`.\n\n# Errors\n\nAs \
                [`FusedRnn::from_burn_nn`](crate::FusedRnn::from_burn_nn) (`reverse`, \
                where burn-nn's layer has it, is supported).")]
            pub fn from_burn_nn(
                layer: &burn::nn::$burn_nn<B>,
            ) -> Result<Self, $crate::interop::InteropError> {
                $crate::nn::drop_in_layer!(@from_burn_nn $reverse, layer)
            }

            #[doc = concat!(
                "Replaces the weights by those of a record of burn-nn's `",
                stringify!($burn_nn), "` (what its `save_file` wrote), checked against this \
                layer's configuration (the activation of an `Rnn` comes from the \
                configuration: a record holds none).\n\n# Errors\n\n\
                [`InteropError::Shape`](crate::interop::InteropError::Shape), \
                [`InteropError::Missing`](crate::interop::InteropError::Missing) or \
                [`InteropError::Unexpected`](crate::interop::InteropError::Unexpected) \
                naming the tensor when the record does not fit the configuration (sizes, \
                bias, number of layers), \
                [`InteropError::NotFinite`](crate::interop::InteropError::NotFinite) for a \
                NaN or infinite weight.")]
            pub fn load_burn_nn_record(
                self,
                record: burn::nn::$record<B>,
            ) -> Result<Self, $crate::interop::InteropError> {
                let device = $crate::nn::device_of(&self.fused);
                let layer = ($to_layer)(record, self.fused.spec().mode, &device);
                Ok(Self {
                    fused: $crate::nn::with_weights_of(&self.fused, &layer)?,
                    ..self
                })
            }
        }

        #[doc = concat!(
            "The record of a [`", stringify!($name), "`]: its canonical weights, or a \
            record of burn-nn's `", stringify!($burn_nn), "` read from a checkpoint written \
            before the `use` swap (Note [Two layouts, one record] in `nn::record`).")]
        pub type $record<B> = $crate::nn::DropInRecord<B, burn::nn::$record<B>>;

        $crate::nn::drop_in_layer!(@module $name, $record);
    };
    (@from_burn_nn reversible, $layer:ident) => {{
        // Read (and so draw) the layer's parameters first: a clone of a parameter never
        // read would draw its own values.
        let _ = burn::module::Module::devices($layer);
        let mut forward = $layer.clone();
        forward.reverse = false;
        Ok(Self::wrap(
            $crate::FusedRnn::from_burn_nn(&forward)?,
            $layer.reverse,
        ))
    }};
    (@from_burn_nn forward_only, $layer:ident) => {
        Ok(Self::wrap($crate::FusedRnn::from_burn_nn($layer)?, false))
    };
    (@module $name:ident, $record:ident) => {
        impl<B: burn::tensor::backend::Backend> burn::module::Module<B> for $name<B> {
            type Record = $record<B>;

            /// Loads either layout (Note [Two layouts, one record]).
            ///
            /// # Panics
            ///
            /// When a record in burn-nn's layout does not fit this layer's configuration
            /// (the message names the layer, its configuration and the tensor); use
            /// `try_load_record` for an error instead.
            fn load_record(self, record: Self::Record) -> Self {
                match record {
                    $crate::nn::DropInRecord::Canonical(record) => Self {
                        fused: self.fused.load_record(record),
                        ..self
                    },
                    $crate::nn::DropInRecord::BurnNn(record) => {
                        let spec = self.fused.spec();
                        let layer = format!(
                            "{} (d_input {}, d_hidden {}, bias {}, num_layers {})",
                            stringify!($name),
                            spec.d_input,
                            spec.d_hidden,
                            spec.bias,
                            spec.num_layers
                        );
                        self.load_burn_nn_record(record).unwrap_or_else(|e| {
                            panic!(
                                "cannot load burn-nn's {} record into the drop-in {layer}: {e}",
                                stringify!($name)
                            )
                        })
                    }
                }
            }

            fn into_record(self) -> Self::Record {
                $crate::nn::DropInRecord::Canonical(self.fused.into_record())
            }

            fn num_params(&self) -> usize {
                burn::module::Module::num_params(&self.fused)
            }

            fn visit<Visitor: burn::module::ModuleVisitor<B>>(&self, visitor: &mut Visitor) {
                self.fused.visit(visitor)
            }

            fn map<Mapper: burn::module::ModuleMapper<B>>(self, mapper: &mut Mapper) -> Self {
                Self {
                    fused: self.fused.map(mapper),
                    ..self
                }
            }

            fn collect_devices(
                &self,
                devices: burn::module::Devices<B>,
            ) -> burn::module::Devices<B> {
                self.fused.collect_devices(devices)
            }

            fn to_device(self, device: &B::Device) -> Self {
                Self {
                    fused: self.fused.to_device(device),
                    ..self
                }
            }

            fn fork(self, device: &B::Device) -> Self {
                Self {
                    fused: self.fused.fork(device),
                    ..self
                }
            }
        }

        impl<B: burn::tensor::backend::AutodiffBackend> burn::module::AutodiffModule<B>
            for $name<B>
        {
            type InnerModule = $name<B::InnerBackend>;

            fn valid(&self) -> Self::InnerModule {
                $name {
                    fused: self.fused.valid(),
                    d_hidden: self.d_hidden,
                    batch_first: self.batch_first,
                    reverse: self.reverse,
                }
            }

            fn from_inner(module: Self::InnerModule) -> Self {
                $name {
                    fused: crate::FusedRnn::from_inner(module.fused),
                    d_hidden: module.d_hidden,
                    batch_first: module.batch_first,
                    reverse: module.reverse,
                }
            }
        }

        impl<B: burn::tensor::backend::AutodiffBackend> burn::module::HasAutodiffModule<B>
            for $name<B::InnerBackend>
        {
            type TrainModule = $name<B>;
        }

        impl<B: burn::tensor::backend::Backend> core::fmt::Display for $name<B> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(
                    f,
                    "{}",
                    burn::module::ModuleDisplay::format(self, Default::default())
                )
            }
        }

        impl<B: burn::tensor::backend::Backend> burn::module::ModuleDisplayDefault for $name<B> {
            fn content(&self, content: burn::module::Content) -> Option<burn::module::Content> {
                let spec = self.fused.spec();
                content
                    .set_top_level_type(stringify!($name))
                    .add("d_input", &spec.d_input)
                    .add("d_hidden", &spec.d_hidden)
                    .add("bias", &spec.bias)
                    .add("num_layers", &spec.num_layers)
                    .add("batch_first", &self.batch_first)
                    .add("reverse", &self.reverse)
                    .optional()
            }

            fn num_params(&self) -> usize {
                burn::module::Module::num_params(self)
            }
        }

        impl<B: burn::tensor::backend::Backend> burn::module::ModuleDisplay for $name<B> {}

        impl<B: burn::tensor::backend::Backend> $name<B> {
            /// The layer holding `fused`, with its settings.
            fn wrap(fused: crate::FusedRnn<B>, reverse: bool) -> Self {
                $name {
                    d_hidden: fused.spec().d_hidden,
                    batch_first: fused.batch_first(),
                    reverse,
                    fused,
                }
            }

            /// The fused module inside: its canonical weights (`fused().cells`), its
            /// configuration, and forwards with variable lengths
            /// ([`FusedRnn::forward_with_lengths`](crate::FusedRnn::forward_with_lengths);
            /// for a `reverse` layer, flip the sequences around it yourself).
            pub fn fused(&self) -> &crate::FusedRnn<B> {
                &self.fused
            }

            /// The fused module inside, by value.
            pub fn into_fused(self) -> crate::FusedRnn<B> {
                self.fused
            }

            /// Loads a record after checking it against this layer's configuration: a
            /// canonical record (or a bare [`FusedRnnRecord`](crate::FusedRnnRecord), with
            /// `.into()`) gets the checks of
            /// [`FusedRnn::try_load_record`](crate::FusedRnn::try_load_record), a record in
            /// burn-nn's layout those of `load_burn_nn_record`.
            ///
            /// # Errors
            ///
            /// As [`FusedRnn::try_load_record`](crate::FusedRnn::try_load_record), and
            /// [`FusedRnnLoadError::BurnNn`](crate::FusedRnnLoadError::BurnNn) naming the
            /// tensor of a burn-nn record that does not fit.
            pub fn try_load_record(
                self,
                record: impl Into<$crate::nn::DropInRecord<B, burn::nn::$record<B>>>,
            ) -> Result<Self, crate::FusedRnnLoadError> {
                match record.into() {
                    $crate::nn::DropInRecord::Canonical(record) => Ok(Self {
                        fused: self.fused.try_load_record(record)?,
                        ..self
                    }),
                    $crate::nn::DropInRecord::BurnNn(record) => self
                        .load_burn_nn_record(record)
                        .map_err(crate::FusedRnnLoadError::BurnNn),
                }
            }

            /// Loads a checkpoint saved from this type (or from a
            /// [`FusedRnn`](crate::FusedRnn) of the same configuration), checked as
            /// [`FusedRnn::try_load_file`](crate::FusedRnn::try_load_file) checks it; a file
            /// that is not such a checkpoint but one saved from burn-nn's layer of the same
            /// name loads as [`Self::load_burn_nn_file`] loads it.
            ///
            /// # Errors
            ///
            /// As [`FusedRnn::try_load_file`](crate::FusedRnn::try_load_file) (the error of
            /// the canonical reading when the file is neither layout), and
            /// [`FusedRnnLoadError::BurnNn`](crate::FusedRnnLoadError::BurnNn) for a burn-nn
            /// checkpoint that does not fit this layer.
            pub fn try_load_file<FR, PB>(
                self,
                path: PB,
                recorder: &FR,
                device: &B::Device,
            ) -> Result<Self, crate::FusedRnnLoadError>
            where
                FR: burn::record::FileRecorder<B>,
                PB: Into<std::path::PathBuf>,
            {
                let path = path.into();
                match self.fused.clone().try_load_file(path.clone(), recorder, device) {
                    Ok(fused) => Ok(Self { fused, ..self }),
                    Err(error @ crate::FusedRnnLoadError::File { .. }) => {
                        let file = burn::record::Recorder::<B>::load::<burn::nn::$record<B>>(
                            recorder,
                            path,
                            device,
                        );
                        match file {
                            Ok(record) => self
                                .load_burn_nn_record(record)
                                .map_err(crate::FusedRnnLoadError::BurnNn),
                            Err(_) => Err(error),
                        }
                    }
                    Err(error) => Err(error),
                }
            }

            /// Loads a checkpoint file saved from burn-nn's layer of the same name
            /// (`burn::nn::X::save_file`, any recorder), checked against this layer's
            /// configuration: sizes, bias, finite weights. One call replaces the
            /// weights; the layer keeps its own settings (layout, `reverse`, dropout).
            ///
            /// # Errors
            ///
            /// [`InteropError::Io`](crate::interop::InteropError::Io) when the recorder
            /// cannot read the file as that layer's record, and the errors of
            /// [`Self::load_burn_nn_record`].
            pub fn load_burn_nn_file<FR, PB>(
                self,
                path: PB,
                recorder: &FR,
                device: &B::Device,
            ) -> Result<Self, crate::interop::InteropError>
            where
                FR: burn::record::FileRecorder<B>,
                PB: Into<std::path::PathBuf>,
            {
                let path = path.into();
                let record =
                    burn::record::Recorder::load(recorder, path.clone(), device).map_err(|e| {
                        crate::interop::InteropError::Io {
                            path,
                            source: Box::new(e),
                        }
                    })?;
                self.load_burn_nn_record(record)
            }
        }
    };
}

use drop_in_layer;
