//! Property test: random configurations, each with one random malformation of its inputs
//! (wrong shapes, wrong lengths, zero dimensions, mismatched dtypes, wrong parameter
//! counts, invalid settings). Each must panic before any work with "expected …, got …"
//! naming the argument or field; the same call well-formed must run and give finite
//! outputs of the documented shapes (so a malformation is never mistaken for valid input,
//! and valid input never for a malformation).

use std::panic::{catch_unwind, AssertUnwindSafe};

use burn::backend::Flex;
use burn::tensor::{DType, Distribution, Tensor};
use burn_fused_rnn::{
    fused_rnn, DropoutSpec, FusedRnnConfig, InputMode, RnnDescriptor, RnnMode, RnnState,
};
use proptest::prelude::*;

type B = Flex;

/// A small valid network and call.
#[derive(Debug, Clone)]
struct Case {
    mode: RnnMode,
    d_input: usize,
    d_hidden: usize,
    num_layers: usize,
    bidirectional: bool,
    proj_size: Option<usize>,
    bias: bool,
    batch_first: bool,
    batch: usize,
    steps: usize,
}

impl Case {
    fn config(&self) -> FusedRnnConfig {
        FusedRnnConfig::new(self.mode, self.d_input, self.d_hidden)
            .with_num_layers(self.num_layers)
            .with_bidirectional(self.bidirectional)
            .with_proj_size(self.proj_size)
            .with_bias(self.bias)
            .with_batch_first(self.batch_first)
    }

    fn directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    fn state_size(&self) -> usize {
        self.proj_size.unwrap_or(self.d_hidden)
    }

    /// The input shape, in the config's layout, with `batch`, `steps`, `features`.
    fn input_shape(&self, batch: usize, steps: usize, features: usize) -> [usize; 3] {
        if self.batch_first {
            [batch, steps, features]
        } else {
            [steps, batch, features]
        }
    }

    fn hidden_shape(&self) -> [usize; 3] {
        [
            self.num_layers * self.directions(),
            self.batch,
            self.state_size(),
        ]
    }

    fn cell_shape(&self) -> [usize; 3] {
        [
            self.num_layers * self.directions(),
            self.batch,
            self.d_hidden,
        ]
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            Just(RnnMode::Lstm),
            Just(RnnMode::Gru),
            Just(RnnMode::RnnTanh),
            Just(RnnMode::RnnRelu)
        ],
        1usize..4,
        2usize..5,
        1usize..3,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1usize..4,
        1usize..5,
    )
        .prop_map(
            |(
                mode,
                d_input,
                d_hidden,
                num_layers,
                bidirectional,
                proj,
                bias,
                batch_first,
                batch,
                steps,
            )| Case {
                mode,
                d_input,
                d_hidden,
                num_layers,
                bidirectional,
                // Projection is LSTM only, and below d_hidden.
                proj_size: (proj && mode == RnnMode::Lstm).then_some(d_hidden - 1),
                bias,
                batch_first,
                batch,
                steps,
            },
        )
}

/// One way to get the call wrong, with the names its message must contain.
#[derive(Debug, Clone)]
enum Malformation {
    /// The input's feature size is off by `delta` (non-zero).
    InputFeatures(isize),
    /// The input has no sequences.
    ZeroBatch,
    /// The input has no steps.
    ZeroSteps,
    /// `seq_lengths` holds `batch + delta` lengths (`delta` non-zero).
    LengthCount(isize),
    /// `seq_lengths[b]` is `steps + extra` (`extra >= 1`).
    LengthPastEnd(usize, usize),
    /// Dimension `dim` of the initial hidden state is off by `delta` (non-zero).
    HiddenShape(usize, isize),
    /// A cell state for a mode without one, or one of the wrong shape for LSTM.
    CellState(usize, isize),
    /// The initial hidden state in F16 while the input is F32.
    HiddenDtype,
    /// `init_with_params` with `params_size + delta` values (`delta` non-zero).
    ParamsLength(isize),
    /// `fused_rnn` with weights of `params_size + delta` values (`delta` non-zero).
    WeightsLength(isize),
    /// `fused_rnn` with F16 weights and an F32 input.
    WeightsDtype,
    /// An invalid configuration: which field.
    Config(ConfigField),
}

#[derive(Debug, Clone, Copy)]
enum ConfigField {
    DInput,
    DHidden,
    NumLayers,
    ProjSize,
    Dropout,
    InputMode,
    Overflow,
}

fn nonzero(range: std::ops::RangeInclusive<isize>) -> impl Strategy<Value = isize> {
    range.prop_filter("non-zero", |d| *d != 0)
}

fn malformation() -> impl Strategy<Value = Malformation> {
    prop_oneof![
        nonzero(-1..=3).prop_map(Malformation::InputFeatures),
        Just(Malformation::ZeroBatch),
        Just(Malformation::ZeroSteps),
        nonzero(-1..=2).prop_map(Malformation::LengthCount),
        (0usize..4, 1usize..3).prop_map(|(b, e)| Malformation::LengthPastEnd(b, e)),
        (0usize..3, nonzero(-1..=2)).prop_map(|(d, e)| Malformation::HiddenShape(d, e)),
        (0usize..3, nonzero(-1..=2)).prop_map(|(d, e)| Malformation::CellState(d, e)),
        Just(Malformation::HiddenDtype),
        nonzero(-3..=3).prop_map(Malformation::ParamsLength),
        nonzero(-3..=3).prop_map(Malformation::WeightsLength),
        Just(Malformation::WeightsDtype),
        prop_oneof![
            Just(ConfigField::DInput),
            Just(ConfigField::DHidden),
            Just(ConfigField::NumLayers),
            Just(ConfigField::ProjSize),
            Just(ConfigField::Dropout),
            Just(ConfigField::InputMode),
            Just(ConfigField::Overflow),
        ]
        .prop_map(Malformation::Config),
    ]
}

fn add(n: usize, delta: isize) -> usize {
    n.checked_add_signed(delta).expect("non-negative")
}

fn zeros<const D: usize>(shape: [usize; D], dtype: DType) -> Tensor<B, D> {
    Tensor::zeros(shape, (&Default::default(), dtype))
}

/// The panic message of `f`, or `None` when it returns.
fn panic_message(f: impl FnOnce()) -> Option<String> {
    let payload = catch_unwind(AssertUnwindSafe(f)).err()?;
    Some(
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "<non-string panic>".into()),
    )
}

/// Runs `case` with `bad`; returns the names the panic message must contain, and the
/// message (`None` when the call did not panic).
fn run_malformed(case: &Case, bad: &Malformation) -> (Vec<&'static str>, Option<String>) {
    let device = Default::default();
    let x = |shape| Tensor::<B, 3>::random(shape, Distribution::Default, &device);
    let valid_x = || x(case.input_shape(case.batch, case.steps, case.d_input));
    let full = vec![case.steps; case.batch];
    match bad {
        Malformation::InputFeatures(delta) => (
            vec!["input", "d_input"],
            panic_message(|| {
                let m = case.config().init::<B>(&device);
                let shape = case.input_shape(case.batch, case.steps, add(case.d_input, *delta));
                m.forward(zeros(shape, DType::F32), None);
            }),
        ),
        Malformation::ZeroBatch => (
            vec!["input", "batch_size"],
            panic_message(|| {
                let m = case.config().init::<B>(&device);
                m.forward(
                    zeros(case.input_shape(0, case.steps, case.d_input), DType::F32),
                    None,
                );
            }),
        ),
        Malformation::ZeroSteps => (
            vec!["input", "seq_length"],
            panic_message(|| {
                let m = case.config().init::<B>(&device);
                m.forward_with_lengths(
                    zeros(case.input_shape(case.batch, 0, case.d_input), DType::F32),
                    &vec![0; case.batch],
                    None,
                );
            }),
        ),
        Malformation::LengthCount(delta) => (
            vec!["seq_lengths", "batch_size"],
            panic_message(|| {
                let m = case.config().init::<B>(&device);
                m.forward_with_lengths(valid_x(), &vec![1; add(case.batch, *delta)], None);
            }),
        ),
        Malformation::LengthPastEnd(b, extra) => (
            vec!["seq_lengths", "seq_length"],
            panic_message(|| {
                let m = case.config().init::<B>(&device);
                let mut lengths = full.clone();
                lengths[b % case.batch] = case.steps + extra;
                m.forward_with_lengths(valid_x(), &lengths, None);
            }),
        ),
        Malformation::HiddenShape(dim, delta) => (
            vec!["initial hidden state"],
            panic_message(|| {
                let m = case.config().init::<B>(&device);
                let mut shape = case.hidden_shape();
                shape[*dim] = add(shape[*dim], *delta);
                // An LSTM also gets a valid cell state: it refuses a hidden state alone.
                let cell =
                    (case.mode == RnnMode::Lstm).then(|| zeros(case.cell_shape(), DType::F32));
                m.forward(
                    valid_x(),
                    Some(RnnState::new(zeros(shape, DType::F32), cell)),
                );
            }),
        ),
        Malformation::CellState(dim, delta) => (
            vec!["initial cell state"],
            panic_message(|| {
                let m = case.config().init::<B>(&device);
                let mut shape = case.cell_shape();
                if case.mode == RnnMode::Lstm {
                    shape[*dim] = add(shape[*dim], *delta);
                }
                let state = RnnState::new(
                    zeros(case.hidden_shape(), DType::F32),
                    Some(zeros(shape, DType::F32)),
                );
                m.forward(valid_x(), Some(state));
            }),
        ),
        Malformation::HiddenDtype => (
            vec!["initial hidden state", "dtype"],
            panic_message(|| {
                let m = case.config().init::<B>(&device);
                let cell =
                    (case.mode == RnnMode::Lstm).then(|| zeros(case.cell_shape(), DType::F16));
                let state = RnnState::new(zeros(case.hidden_shape(), DType::F16), cell);
                m.forward(valid_x(), Some(state));
            }),
        ),
        Malformation::ParamsLength(delta) => (
            vec!["params", "params_size"],
            panic_message(|| {
                let size = case.config().init::<B>(&device).layout().params_size();
                case.config()
                    .init_with_params::<B>(zeros([add(size, *delta)], DType::F32));
            }),
        ),
        Malformation::WeightsLength(delta) => (
            vec!["weights", "params_size"],
            panic_message(|| {
                let desc = descriptor(case);
                fused_rnn(
                    &desc,
                    valid_x(),
                    None,
                    None,
                    zeros([add(desc.params_size(), *delta)], DType::F32),
                );
            }),
        ),
        Malformation::WeightsDtype => (
            vec!["weights", "dtype"],
            panic_message(|| {
                let desc = descriptor(case);
                fused_rnn(
                    &desc,
                    valid_x(),
                    None,
                    None,
                    zeros([desc.params_size()], DType::F16),
                );
            }),
        ),
        Malformation::Config(field) => {
            let config = case.config();
            // Required fields have no `with_*` builder.
            let set = |f: fn(&mut FusedRnnConfig)| {
                let mut c = case.config();
                f(&mut c);
                c
            };
            let (names, config) = match field {
                ConfigField::DInput => (vec!["d_input"], set(|c| c.d_input = 0)),
                ConfigField::DHidden => (vec!["d_hidden"], set(|c| c.d_hidden = 0)),
                ConfigField::NumLayers => (vec!["num_layers"], config.with_num_layers(0)),
                ConfigField::ProjSize => (
                    vec!["proj_size"],
                    config.with_proj_size(Some(case.d_hidden)),
                ),
                ConfigField::Dropout => (vec!["dropout"], config.with_dropout(1.5)),
                ConfigField::InputMode => (vec!["input_mode", "d_input", "d_hidden"], {
                    let mut c = config.with_input_mode(InputMode::Skip);
                    c.d_input = case.d_hidden + 1;
                    c
                }),
                ConfigField::Overflow => (
                    vec!["d_hidden", "usize"],
                    set(|c| {
                        c.d_hidden = usize::MAX / 2;
                        c.proj_size = None;
                    }),
                ),
            };
            (
                [&["invalid FusedRnnConfig"][..], &names].concat(),
                panic_message(|| {
                    config.init::<B>(&device);
                }),
            )
        }
    }
}

fn descriptor(case: &Case) -> RnnDescriptor {
    RnnDescriptor::new(
        case.config().spec(),
        case.steps,
        case.batch,
        case.batch_first,
        None,
        DropoutSpec::NONE,
    )
}

/// The well-formed call: outputs of the documented shapes, all finite.
fn run_valid(case: &Case) -> Result<(), TestCaseError> {
    let device = Default::default();
    let m = case.config().init::<B>(&device);
    let x = Tensor::<B, 3>::random(
        case.input_shape(case.batch, case.steps, case.d_input),
        Distribution::Default,
        &device,
    );
    let lengths: Vec<usize> = (0..case.batch)
        .map(|b| (case.steps + b) % (case.steps + 1))
        .collect();
    let (y, state) = m.forward_with_lengths(x, &lengths, None);
    let out = case.directions() * case.state_size();
    prop_assert_eq!(y.dims(), case.input_shape(case.batch, case.steps, out));
    prop_assert_eq!(state.hidden.dims(), case.hidden_shape());
    prop_assert_eq!(state.cell.is_some(), case.mode == RnnMode::Lstm);
    let values: Vec<f32> = y.into_data().to_vec().unwrap();
    prop_assert!(values.iter().all(|v| v.is_finite()), "non-finite output");
    Ok(())
}

proptest! {
    // Tiny networks on Flex: the 256 cases take about two seconds.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_malformed_input_panics_naming_its_argument(case in case(), bad in malformation()) {
        run_valid(&case)?;
        let (names, message) = run_malformed(&case, &bad);
        let message = message.ok_or_else(|| {
            TestCaseError::fail(format!("{bad:?} did not panic"))
        })?;
        prop_assert!(message.contains("expected"), "{:?}: {}", bad, message);
        for name in names {
            prop_assert!(message.contains(name), "{:?}: {:?} not in: {}", bad, name, message);
        }
        // Rust's generic texts would mean a check of ours was missed: an `assert_eq!` dump,
        // or arithmetic that overflowed unchecked.
        prop_assert!(!message.contains("left == right") && !message.contains("attempt to"),
            "{:?}: {}", bad, message);
    }
}
