//! What every conversion shares: canonical tensors collected from some format, the
//! configuration inferred from their shapes, the checked module built from them, and the
//! canonical tensors of a module read back for export.

use std::collections::BTreeMap;

use burn::tensor::backend::Backend;
use burn::tensor::{Element, Tensor, TensorData};

use super::InteropError;
use crate::config::FusedRnnConfig;
use crate::layout::{param_name, ParamKind, RnnLayout};
use crate::module::FusedRnn;
use crate::spec::{InputMode, RnnMode};
use burn_fused_rnn_core::interop::{out_of_range, HostTensor, Imported, InteropError as CoreError};

/// Produces one canonical tensor, flattened row-major, when the module is built (so that a
/// file's tensors are read only after every shape has been checked).
pub(crate) type Loader<'a, B> = Box<dyn FnOnce() -> Result<Tensor<B, 1>, InteropError> + 'a>;

/// Names a canonical tensor in the source format, for errors about tensors that are absent.
pub(crate) type Naming<'a> = Box<dyn Fn(usize, usize, ParamKind) -> String + 'a>;

struct Source<'a, B: Backend> {
    key: String,
    shape: Vec<usize>,
    load: Loader<'a, B>,
}

/// Canonical tensors by `(layer, direction, kind)`, each with the key it came from.
pub(crate) struct Canonical<'a, B: Backend> {
    mode: RnnMode,
    entries: BTreeMap<(usize, usize, ParamKind), Source<'a, B>>,
    /// Tensors that fit no canonical slot: `(key, shape, why)`.
    strays: Vec<(String, Vec<usize>, String)>,
    naming: Naming<'a>,
}

impl<'a, B: Backend> Canonical<'a, B> {
    /// An empty set for `mode`; `naming` names absent tensors in errors.
    pub(crate) fn new(mode: RnnMode, naming: Naming<'a>) -> Self {
        Self {
            mode,
            entries: BTreeMap::new(),
            strays: Vec::new(),
            naming,
        }
    }

    /// Adds the tensor of `(layer, direction, kind)`, read later by `load`.
    pub(crate) fn insert_lazy(
        &mut self,
        (layer, direction, kind): (usize, usize, ParamKind),
        key: String,
        shape: Vec<usize>,
        load: Loader<'a, B>,
    ) {
        self.entries
            .insert((layer, direction, kind), Source { key, shape, load });
    }

    /// Adds a tensor that is already at hand.
    pub(crate) fn insert<const D: usize>(
        &mut self,
        slot: (usize, usize, ParamKind),
        key: String,
        tensor: Tensor<B, D>,
    ) {
        let shape = tensor.dims().to_vec();
        let n: usize = shape.iter().product();
        self.insert_lazy(slot, key, shape, Box::new(move || Ok(tensor.reshape([n]))));
    }

    /// Records a tensor that fits no canonical slot; building the module then fails.
    pub(crate) fn stray(&mut self, key: String, shape: Vec<usize>, why: String) {
        self.strays.push((key, shape, why));
    }

    /// Whether no canonical tensor was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn shape(&self, slot: (usize, usize, ParamKind)) -> Option<(&str, &[usize])> {
        self.entries
            .get(&slot)
            .map(|s| (s.key.as_str(), s.shape.as_slice()))
    }

    /// The configuration the tensors describe, for `mode`: layers and directions from the
    /// names present, hidden size, projection, bias and skip input from layer 0's shapes
    /// (every other tensor is checked when the module is built).
    ///
    /// The layers are those, from layer 0 up, that have both `W_ih` and `W_hh` (layer 0
    /// without `W_ih` when `skip_input` is given): the tensors of a layer above them are
    /// then "unexpected" when the module is built, not the layer's other tensors "missing".
    /// Layer 0 without `W_ih` is read as skip input only when `skip_input` says the source
    /// marks it so; otherwise its `W_ih` is missing.
    pub(crate) fn infer_config(&self, skip_input: bool) -> Result<FusedRnnConfig, InteropError> {
        let mode = self.mode;
        let g = mode.num_gates();
        let (hh_key, hh) =
            self.shape((0, 0, ParamKind::WeightHh))
                .ok_or_else(|| InteropError::Missing {
                    key: (self.naming)(0, 0, ParamKind::WeightHh),
                    expected: None,
                    context: self.with_found("the configuration is inferred from it"),
                })?;
        let (hidden, proj) = match self.shape((0, 0, ParamKind::WeightHr)) {
            Some((key, hr)) => {
                if mode != RnnMode::Lstm {
                    return Err(InteropError::Unexpected {
                        key: key.into(),
                        shape: hr.to_vec(),
                        context: format!("mode {} has no projection", mode.name()),
                    });
                }
                let [p, h] = matrix(key, hr)?;
                if p == 0 || p >= h {
                    return Err(InteropError::Shape {
                        key: key.into(),
                        expected: vec![p, h],
                        got: hr.to_vec(),
                        context: format!("projection size {p} must lie in 1..hidden size {h}"),
                    });
                }
                (h, Some(p))
            }
            None => (matrix(hh_key, hh)?[1], None),
        };
        let expected = [g * hidden, proj.unwrap_or(hidden)];
        if hh != expected {
            return Err(InteropError::Shape {
                key: hh_key.into(),
                expected: expected.to_vec(),
                got: hh.to_vec(),
                context: format!(
                    "mode {}: {g} gates of hidden size {hidden}; is the mode right?",
                    mode.name()
                ),
            });
        }
        if hidden == 0 {
            return Err(InteropError::shape(hh_key, &[g, 1], hh));
        }
        let has = |slot| self.entries.contains_key(&slot);
        let num_layers = (0..)
            .take_while(|&l| {
                has((l, 0, ParamKind::WeightHh))
                    && (has((l, 0, ParamKind::WeightIh)) || (l == 0 && skip_input))
            })
            .count()
            .max(1);
        let bidirectional = has((0, 1, ParamKind::WeightHh));
        let bias = has((0, 0, ParamKind::BiasHh));
        let (d_input, input_mode) = match self.shape((0, 0, ParamKind::WeightIh)) {
            Some((key, ih)) => (matrix(key, ih)?[1], InputMode::Linear),
            None if skip_input => (hidden, InputMode::Skip),
            None => {
                return Err(InteropError::Missing {
                    key: (self.naming)(0, 0, ParamKind::WeightIh),
                    expected: None,
                    context: self.with_found("the input size is inferred from it"),
                })
            }
        };
        if d_input == 0 {
            let key = (self.naming)(0, 0, ParamKind::WeightIh);
            return Err(InteropError::shape(key, &[g * hidden, 1], &[g * hidden, 0]));
        }
        Ok(FusedRnnConfig::new(mode, d_input, hidden)
            .with_num_layers(num_layers)
            .with_bidirectional(bidirectional)
            .with_bias(bias)
            .with_proj_size(proj)
            .with_input_mode(input_mode))
    }

    /// Every key found (canonical or not), with its shape, sorted: what an error about a
    /// missing or unexpected tensor lists, at most [`MAX_LISTED`] of them.
    pub(crate) fn found(&self) -> String {
        let mut keys: Vec<(&str, &[usize])> = self
            .entries
            .values()
            .map(|s| (s.key.as_str(), s.shape.as_slice()))
            .chain(
                self.strays
                    .iter()
                    .map(|(k, s, _)| (k.as_str(), s.as_slice())),
            )
            .collect();
        keys.sort();
        let listed: Vec<String> = keys
            .iter()
            .take(MAX_LISTED)
            .map(|(k, s)| format!("{k} {s:?}"))
            .collect();
        let more = keys.len().saturating_sub(MAX_LISTED);
        if more > 0 {
            format!("{} and {more} more", listed.join(", "))
        } else {
            listed.join(", ")
        }
    }

    /// `why`, followed by the keys found.
    fn with_found(&self, why: &str) -> String {
        let found = self.found();
        match (why.is_empty(), found.is_empty()) {
            (_, true) => why.to_string(),
            (true, false) => format!("found: {found}"),
            (false, false) => format!("{why}; found: {found}"),
        }
    }

    /// The module of `config` holding these tensors, every one checked against the layout.
    ///
    /// # Errors
    ///
    /// [`InteropError::Missing`] for a tensor the layout needs and the set lacks,
    /// [`InteropError::Shape`] for one of the wrong shape, [`InteropError::Unexpected`] for a
    /// tensor the layout has no place for (checked in that order), and what the loaders
    /// return.
    ///
    /// # Panics
    ///
    /// If `config` is invalid (see [`FusedRnnConfig::spec`]).
    pub(crate) fn build(
        self,
        config: &FusedRnnConfig,
        device: &B::Device,
    ) -> Result<FusedRnn<B>, InteropError> {
        let spec = config.spec();
        if spec.mode != self.mode {
            return Err(InteropError::unsupported(
                "mode",
                config.mode,
                format!(
                    "the tensors were read as mode {}, the configuration has mode {}",
                    self.mode.name(),
                    spec.mode.name()
                ),
            ));
        }
        let layout = RnnLayout::new(spec);
        let found = self.found();
        let with_found = |why: String| match (why.is_empty(), found.is_empty()) {
            (_, true) => why,
            (true, false) => format!("found: {found}"),
            (false, false) => format!("{why}; found: {found}"),
        };
        let mut entries = self.entries;
        let mut loads = Vec::with_capacity(layout.entries().len());
        for e in layout.entries() {
            match entries.remove(&(e.layer, e.direction, e.kind)) {
                None => {
                    return Err(InteropError::Missing {
                        key: (self.naming)(e.layer, e.direction, e.kind),
                        expected: Some(e.shape.clone()),
                        context: with_found(String::new()),
                    })
                }
                Some(src) if src.shape != e.shape => {
                    return Err(InteropError::Shape {
                        key: src.key,
                        expected: e.shape.clone(),
                        got: src.shape,
                        context: String::new(),
                    })
                }
                Some(src) => loads.push((src.key, src.shape, src.load)),
            }
        }
        if let Some(((layer, direction, kind), src)) = entries.into_iter().next() {
            let why = if layer >= spec.num_layers {
                format!("the configuration has {} layer(s)", spec.num_layers)
            } else if direction >= spec.num_directions() {
                "the configuration is unidirectional".to_string()
            } else if kind == ParamKind::WeightHr {
                "the configuration has no projection".to_string()
            } else if layer == 0 && spec.skip_input {
                "the configuration has skip input: layer 0 has no W_ih, b_ih".to_string()
            } else {
                "the configuration has no bias".to_string()
            };
            return Err(InteropError::Unexpected {
                key: src.key,
                shape: src.shape,
                context: with_found(format!("{} = {why}", param_name(kind, layer, direction))),
            });
        }
        if let Some((key, shape, why)) = self.strays.into_iter().next() {
            return Err(InteropError::Unexpected {
                key,
                shape,
                context: with_found(why),
            });
        }
        let parts = loads
            .into_iter()
            .map(|(key, shape, load)| {
                let t = untracked(load()?.to_device(device));
                check_finite(&key, &shape, t.clone().into_data())?;
                Ok(t)
            })
            .collect::<Result<Vec<_>, InteropError>>()?;
        Ok(config.init_with_params(Tensor::cat(parts, 0)))
    }
}

/// `t` outside any autodiff graph: a fresh tensor that no gradient reaches, whatever `t`
/// was. (`detach` alone keeps a tensor that required gradients a tracked leaf, and the
/// parameters built from it would then be tracked non-leaves, which `Param` refuses.)
pub(crate) fn untracked<B: Backend, const D: usize>(t: Tensor<B, D>) -> Tensor<B, D> {
    t.detach().set_require_grad(false)
}

/// How many keys an error lists at most.
const MAX_LISTED: usize = 24;

/// Refuses a tensor holding a NaN or an infinity, naming `key` and the element's index in
/// `shape` (the tensor's shape in its source; `data` is the tensor flattened).
pub(crate) fn check_finite(
    key: &str,
    shape: &[usize],
    data: TensorData,
) -> Result<(), InteropError> {
    match data.iter::<f64>().enumerate().find(|(_, v)| !v.is_finite()) {
        None => Ok(()),
        Some((flat, value)) => {
            let mut index = vec![0; shape.len()];
            let mut rest = flat;
            for (i, &d) in shape.iter().enumerate().rev() {
                if d > 0 {
                    index[i] = rest % d;
                    rest /= d;
                }
            }
            Err(InteropError::NotFinite {
                key: key.to_string(),
                index,
                value,
            })
        }
    }
}

/// `[rows, cols]` of a shape that must be a matrix.
fn matrix(key: &str, shape: &[usize]) -> Result<[usize; 2], InteropError> {
    match shape {
        &[rows, cols] => Ok([rows, cols]),
        _ => Err(InteropError::Shape {
            key: key.into(),
            expected: vec![0, 0],
            got: shape.to_vec(),
            context: "expected a matrix (rank 2)".into(),
        }),
    }
}

/// The canonical tensors of one pseudo-layer of a module without projection (every export
/// target but PyTorch refuses one), read for export, with skip input written out as what it
/// computes: `W_ih` = `G` stacked identities, `b_ih` = 0.
pub(crate) struct CellWeights<B: Backend> {
    /// `[G*H, in_l]`.
    pub weight_ih: Tensor<B, 2>,
    /// `[G*H, P]`.
    pub weight_hh: Tensor<B, 2>,
    /// `[G*H]`.
    pub bias_ih: Option<Tensor<B, 1>>,
    /// `[G*H]`.
    pub bias_hh: Option<Tensor<B, 1>>,
}

/// The weights of pseudo-layer `layer * D + direction` of `rnn`, detached.
///
/// # Panics
///
/// If the module's tensors do not fit its layout (possible only after an unchecked
/// `load_record`).
pub(crate) fn cell_weights<B: Backend>(
    rnn: &FusedRnn<B>,
    layer: usize,
    direction: usize,
) -> CellWeights<B> {
    let spec = rnn.spec();
    let cell = &rnn.cells[layer * spec.num_directions() + direction];
    let gh = spec.mode.num_gates() * spec.d_hidden;
    let device = cell.weight_hh.lazy_device();
    let skip = layer == 0 && spec.skip_input;
    let weight_ih = match &cell.weight_ih {
        Some(w) => untracked(w.val()),
        None => {
            let eye =
                Tensor::<B, 2>::eye(spec.d_hidden, &device).cast(cell.weight_hh.val().dtype());
            eye.repeat_dim(0, spec.mode.num_gates())
        }
    };
    let bias_ih = match &cell.bias_ih {
        Some(b) => Some(untracked(b.val())),
        None if skip && spec.bias => {
            Some(Tensor::zeros([gh], (&device, cell.weight_hh.val().dtype())))
        }
        None => None,
    };
    CellWeights {
        weight_ih,
        weight_hh: untracked(cell.weight_hh.val()),
        bias_ih,
        bias_hh: cell.bias_hh.as_ref().map(|b| untracked(b.val())),
    }
}

/// Reads a format's tensor into a host array for the core crate's conversions, refusing
/// one that holds no floats; `key` names it in errors.
pub(crate) fn read_host(key: &str, data: &TensorData) -> Result<HostTensor, InteropError> {
    if !data.dtype.is_float() {
        return Err(InteropError::Dtype {
            key: key.into(),
            dtype: data.dtype,
        });
    }
    let values = data.clone().convert::<f64>().to_vec::<f64>().map_err(|e| {
        InteropError::unsupported(key, data.dtype, format!("unreadable data: {e:?}"))
    })?;
    Ok(HostTensor::new(data.shape.to_vec(), values))
}

/// The module the core crate's conversion described: its configuration, and its flat
/// weights in `B`'s float dtype, refused when a weight does not fit that dtype (a finite
/// `f64` that is infinite in `f16`), naming the canonical tensor.
pub(crate) fn from_imported<B: Backend>(
    imported: Imported,
    device: &B::Device,
) -> Result<FusedRnn<B>, InteropError> {
    let Imported {
        spec,
        batch_first,
        params,
    } = imported;
    let config = FusedRnnConfig::new(spec.mode, spec.d_input, spec.d_hidden)
        .with_num_layers(spec.num_layers)
        .with_bidirectional(spec.bidirectional)
        .with_bias(spec.bias)
        .with_batch_first(batch_first);
    let n = params.len();
    let dtype = <B::FloatElem as Element>::dtype();
    let data = TensorData::new(params, [n]).convert_dtype(dtype);
    if let Some(flat) = data.iter::<f64>().position(|v| !v.is_finite()) {
        let value = data.iter::<f64>().nth(flat).unwrap_or(f64::NAN);
        return Err(out_of_range(&spec, flat, value, &format!("{dtype:?}")).into());
    }
    Ok(config.init_with_params(Tensor::from_data(data, (device, dtype))))
}

/// The flat weights of `rnn` on the host, and their dtype (what exports write).
pub(crate) fn host_weights<B: Backend>(rnn: &FusedRnn<B>) -> (Vec<f64>, burn::tensor::DType) {
    let flat = untracked(rnn.flat_weights());
    let dtype = flat.dtype();
    let values = flat
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("float weights convert to f64");
    (values, dtype)
}

/// A host array as a format's tensor of `dtype`.
pub(crate) fn to_data(t: HostTensor, dtype: burn::tensor::DType) -> TensorData {
    TensorData::new(t.values, t.shape).convert_dtype(dtype)
}

impl From<CoreError> for InteropError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Shape {
                key,
                expected,
                got,
                context,
            } => Self::Shape {
                key,
                expected,
                got,
                context,
            },
            CoreError::Missing {
                key,
                expected,
                context,
            } => Self::Missing {
                key,
                expected,
                context,
            },
            CoreError::Unexpected {
                key,
                shape,
                context,
            } => Self::Unexpected {
                key,
                shape,
                context,
            },
            CoreError::NotFinite { key, index, value } => Self::NotFinite { key, index, value },
            CoreError::Empty { argument, what } => Self::Empty { argument, what },
            CoreError::Unsupported {
                option,
                value,
                reason,
            } => Self::Unsupported {
                option,
                value,
                reason,
            },
            // The core reads no tensor itself: its conversions report a dtype only through
            // `read_host`, which returns this crate's error.
            CoreError::Dtype { key, dtype } => Self::Unsupported {
                option: key,
                value: dtype,
                reason: "expected a float tensor".into(),
            },
            other => Self::Unsupported {
                option: "conversion".into(),
                value: String::new(),
                reason: other.to_string(),
            },
        }
    }
}
