//! Shared test helpers: the PyTorch fixtures (tests/fixtures/generate.py) and comparisons.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use burn::tensor::backend::Backend;
use burn::tensor::{Element, Tensor, TensorData};
use burn_fused_rnn::{
    with_input_projection, with_k_chunk, with_simd_level, InputProjection, SimdLevel,
};
use burn_fused_rnn::{
    DropoutSpec, FusedRnn, FusedRnnBackend, FusedRnnConfig, InputMode, RnnDescriptor, RnnInputs,
    RnnLayout, RnnMode,
};
use serde::Deserialize;

#[derive(Deserialize, Debug)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

#[derive(Deserialize, Debug)]
pub struct Case {
    pub name: String,
    pub mode: String,
    pub d_input: usize,
    pub d_hidden: usize,
    pub num_layers: usize,
    pub bidirectional: bool,
    pub proj_size: Option<usize>,
    pub bias: bool,
    pub batch_first: bool,
    pub skip_input: bool,
    pub seq_length: usize,
    pub batch_size: usize,
    pub lengths: Option<Vec<usize>>,
    pub x: Array,
    pub h0: Option<Array>,
    pub c0: Option<Array>,
    /// PyTorch's `named_parameters()`, in its (flat) order.
    pub weights: serde_json::Map<String, serde_json::Value>,
    pub y: Array,
    pub h_n: Array,
    pub c_n: Option<Array>,
    pub gy: Vec<f64>,
    pub gh_n: Vec<f64>,
    pub gc_n: Option<Vec<f64>>,
    pub dx: Vec<f64>,
    pub dh0: Vec<f64>,
    pub dc0: Option<Vec<f64>>,
    pub dweights: BTreeMap<String, Vec<f64>>,
}

#[derive(Deserialize, Debug)]
pub struct Fixtures {
    pub torch_version: String,
    pub cases: Vec<Case>,
}

/// Runs `f` at every SIMD level of the native CPU kernel, with each input projection, (Note [SIMD levels]), each
/// forced on this thread, so that a level the machine would not pick by itself (AVX2 and
/// the portable fallback on an AVX-512 machine) is tested too. A level the CPU lacks is
/// skipped with a message naming the test.
pub fn at_every_simd_level(test: &str, mut f: impl FnMut(SimdLevel)) {
    for level in SimdLevel::ALL {
        if level.is_available() {
            // Both input projections (Note [Input projection] in the core's `cpu::projection`).
            // And the step products' reduction in chunks of 3 steps (the core's Note
            // [Reduction chunks]; at these sizes the default is one chunk).
            for projection in InputProjection::ALL {
                with_simd_level(level, || with_input_projection(projection, || f(level)));
            }
            with_simd_level(level, || with_k_chunk(3, || f(level)));
        } else {
            println!(
                "SKIPPED {test} at SIMD level {}: this CPU lacks it",
                level.name()
            );
        }
    }
}

/// The PyTorch fixtures, parsed once.
pub fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/pytorch_rnn.json"
        );
        let text = std::fs::read_to_string(path).expect("read fixtures");
        serde_json::from_str(&text).expect("parse fixtures")
    })
}

impl Case {
    pub fn config(&self) -> FusedRnnConfig {
        let mode = match self.mode.as_str() {
            "lstm" => RnnMode::Lstm,
            "gru" => RnnMode::Gru,
            "rnn_tanh" => RnnMode::RnnTanh,
            "rnn_relu" => RnnMode::RnnRelu,
            m => panic!("unknown mode {m}"),
        };
        FusedRnnConfig::new(mode, self.d_input, self.d_hidden)
            .with_num_layers(self.num_layers)
            .with_bidirectional(self.bidirectional)
            .with_proj_size(self.proj_size)
            .with_bias(self.bias)
            .with_batch_first(self.batch_first)
            .with_input_mode(if self.skip_input {
                InputMode::Skip
            } else {
                InputMode::Linear
            })
    }

    /// The named PyTorch weights as `(name, shape, data)`, in PyTorch's order.
    pub fn named_weights(&self) -> Vec<(String, Vec<usize>, Vec<f64>)> {
        self.weights
            .iter()
            .map(|(k, v)| {
                let a: Array = serde_json::from_value(v.clone()).expect("weight array");
                (k.clone(), a.shape, a.data)
            })
            .collect()
    }

    /// Flat canonical params built by looking up each layout entry by its PyTorch name.
    pub fn flat_params(&self) -> Vec<f64> {
        let layout = RnnLayout::new(self.config().spec());
        let named: BTreeMap<_, _> = self
            .named_weights()
            .into_iter()
            .map(|(k, s, d)| (k, (s, d)))
            .collect();
        let mut flat = Vec::with_capacity(layout.params_size());
        for e in layout.entries() {
            let (shape, data) = named
                .get(&e.name())
                .unwrap_or_else(|| panic!("{}: no PyTorch weight {}", self.name, e.name()));
            assert_eq!(shape, &e.shape, "{}: shape of {}", self.name, e.name());
            flat.extend_from_slice(data);
        }
        flat
    }

    /// Flat canonical gradient of the weights, same order as [`Case::flat_params`].
    pub fn flat_dweights(&self) -> Vec<f64> {
        let layout = RnnLayout::new(self.config().spec());
        layout
            .entries()
            .iter()
            .flat_map(|e| self.dweights[&e.name()].clone())
            .collect()
    }

    /// The op's descriptor for this case (no dropout).
    pub fn descriptor(&self) -> RnnDescriptor {
        RnnDescriptor::new(
            self.config().spec(),
            self.seq_length,
            self.batch_size,
            self.batch_first,
            self.lengths.clone(),
            DropoutSpec::NONE,
        )
    }

    /// The op's inputs for this case on `B`: x, the initial states given, flat weights.
    pub fn inputs<B: FusedRnnBackend>(&self, device: &B::Device) -> RnnInputs<B> {
        let prim = |t: Tensor<B, 3>| t.into_primitive().tensor();
        let params = self.flat_params();
        RnnInputs {
            x: prim(array::<B, 3>(&self.x, device)),
            h0: self.h0.as_ref().map(|a| prim(array::<B, 3>(a, device))),
            c0: self.c0.as_ref().map(|a| prim(array::<B, 3>(a, device))),
            weights: tensor::<B, 1>(&params, [params.len()], device)
                .into_primitive()
                .tensor(),
        }
    }

    pub fn module<B: Backend>(&self, device: &B::Device) -> FusedRnn<B> {
        let params = self.flat_params();
        let n = params.len();
        self.config()
            .init_with_params(tensor::<B, 1>(&params, [n], device))
    }
}

/// A tensor of `B`'s float element type.
///
/// The dtype is explicit: Burn 0.21 keeps default dtypes per device, and `NdArray<f32>` and
/// `NdArray<f64>` share one device, so a test process that runs both would otherwise create
/// f32 tensors for the f64 backend.
pub fn tensor<B: Backend, const D: usize>(
    data: &[f64],
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(
        TensorData::new(data.to_vec(), shape),
        (device, <B::FloatElem as Element>::dtype()),
    )
}

pub fn array<B: Backend, const D: usize>(a: &Array, device: &B::Device) -> Tensor<B, D> {
    tensor(&a.data, a.shape.clone().try_into().expect("rank"), device)
}

/// Tolerance `|got - expected| <= atol + rtol * |expected|`.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub rtol: f64,
    pub atol: f64,
}

/// f64: 1e-5 relative.
pub const F64: Tol = Tol {
    rtol: 1e-5,
    atol: 1e-9,
};
/// f32: 1e-4 relative.
pub const F32: Tol = Tol {
    rtol: 1e-4,
    atol: 1e-5,
};

/// Compares `got` with `expected` element by element; on failure returns a message naming
/// the context, the tensor and the worst element.
pub fn check<B: Backend, const D: usize>(
    context: &str,
    name: &str,
    got: Tensor<B, D>,
    expected: &[f64],
    tol: Tol,
) -> Result<(), String> {
    let shape = got.dims();
    let got: Vec<f64> = got
        .into_data()
        .convert::<f64>()
        .to_vec()
        .expect("float data");
    if got.len() != expected.len() {
        return Err(format!(
            "{context}: {name}: expected {} elements, got {} (shape {shape:?})",
            expected.len(),
            got.len()
        ));
    }
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let excess = (g - e).abs() - (tol.atol + tol.rtol * e.abs());
        let bad = excess > 0.0 || excess.is_nan();
        if bad && worst.is_none_or(|(_, w)| excess > w || excess.is_nan()) {
            worst = Some((i, excess));
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => Err(format!(
            "{context}: {name} (shape {shape:?}) differs at flat index {i}: got {}, expected {} (tolerance {tol:?})",
            got[i], expected[i]
        )),
    }
}

/// Panics with every failure when any check failed.
pub fn report(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
