//! Shared test helpers: the PyTorch fixtures (made by the 0.21 line's
//! `tests/fixtures/generate.py`, shared by both lines) and comparisons.
#![allow(dead_code, deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_fused_rnn::{
    with_input_projection, with_k_chunk, with_simd_level, DropoutSpec, FusedRnn, FusedRnnConfig,
    InputMode, InputProjection, RnnDescriptor, RnnLayout, RnnMode, SimdLevel,
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

/// The devices the tests run on. Burn 0.22 converts data to a device's default float
/// dtype (F32) unless told otherwise, so every tensor here is made with an explicit dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum On {
    NdArray,
    Flex,
}

impl On {
    pub fn device(self) -> Device {
        match self {
            On::NdArray => Device::ndarray(),
            On::Flex => Device::flex(),
        }
    }
}

/// Runs `f` at every SIMD level of the native CPU kernel, with each input projection,, each forced on this thread,
/// so that a level the machine would not pick by itself (AVX2 and the portable fallback on
/// an AVX-512 machine) is tested too. A level the CPU lacks is skipped with a message.
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
            "/../burn-0.21/tests/fixtures/pytorch_rnn.json"
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

    pub fn module(&self, device: &Device, dtype: DType) -> FusedRnn {
        let params = self.flat_params();
        let n = params.len();
        self.config()
            .init_with_params(tensor::<1>(&params, [n], device, dtype))
    }
}

/// A tensor of `dtype` on `device` from f64 values.
pub fn tensor<const D: usize>(
    data: &[f64],
    shape: [usize; D],
    device: &Device,
    dtype: DType,
) -> Tensor<D> {
    Tensor::from_data(TensorData::new(data.to_vec(), shape), (device, dtype))
}

pub fn array<const D: usize>(a: &Array, device: &Device, dtype: DType) -> Tensor<D> {
    tensor(
        &a.data,
        a.shape.clone().try_into().expect("rank"),
        device,
        dtype,
    )
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

/// The values of `t` as f64s.
pub fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().expect("float data")
}

/// Compares `got` with `expected` element by element; on failure returns a message naming
/// the context, the tensor and the worst element.
pub fn check<const D: usize>(
    context: &str,
    name: &str,
    got: Tensor<D>,
    expected: &[f64],
    tol: Tol,
) -> Result<(), String> {
    let shape = got.dims();
    check_values(context, name, &values(got), expected, tol)
        .map_err(|e| format!("{e} (shape {shape:?})"))
}

pub fn check_values(
    context: &str,
    name: &str,
    got: &[f64],
    expected: &[f64],
    tol: Tol,
) -> Result<(), String> {
    if got.len() != expected.len() {
        return Err(format!(
            "{context}: {name}: expected {} elements, got {}",
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
            "{context}: {name} differs at flat index {i}: got {}, expected {} (tolerance {tol:?})",
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

/// Flex with its default float dtype set to F64 (burn-nn's layers draw their parameters and
/// make their zero states and outputs in the device's default dtype), set once, before this
/// process makes a tensor: a test binary that uses it calls it before anything else.
pub fn flex_f64() -> Device {
    static CONFIGURED: std::sync::Once = std::sync::Once::new();
    CONFIGURED.call_once(|| {
        let mut flex = Device::flex();
        flex.configure(burn::tensor::FloatDType::F64)
            .expect("configure Flex before its first use");
    });
    Device::flex()
}

/// The Wgpu device when Wgpu lists an adapter here; otherwise prints `SKIPPED {test} on
/// Wgpu: …` and returns `None`, or panics under `BURN_FUSED_RNN_REQUIRE_WGPU=1` (which
/// `.ci/run` sets after installing lavapipe), as in `tests/parity.rs`.
#[cfg(feature = "wgpu")]
pub fn wgpu_device(test: &str) -> Option<Device> {
    use burn::tensor::DeviceType;
    if !Device::enumerate(DeviceType::Wgpu).is_empty() {
        return Some(Device::wgpu(Default::default()));
    }
    if std::env::var("BURN_FUSED_RNN_REQUIRE_WGPU").as_deref() == Ok("1") {
        panic!("{test}: BURN_FUSED_RNN_REQUIRE_WGPU=1, but Wgpu has no adapter here");
    }
    eprintln!("SKIPPED {test} on Wgpu: no Wgpu adapter");
    None
}
