//! Checked checkpoints of Burn 0.22 models that hold the crate's layers, and checkpoints
//! written by the Burn 0.21 line, loaded in one call.
//!
//! # Note [Checked checkpoints]
//!
//! Burn's `save_file` / `load_file` store and load every tensor by its key and check its
//! shape, but a flipped byte in a weight leaves a valid file that loads without complaint.
//! [`save_file`] writes the same burnpack file as Burn's `save_file` (same keys, readable
//! by Burn's `load_file`), and adds to the file's metadata, for each [`FusedRnn`] in the
//! model, a CRC-32 digest of its canonical weights (the core's `WeightsChecksum`: per
//! tensor in the flat order its rank, dimensions and values widened to `f64`), under the key
//! `burn-fused-rnn.digest.<path of the layer>`. [`load_file`] reads the file and refuses, with
//! an error naming the key: a tensor the model lacks, a tensor the file lacks, a shape or
//! kind that differs (burn-store's checks), a NaN or infinite weight of a `FusedRnn`, and
//! weights whose digest differs from the stored one. A file without digests (written by
//! Burn's `save_file`) loads with every check but the digest. CRC-32 is for accidental
//! damage (a bad disk, a truncated copy), not an attacker: whoever can edit the weights
//! can rewrite the digest beside them.
//!
//! [`FusedRnn`]: crate::FusedRnn
//!
//! # Note [Upgrading checkpoints]
//!
//! Burn 0.22 reads only its own burnpack files; nothing in it reads the MessagePack files
//! that Burn 0.21's recorders wrote. [`load_0_21_file`] reads them itself:
//!
//! - **Which files.** Burn 0.21's `NamedMpkFileRecorder` in full or half precision
//!   (`CompactRecorder` is the half-precision one, `DefaultRecorder` the full one) and
//!   `NamedMpkGzFileRecorder`: a MessagePack map `{metadata, item}` whose `item` mirrors the
//!   model's fields, every tensor a map `{id, param: {bytes, shape, dtype}}`; and the JSON
//!   recorders (`PrettyJsonFileRecorder`, `JsonGzFileRecorder`), whose files are the same
//!   record as a JSON object (bytes as arrays of numbers), read into the same values. The
//!   Bin recorders' files are not read: bincode does not name the fields, so only the 0.21
//!   model type could decode them; load them on the 0.21 line and save with
//!   `NamedMpkFileRecorder` first.
//! - **Which keys.** A tensor at item path `a.b.weight` is the 0.22 model's tensor
//!   `a.b.weight` (Burn's module paths did not change). A `FusedRnn`'s record (`{cells,
//!   digest}`: one cell per layer and direction, canonical tensors) becomes PyTorch's names
//!   under its path (Note [Parameter names] on [`crate::FusedRnn`]), or, where the 0.22 model
//!   holds a drop-in layer at that path (the 0.21 line's drop-ins saved the canonical
//!   record too), burn-nn's gate parameters: each gate's block of `W_ih`/`W_hh`
//!   transposed to a `Linear` weight `[d_in, d_hidden]`, its biases split the same way.
//! - **Checked.** The digest a 0.21 `FusedRnn` record carries (CRC-32 of its canonical
//!   tensors widened to `f64`, at the precision it was saved in) is recomputed from the
//!   bytes read, and every weight of such a record must be finite; then burn-store applies
//!   the tensors to the model, and any tensor the model lacks, any it has that the file
//!   lacks, and any shape that differs is an error naming the key.
//! - **Precision.** Each tensor is converted to the dtype of the model's parameter it
//!   loads into (a `CompactRecorder` file's F16 weights into an F32 model become F32), as
//!   Burn 0.21's recorders did when loading.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::{burn_pack, ModuleSnapshot};
use burn::tensor::{DType, TensorData};
use burn_fused_rnn_core::checksum::WeightsChecksum;
use rmpv::Value;

/// Why a checkpoint could not be saved or loaded (Notes [Checked checkpoints] and
/// [Upgrading checkpoints]).
#[derive(Debug)]
pub enum CheckpointError {
    /// The burnpack file could not be written or read.
    Pack {
        /// The file.
        path: PathBuf,
        /// burn-pack's error.
        source: burn_pack::Error,
    },
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not a record of Burn 0.21's `NamedMpk` recorders.
    NotARecord {
        /// The file.
        path: PathBuf,
        /// What was found, in words.
        detail: String,
    },
    /// A tensor of the file cannot be read (`key`: the 0.22 key it was meant for).
    BadTensor {
        /// The key.
        key: String,
        /// What is wrong, in words.
        problem: String,
    },
    /// A `FusedRnn`'s weights are not those its digest was computed from.
    DigestMismatch {
        /// The layer's path in the model (e.g. `encoder.rnn`).
        path: String,
        /// CRC-32 of the weights read.
        got: u32,
    },
    /// The digest stored in a file's metadata is not a CRC-32.
    BadDigest {
        /// The metadata key.
        key: String,
        /// Its value.
        value: String,
    },
    /// A weight is NaN or infinite.
    NotFinite {
        /// The 0.22 key, e.g. `rnn.weight_hh_l1_reverse`.
        key: String,
        /// Index of the first non-finite element (flat).
        index: usize,
        /// Its value.
        value: f64,
    },
    /// The tensors do not fit the model: burn-store's report, which names every key
    /// that is missing, unused or of another shape.
    Mismatch {
        /// Keys the file has and the model lacks.
        unused: Vec<String>,
        /// Keys the model has and the file lacks.
        missing: Vec<String>,
        /// burn-store's errors (shapes, dtypes), one line each.
        errors: Vec<String>,
    },
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::Pack { path, source } => {
                write!(
                    f,
                    "cannot use the burnpack file {}: {source}",
                    path.display()
                )
            }
            CheckpointError::BadDigest { key, value } => write!(
                f,
                "expected a CRC-32 in hexadecimal under the metadata key {key}, got {value:?}"
            ),
            CheckpointError::Io { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            CheckpointError::NotARecord { path, detail } => write!(
                f,
                "expected a record of Burn 0.21's NamedMpk recorders in {}, got {detail}",
                path.display()
            ),
            CheckpointError::BadTensor { key, problem } => {
                write!(
                    f,
                    "tensor {key} of the 0.21 record cannot be read: {problem}"
                )
            }
            CheckpointError::DigestMismatch { path, got } => write!(
                f,
                "the weights of the FusedRnn at `{path}` are not the ones the file's digest \
                 was computed from (CRC-32 of the weights read: {got:#010x}): the file was \
                 damaged after saving"
            ),
            CheckpointError::NotFinite { key, index, value } => write!(
                f,
                "expected finite weights, got {value} at flat index {index} of {key}"
            ),
            CheckpointError::Mismatch {
                unused,
                missing,
                errors,
            } => {
                write!(f, "the 0.21 record does not fit the model:")?;
                if !missing.is_empty() {
                    write!(f, " missing in the file: {}.", missing.join(", "))?;
                }
                if !unused.is_empty() {
                    write!(f, " not in the model: {}.", unused.join(", "))?;
                }
                for e in errors {
                    write!(f, " {e}.")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckpointError::Io { source, .. } => Some(source),
            CheckpointError::Pack { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Loads a checkpoint that the Burn 0.21 line wrote (`model.save_file(path, &recorder)`
/// with `NamedMpkFileRecorder`, `CompactRecorder`, `NamedMpkGzFileRecorder`,
/// `PrettyJsonFileRecorder` or `JsonGzFileRecorder`) into
/// `model`, the same model written for Burn 0.22 (Note [Upgrading checkpoints]).
///
/// `path` is the file itself, extension included (`model.mpk`, `model.mpk.gz`,
/// `model.json`, `model.json.gz`).
///
/// # Errors
///
/// [`CheckpointError`], naming the file or the tensor: unreadable or foreign files, damaged
/// weights (digest, non-finite values), keys or shapes that do not fit the model.
pub fn load_0_21_file<M: Module>(
    mut model: M,
    path: impl AsRef<Path>,
) -> Result<M, CheckpointError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let not_a_record = |detail: String| CheckpointError::NotARecord {
        path: path.to_path_buf(),
        detail,
    };
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .map_err(|e| not_a_record(format!("a damaged gzip stream ({e})")))?;
        out
    } else {
        bytes
    };
    // A JSON recorder's file is a JSON object; a MessagePack map never starts with `{`.
    let json = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let value = if json {
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| not_a_record(format!("damaged JSON ({e})")))?;
        from_json(v)
    } else {
        rmpv::decode::read_value(&mut &bytes[..])
            .map_err(|e| not_a_record(format!("no MessagePack value ({e})")))?
    };
    let item = field(&value, "item")
        .ok_or_else(|| not_a_record("no `item` of a Burn record".to_string()))?;
    if let Some(format) = field(&value, "metadata")
        .and_then(|m| field(m, "format"))
        .and_then(Value::as_str)
    {
        let readable = if json {
            format.contains("Json")
        } else {
            format.contains("NamedMpk")
        };
        if !readable {
            return Err(not_a_record(format!("a record of {format}")));
        }
    }

    // The model's keys and dtypes decide the names and dtypes of what is loaded.
    let targets: BTreeMap<String, DType> = model
        .collect(None, None, false)
        .into_iter()
        .map(|t| (t.name.clone(), t.dtype))
        .collect();
    let mut tensors = Vec::new();
    walk(item, &mut Vec::new(), &targets, &mut tensors)?;

    let mut out = Vec::with_capacity(tensors.len());
    for (key, data) in tensors {
        let data = match targets.get(&key) {
            Some(&dtype) if dtype != data.dtype() => data.convert_dtype(dtype),
            _ => data,
        };
        out.push(burn::store::bridge::from_data(data, key, None));
    }
    apply_all(&mut model, out)?;
    Ok(model)
}

/// Applies `tensors` to `model`: every one must fit a parameter, and every parameter must
/// get one.
fn apply_all<M: Module>(
    model: &mut M,
    tensors: Vec<burn_pack::Tensor>,
) -> Result<(), CheckpointError> {
    let result = model.apply(tensors, None, None, false);
    let errors: Vec<String> = result.errors.iter().map(|e| e.to_string()).collect();
    let missing: Vec<String> = result.missing.iter().map(|(k, _)| k.clone()).collect();
    if !errors.is_empty() || !missing.is_empty() || !result.unused.is_empty() {
        return Err(CheckpointError::Mismatch {
            unused: result.unused.clone(),
            missing,
            errors,
        });
    }
    Ok(())
}

/// The prefix of the metadata keys of the digests (Note [Checked checkpoints]).
pub const DIGEST_KEY: &str = "burn-fused-rnn.digest.";

/// Every [`FusedRnn`](crate::FusedRnn) of a model: its path, and its canonical tensors in
/// the flat order with their names.
struct Layers {
    stack: Vec<(String, String)>,
    layers: BTreeMap<String, Vec<(String, TensorData)>>,
}

impl burn::module::ModuleVisitor for Layers {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.stack
            .push((name.to_string(), container_type.to_string()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.stack.pop();
    }

    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D>>,
    ) {
        if let Some((name, container)) = self.stack.last() {
            if container == crate::module::CONTAINER {
                let path: Vec<&str> = self.stack[..self.stack.len() - 1]
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect();
                self.layers
                    .entry(path.join("."))
                    .or_default()
                    .push((name.clone(), param.val().into_data()));
            }
        }
    }
}

fn layers<M: Module>(model: &M) -> BTreeMap<String, Vec<(String, TensorData)>> {
    let mut v = Layers {
        stack: Vec::new(),
        layers: BTreeMap::new(),
    };
    model.visit(&mut v);
    v.layers
}

/// The digest of one layer's tensors, and the first non-finite weight (key, index, value).
fn digest(path: &str, tensors: &[(String, TensorData)]) -> (u32, Option<(String, usize, f64)>) {
    let mut checksum = WeightsChecksum::new();
    let mut bad = None;
    for (name, data) in tensors {
        let values = f64s(data);
        if bad.is_none() {
            if let Some((i, &v)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                let key = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                bad = Some((key, i, v));
            }
        }
        checksum.add(&data.shape().to_vec(), values);
    }
    (checksum.crc(), bad)
}

/// Saves `model` as a burnpack file at `path` (overwriting it), as Burn's
/// `Module::save_file` does, with the digest of every `FusedRnn` in the file's metadata
/// (Note [Checked checkpoints]).
///
/// # Errors
///
/// [`CheckpointError::Pack`] when the file cannot be written.
pub fn save_file<M: Module>(model: &M, path: impl AsRef<Path>) -> Result<(), CheckpointError> {
    let path = path.as_ref();
    let mut store = burn::store::BurnpackStore::from_file(path).overwrite(true);
    for (layer, tensors) in layers(model) {
        let (crc, _) = digest(&layer, &tensors);
        store = store.metadata(format!("{DIGEST_KEY}{layer}"), format!("{crc:08x}"));
    }
    model
        .save_into(&mut store)
        .map_err(|source| CheckpointError::Pack {
            path: path.to_path_buf(),
            source,
        })
}

/// Loads the burnpack file at `path` into `model` with every check of Note [Checked
/// checkpoints]: keys, shapes, finite weights, and the digests the file carries.
///
/// # Errors
///
/// [`CheckpointError`], naming the file, the key or the layer.
pub fn load_file<M: Module>(mut model: M, path: impl AsRef<Path>) -> Result<M, CheckpointError> {
    let path = path.as_ref();
    let pack = |source| CheckpointError::Pack {
        path: path.to_path_buf(),
        source,
    };
    let reader = burn_pack::Reader::from_file(path).map_err(pack)?;
    let metadata = reader.metadata().clone();
    let tensors = reader.into_tensors().map_err(pack)?;
    apply_all(&mut model, tensors)?;
    for (layer, tensors) in layers(&model) {
        let (crc, bad) = digest(&layer, &tensors);
        if let Some((key, index, value)) = bad {
            return Err(CheckpointError::NotFinite { key, index, value });
        }
        let key = format!("{DIGEST_KEY}{layer}");
        if let Some(stored) = metadata.get(&key) {
            let expected =
                u32::from_str_radix(stored, 16).map_err(|_| CheckpointError::BadDigest {
                    key: key.clone(),
                    value: stored.clone(),
                })?;
            if expected != crc {
                return Err(CheckpointError::DigestMismatch {
                    path: layer,
                    got: crc,
                });
            }
        }
    }
    Ok(model)
}

/// A JSON value as the MessagePack value the same record would have been (maps keep their
/// keys; numbers stay integers where they are).
fn from_json(v: serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(b),
        J::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Value::from(u),
            (_, Some(i), _) => Value::from(i),
            (_, _, f) => Value::F64(f.unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s),
        J::Array(items) => Value::Array(items.into_iter().map(from_json).collect()),
        J::Object(map) => Value::Map(
            map.into_iter()
                .map(|(k, v)| (Value::from(k), from_json(v)))
                .collect(),
        ),
    }
}

fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(name))
        .map(|(_, v)| v)
}

/// A tensor of the record (`{id, param: {bytes, shape, dtype}}`), or `None`.
fn tensor(v: &Value, key: &str) -> Result<Option<TensorData>, CheckpointError> {
    let Some(param) = field(v, "param") else {
        return Ok(None);
    };
    if field(v, "id").is_none() {
        return Ok(None);
    }
    let bad = |problem: &str| CheckpointError::BadTensor {
        key: key.to_string(),
        problem: problem.to_string(),
    };
    let bytes = field(param, "bytes")
        .and_then(|b| match b {
            Value::Binary(b) => Some(b.clone()),
            Value::Array(a) => a.iter().map(|x| x.as_u64().map(|x| x as u8)).collect(),
            _ => None,
        })
        .ok_or_else(|| bad("no bytes"))?;
    let shape: Vec<usize> = field(param, "shape")
        .and_then(Value::as_array)
        .and_then(|s| s.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
        .ok_or_else(|| bad("no shape"))?;
    let dtype = match field(param, "dtype").and_then(Value::as_str) {
        Some("F64") => DType::F64,
        Some("F32") => DType::F32,
        Some("F16") => DType::F16,
        Some("BF16") => DType::BF16,
        Some(other) => return Err(bad(&format!("dtype {other}, not a float dtype"))),
        None => return Err(bad("no dtype")),
    };
    let expected = shape.iter().product::<usize>() * dtype.size();
    if bytes.len() != expected {
        return Err(bad(&format!(
            "{} bytes for shape {shape:?} of {dtype:?} ({expected} expected)",
            bytes.len()
        )));
    }
    Ok(Some(TensorData::from_bytes_vec(bytes, shape, dtype)))
}

/// The values of `t` widened to `f64`.
fn f64s(t: &TensorData) -> Vec<f64> {
    t.clone()
        .convert_dtype(DType::F64)
        .try_into_vec::<f64>()
        .expect("a float tensor widens to f64")
}

fn walk(
    v: &Value,
    path: &mut Vec<String>,
    targets: &BTreeMap<String, DType>,
    out: &mut Vec<(String, TensorData)>,
) -> Result<(), CheckpointError> {
    let key = path.join(".");
    if let Some(data) = tensor(v, &key)? {
        out.push((key, data));
        return Ok(());
    }
    if let (Some(cells), Some(_)) = (field(v, "cells"), field(v, "digest")) {
        return fused_rnn(v, cells, &key, targets, out);
    }
    match v {
        Value::Map(entries) => {
            for (k, x) in entries {
                let Some(name) = k.as_str() else { continue };
                path.push(name.to_string());
                walk(x, path, targets, out)?;
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                path.push(i.to_string());
                walk(x, path, targets, out)?;
                path.pop();
            }
        }
        _ => {}
    }
    Ok(())
}

const KINDS: [&str; 5] = ["weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"];

/// A 0.21 `FusedRnn` record (`{cells, digest}`) at `path`: checked, then named for the
/// 0.22 model (canonical names, or a drop-in's gates).
fn fused_rnn(
    record: &Value,
    cells: &Value,
    path: &str,
    targets: &BTreeMap<String, DType>,
    out: &mut Vec<(String, TensorData)>,
) -> Result<(), CheckpointError> {
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}.")
    };
    let cells = cells.as_array().ok_or_else(|| CheckpointError::BadTensor {
        key: format!("{prefix}cells"),
        problem: "not a list of cells".into(),
    })?;
    // The model decides the directions: a reverse tensor under this path, or a Bi* drop-in.
    let bidirectional = targets.keys().any(|k| {
        k.strip_prefix(&prefix)
            .is_some_and(|rest| rest.contains("_reverse") || rest.starts_with("reverse."))
    });
    let nd = if bidirectional { 2 } else { 1 };
    let mut canonical: Vec<(String, usize, usize, &str, TensorData)> = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        let (layer, direction) = (i / nd, i % nd);
        for kind in KINDS {
            let Some(t) = field(cell, kind) else { continue };
            let suffix = if direction == 1 { "_reverse" } else { "" };
            let name = format!("{kind}_l{layer}{suffix}");
            if let Some(data) = tensor(t, &format!("{prefix}{name}"))? {
                canonical.push((name, layer, direction, kind, data));
            }
        }
    }
    // The digest: of the tensors in flat order (cell by cell, kind by kind), as read.
    let mut checksum = WeightsChecksum::new();
    for (name, _, _, _, data) in &canonical {
        let values = f64s(data);
        if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(CheckpointError::NotFinite {
                key: format!("{prefix}{name}"),
                index,
                value,
            });
        }
        checksum.add(&data.shape().to_vec(), values);
    }
    if let Some(digest) = field(record, "digest").filter(|d| !d.is_nil()) {
        let crcs: BTreeSet<u64> = ["exact", "f32", "f16", "bf16"]
            .iter()
            .filter_map(|k| field(digest, k).and_then(Value::as_u64))
            .collect();
        let got = checksum.crc();
        if !crcs.contains(&(got as u64)) {
            return Err(CheckpointError::DigestMismatch {
                path: path.to_string(),
                got,
            });
        }
    }
    let canonical_target = targets.contains_key(&format!("{prefix}weight_hh_l0"));
    for (name, layer, direction, kind, data) in canonical {
        if canonical_target || layer > 0 {
            out.push((format!("{prefix}{name}"), data));
        } else {
            out.extend(drop_in(
                &prefix,
                direction,
                bidirectional,
                kind,
                data,
                targets,
            ));
        }
    }
    Ok(())
}

/// The gate parameters of a drop-in layer (burn-nn's names) from one canonical tensor of
/// layer 0 (Note [Upgrading checkpoints]).
fn drop_in(
    prefix: &str,
    direction: usize,
    bidirectional: bool,
    kind: &str,
    data: TensorData,
    targets: &BTreeMap<String, DType>,
) -> Vec<(String, TensorData)> {
    let dir = match (bidirectional, direction) {
        (false, _) => String::new(),
        (true, 0) => "forward.".to_string(),
        (true, _) => "reverse.".to_string(),
    };
    let base = format!("{prefix}{dir}");
    let has = |gate: &str| targets.contains_key(&format!("{base}{gate}.hidden_transform.weight"));
    // PyTorch's gate order, as burn-nn names the gates.
    let gates: &[&str] = if has("input_gate") {
        &["input_gate", "forget_gate", "cell_gate", "output_gate"]
    } else if has("reset_gate") {
        &["reset_gate", "update_gate", "new_gate"]
    } else {
        &["gate"]
    };
    let (transform, what) = match kind {
        "weight_ih" => ("input_transform", "weight"),
        "weight_hh" => ("hidden_transform", "weight"),
        "bias_ih" => ("input_transform", "bias"),
        "bias_hh" => ("hidden_transform", "bias"),
        // No drop-in has a projection; keep the canonical name, which the model lacks
        // (burn-store then reports it as unused).
        _ => return vec![(format!("{base}{kind}_l0"), data)],
    };
    let dtype = data.dtype();
    let shape = data.shape().to_vec();
    let values = f64s(&data);
    let h = shape[0] / gates.len();
    gates
        .iter()
        .enumerate()
        .map(|(g, gate)| {
            let key = format!("{base}{gate}.{transform}.{what}");
            let block = if what == "weight" {
                // Rows g*h..(g+1)*h of [G*h, in], transposed to [in, h].
                let cols = shape[1];
                let mut t = vec![0.0; cols * h];
                for r in 0..h {
                    for c in 0..cols {
                        t[c * h + r] = values[(g * h + r) * cols + c];
                    }
                }
                TensorData::new(t, [cols, h])
            } else {
                TensorData::new(values[g * h..(g + 1) * h].to_vec(), [h])
            };
            (key, block.convert_dtype(dtype))
        })
        .collect()
}
