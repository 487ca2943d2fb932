//! PyTorch `state_dict`s: `.pt` / `.pth` files (`torch.save(module.state_dict())`) and
//! `.safetensors` files, read with `burn-store`, written with `safetensors`.
//!
//! PyTorch's `nn.LSTM`, `nn.GRU` and `nn.RNN` hold exactly this crate's canonical tensors
//! (Note [RNN weight layout] in [`crate::layout`]) under the same names, so importing is a
//! lookup by name and exporting writes each tensor under its name: no gate is reordered and
//! no matrix transposed.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn_fused_rnn::interop::PytorchImport;
//! use burn_fused_rnn::{FusedRnn, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Default::default();
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/interop");
//! // torch.save(model.state_dict(), "model_lstm_proj.pt"), where model.encoder.rnn is
//! // nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=3, batch_first=True)
//! let lstm: FusedRnn<NdArray> = PytorchImport::new(RnnMode::Lstm)
//!     .with_prefix("encoder.rnn.")
//!     .with_batch_first(true) // as the model made it; a state_dict does not record it
//!     .load(format!("{dir}/model_lstm_proj.pt"), &device)?;
//! assert_eq!((lstm.spec().num_layers, lstm.spec().proj_size), (2, Some(3)));
//!
//! // A bare nn.LSTM(3, 4, num_layers=2, bidirectional=True) in PyTorch's default layout
//! // (inputs [seq_length, batch_size, features]), which is the import's default too.
//! let lstm: FusedRnn<NdArray> = PytorchImport::new(RnnMode::Lstm)
//!     .load(format!("{dir}/lstm.pt"), &device)?;
//! assert!(!lstm.batch_first());
//!
//! // For nn.LSTM(...).load_state_dict(safetensors.torch.load_file(path)).
//! let path = std::env::temp_dir().join("burn_fused_rnn_doc_lstm.safetensors");
//! lstm.save_pytorch_safetensors(&path, "")?;
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Element, Tensor, TensorData};
use burn_store::{ModuleStore, PytorchStore, SafetensorsStore, TensorSnapshot};

use super::canonical::Canonical;
use super::InteropError;
use crate::config::FusedRnnConfig;
use crate::layout::{param_name, ParamKind};
use crate::module::FusedRnn;
use crate::spec::RnnMode;

/// Where the configuration of an import comes from.
#[derive(Clone, Debug)]
enum ConfigSource {
    Infer(RnnMode),
    Given(Box<FusedRnnConfig>),
}

/// Imports a PyTorch `state_dict` into a [`FusedRnn`]: what
/// `torch.save(module.state_dict(), path)` or
/// `safetensors.torch.save_file(module.state_dict(), path)` wrote for an `nn.LSTM`,
/// `nn.GRU`, `nn.RNN`, `nn.LSTMCell`, `nn.GRUCell` or `nn.RNNCell`, or for a model holding
/// one (see [`PytorchImport::with_prefix`]).
///
/// # Note [PyTorch imports]
///
/// - **File type.** Found from the file's first bytes, whatever its name: a zip archive
///   (`torch.save` since PyTorch 1.6), a pickle stream (older `torch.save`), or a
///   safetensors header (an 8-byte length, then `{`). Anything else is
///   [`InteropError::Io`] saying what the file starts with. `.pt` files are read with
///   `burn-store`'s `PytorchStore`, safetensors files with its `SafetensorsStore`.
/// - **Layout.** PyTorch's: the module takes `[seq_length, batch_size, features]` inputs
///   (`batch_first = false`), as `torch.nn.LSTM` does with its defaults. A `state_dict`
///   does not record `batch_first`: set [`PytorchImport::with_batch_first`]`(true)` for a
///   module made with `batch_first=True`.
/// - **Layers and cells.** A layer's keys are `weight_ih_l{l}{_reverse}`, ...; a cell's
///   (`nn.LSTMCell`, `nn.GRUCell`, `nn.RNNCell`) are `weight_ih`, `weight_hh`, `bias_ih`,
///   `bias_hh`. A cell loads as a one-layer, one-direction module:
///   [`FusedRnn::prepare`] then [`PreparedRnn::step`](crate::PreparedRnn::step) is the
///   cell's forward, and [`FusedRnn::forward`] runs it over a sequence. (`nn.RNNCell`'s
///   `nonlinearity` is not in its `state_dict`: choose [`RnnMode::RnnTanh`] or
///   [`RnnMode::RnnRelu`].)
/// - **Weights.** Every tensor's shape is checked against the configuration before any is
///   read; then every weight must be finite: a NaN or an infinity is
///   [`InteropError::NotFinite`], naming the key and the element's index.
/// - **Errors.** A tensor the configuration needs and the file lacks is
///   [`InteropError::Missing`]; a tensor under the prefix that the configuration has no
///   place for (a layer above the complete ones, a direction, a projection, a name that is
///   no RNN parameter) is [`InteropError::Unexpected`]. Both list the keys found under the
///   prefix, with their shapes.
///
/// Tensors of any float dtype are converted to the backend's float element type.
///
/// # Configuration
///
/// [`PytorchImport::new`] infers the configuration from the tensors, given the mode: layers
/// from `weight_ih_l{l}` and `weight_hh_l{l}` (the layers, from 0 up, that have both),
/// directions from `_reverse`, the hidden size from `weight_hh_l0`, the projection from
/// `weight_hr_l0`, bias from `bias_hh_l0`, the input size from `weight_ih_l0`. PyTorch never
/// writes a `state_dict` without `weight_ih_l0`; this crate's export
/// ([`FusedRnn::save_pytorch_safetensors`]) does for [`InputMode::Skip`](crate::InputMode::Skip),
/// and marks the file so (metadata `skip_input = true`): only such a file is read as skip
/// input. The inferred configuration has no dropout.
///
/// [`PytorchImport::with_config`] checks the tensors against a configuration instead.
#[derive(Clone, Debug)]
pub struct PytorchImport {
    config: ConfigSource,
    batch_first: Option<bool>,
    prefix: String,
    top_level_key: Option<String>,
}

impl PytorchImport {
    /// An import of a `mode` network whose configuration is inferred from its tensors, in
    /// PyTorch's layout (`batch_first = false`).
    pub fn new(mode: RnnMode) -> Self {
        Self {
            config: ConfigSource::Infer(mode),
            batch_first: None,
            prefix: String::new(),
            top_level_key: None,
        }
    }

    /// An import checked against `config` (its mode, sizes, layers, directions, projection,
    /// bias, input mode); the module gets `config`'s other settings too (layout, dropout).
    pub fn with_config(config: FusedRnnConfig) -> Self {
        Self {
            config: ConfigSource::Given(Box::new(config)),
            batch_first: None,
            prefix: String::new(),
            top_level_key: None,
        }
    }

    /// Reads the tensors whose keys start with `prefix`, e.g. `"encoder.rnn."` for a model
    /// whose `encoder.rnn` is the recurrent layer; keys outside the prefix are ignored.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Reads the `state_dict` stored under `key` of a `.pt` checkpoint holding a
    /// dictionary, e.g. `torch.save({"model": model.state_dict(), ...}, path)` (ignored for
    /// safetensors files, which hold tensors only).
    pub fn with_top_level_key(mut self, key: impl Into<String>) -> Self {
        self.top_level_key = Some(key.into());
        self
    }

    /// Sets the module's layout: `false` (the default of an inferred configuration, and
    /// PyTorch's) for `[seq_length, batch_size, features]` inputs; `true` for
    /// `[batch_size, seq_length, features]`, a module made with `batch_first=True`. A
    /// `state_dict` does not record it. Overrides the `batch_first` of a configuration
    /// given to [`PytorchImport::with_config`].
    pub fn with_batch_first(mut self, batch_first: bool) -> Self {
        self.batch_first = Some(batch_first);
        self
    }

    /// Reads `path` and builds the module on `device`.
    ///
    /// # Errors
    ///
    /// - [`InteropError::Io`] when the file cannot be read (missing, neither a PyTorch
    ///   checkpoint nor a safetensors file, a `.pt` whose top level is not a tensor
    ///   dictionary);
    /// - [`InteropError::Missing`] naming the key (with the prefix) of a tensor that is
    ///   absent, [`InteropError::Shape`] naming the key and both shapes,
    ///   [`InteropError::Unexpected`] for a key under the prefix that the configuration has
    ///   no place for (another layer or direction, a projection, a name that is not an RNN
    ///   parameter's), [`InteropError::Dtype`] for a tensor that is not float,
    ///   [`InteropError::NotFinite`] for a NaN or infinite weight (Note [PyTorch imports]).
    pub fn load<B: Backend>(
        &self,
        path: impl AsRef<Path>,
        device: &B::Device,
    ) -> Result<FusedRnn<B>, InteropError> {
        let file = self.read(path.as_ref())?;
        let canonical = self.canonical::<B>(&file.tensors, device)?;
        let config = self.resolve(&canonical, file.skip_input)?;
        canonical.build(&config, device)
    }

    fn mode(&self) -> RnnMode {
        match &self.config {
            ConfigSource::Infer(mode) => *mode,
            ConfigSource::Given(config) => config.mode,
        }
    }

    fn resolve<B: Backend>(
        &self,
        canonical: &Canonical<'_, B>,
        skip_input: bool,
    ) -> Result<FusedRnnConfig, InteropError> {
        Ok(match &self.config {
            ConfigSource::Infer(_) => canonical
                .infer_config(skip_input)?
                .with_batch_first(self.batch_first.unwrap_or(false)),
            ConfigSource::Given(config) => match self.batch_first {
                Some(batch_first) => (**config).clone().with_batch_first(batch_first),
                None => (**config).clone(),
            },
        })
    }

    /// Every tensor of the file, by key, read by the reader its content calls for.
    fn read(&self, path: &Path) -> Result<FileTensors, InteropError> {
        let io = |e: Box<dyn std::error::Error + Send + Sync>| InteropError::Io {
            path: path.to_path_buf(),
            source: e,
        };
        match detect(path).map_err(io)? {
            FileKind::Safetensors { skip_input } => {
                let mut store = SafetensorsStore::from_file(path);
                let snapshots = store.get_all_snapshots().map_err(|e| io(Box::new(e)))?;
                Ok(FileTensors {
                    tensors: snapshots.clone(),
                    skip_input,
                })
            }
            FileKind::Pytorch => {
                let mut store = PytorchStore::from_file(path);
                if let Some(key) = &self.top_level_key {
                    store = store.with_top_level_key(key.clone());
                }
                let snapshots = store.get_all_snapshots().map_err(|e| io(Box::new(e)))?;
                Ok(FileTensors {
                    tensors: snapshots.clone(),
                    skip_input: false,
                })
            }
        }
    }

    /// The tensors under the prefix, sorted into canonical slots: a layer's
    /// (`weight_ih_l0`, ...) or a cell's (`weight_ih`, ...).
    fn canonical<'a, B: Backend>(
        &self,
        snapshots: &'a BTreeMap<String, TensorSnapshot>,
        device: &'a B::Device,
    ) -> Result<Canonical<'a, B>, InteropError> {
        let prefix = self.prefix.clone();
        let under: Vec<(&'a String, &'a str, &'a TensorSnapshot)> = snapshots
            .iter()
            .filter_map(|(key, snapshot)| {
                key.strip_prefix(prefix.as_str())
                    .map(|name| (key, name, snapshot))
            })
            .collect();
        // A cell's names have no layer suffix; a state_dict holds one kind or the other.
        let is_cell = !under
            .iter()
            .any(|(_, name, _)| parse_param_name(name).is_some())
            && under.iter().any(|(_, name, _)| *name == "weight_hh");
        let naming: super::canonical::Naming<'a> = {
            let prefix = prefix.clone();
            if is_cell {
                Box::new(move |_, _, k| format!("{prefix}{}", k.stem()))
            } else {
                Box::new(move |l, d, k| format!("{prefix}{}", param_name(k, l, d)))
            }
        };
        let mut canonical = Canonical::new(self.mode(), naming);
        for (key, name, snapshot) in under {
            let shape = snapshot.shape.to_vec();
            let slot = if is_cell {
                parse_cell_name(name).map(|kind| (0, 0, kind))
            } else {
                parse_param_name(name)
            };
            match slot {
                Some(slot) => {
                    if !snapshot.dtype.is_float() {
                        return Err(InteropError::Dtype {
                            key: key.clone(),
                            dtype: snapshot.dtype,
                        });
                    }
                    let load = Box::new(move || load_flat::<B>(key, snapshot, device));
                    canonical.insert_lazy(slot, key.clone(), shape, load);
                }
                None => {
                    let why = if parse_cell_name(name).is_some() {
                        "a cell's parameter (nn.LSTMCell / GRUCell / RNNCell) next to a \
                         layer's (nn.LSTM / GRU / RNN): use a prefix that selects one module"
                    } else {
                        "not a parameter of torch.nn.LSTM / GRU / RNN or of their cells"
                    };
                    canonical.stray(key.clone(), shape, why.into())
                }
            }
        }
        if canonical.is_empty() {
            return Err(InteropError::Missing {
                key: format!("{prefix}{}", param_name(ParamKind::WeightHh, 0, 0)),
                expected: None,
                context: prefix_hint(snapshots.keys(), &prefix),
            });
        }
        Ok(canonical)
    }
}

/// The tensors of a file, and whether it marks a `state_dict` without `weight_ih_l0` as
/// skip input (this crate's export does, in the safetensors metadata).
struct FileTensors {
    tensors: BTreeMap<String, TensorSnapshot>,
    skip_input: bool,
}

/// What a file holds, from its first bytes (Note [PyTorch imports]).
#[derive(Debug, PartialEq, Eq)]
enum FileKind {
    /// A safetensors file; `skip_input` when its metadata says `skip_input = true`.
    Safetensors { skip_input: bool },
    /// A `torch.save` file: a zip archive, a pickle stream (legacy format), or a tar
    /// archive (the oldest format).
    Pytorch,
}

/// The largest safetensors header this reader accepts (the safetensors crate's limit).
const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// Finds what `path` holds from its content, whatever its extension.
fn detect(path: &Path) -> Result<FileKind, Box<dyn std::error::Error + Send + Sync>> {
    use std::io::{Read, Seek, SeekFrom};

    let mut file = std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "no such file".into()
        } else {
            Box::new(e) as Box<dyn std::error::Error + Send + Sync>
        }
    })?;
    let len = file.metadata()?.len();
    let mut head = [0u8; 9];
    let n = file.read(&mut head)?;
    let head = &head[..n];
    if head.is_empty() {
        return Err("empty file: expected a PyTorch checkpoint or a safetensors file".into());
    }
    if head.starts_with(b"PK\x03\x04") {
        return Ok(FileKind::Pytorch);
    }
    // Before the pickle check: a safetensors header's length may start with byte 0x80.
    if head.len() == 9 && head[8] == b'{' {
        let header_len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        if header_len <= MAX_SAFETENSORS_HEADER && header_len.saturating_add(8) <= len {
            let mut header = vec![0u8; header_len as usize];
            file.seek(SeekFrom::Start(8))?;
            file.read_exact(&mut header)?;
            let header: serde_json::Value = serde_json::from_slice(&header)
                .map_err(|e| format!("a safetensors header that does not parse: {e}"))?;
            let skip_input = header["__metadata__"]["skip_input"].as_str() == Some("true");
            return Ok(FileKind::Safetensors { skip_input });
        }
    }
    // Pickle's PROTO opcode: the legacy `torch.save` format.
    if head[0] == 0x80 {
        return Ok(FileKind::Pytorch);
    }
    if len >= 262 {
        let mut magic = [0u8; 5];
        file.seek(SeekFrom::Start(257))?;
        file.read_exact(&mut magic)?;
        if &magic == b"ustar" {
            return Ok(FileKind::Pytorch);
        }
    }
    Err(format!(
        "expected a PyTorch checkpoint (a zip archive or a pickle stream) or a safetensors \
         file, got a file of {len} bytes starting with {}",
        describe_bytes(head)
    )
    .into())
}

/// The first bytes of a file, as text when they are printable, else in hex.
fn describe_bytes(head: &[u8]) -> String {
    if head
        .iter()
        .all(|b| b.is_ascii_graphic() || *b == b' ' || *b == b'\n')
    {
        format!("{:?}", String::from_utf8_lossy(head))
    } else {
        head.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Reads one tensor, flattened, in the backend's float element type.
fn load_flat<B: Backend>(
    key: &str,
    snapshot: &TensorSnapshot,
    device: &B::Device,
) -> Result<Tensor<B, 1>, InteropError> {
    let mut data = snapshot.to_data().map_err(|e| InteropError::Io {
        path: PathBuf::from(key),
        source: Box::new(e),
    })?;
    data.shape = [data.num_elements()].into();
    let dtype = <B::FloatElem as Element>::dtype();
    Ok(Tensor::from_data(
        data.convert_dtype(dtype),
        (device, dtype),
    ))
}

/// `(layer, direction, kind)` of a PyTorch RNN parameter name such as
/// `weight_ih_l1_reverse`.
pub(crate) fn parse_param_name(name: &str) -> Option<(usize, usize, ParamKind)> {
    let (name, direction) = match name.strip_suffix("_reverse") {
        Some(n) => (n, 1),
        None => (name, 0),
    };
    let (stem, layer) = name.rsplit_once("_l")?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let layer = layer.parse().ok()?;
    let kind = ParamKind::ALL.into_iter().find(|k| k.stem() == stem)?;
    Some((layer, direction, kind))
}

/// The kind of a PyTorch RNN cell's parameter (`weight_ih`, `weight_hh`, `bias_ih`,
/// `bias_hh`; cells have no projection).
fn parse_cell_name(name: &str) -> Option<ParamKind> {
    ParamKind::ALL
        .into_iter()
        .filter(|k| *k != ParamKind::WeightHr)
        .find(|k| k.stem() == name)
}

/// A hint for an import that found no RNN tensor under `prefix`: the prefixes under which
/// the file does hold a layer's or a cell's.
fn prefix_hint<'a>(keys: impl Iterator<Item = &'a String>, prefix: &str) -> String {
    let found: Vec<String> = keys
        .filter_map(|k| {
            k.strip_suffix("weight_hh_l0").or_else(|| {
                k.strip_suffix("weight_hh")
                    .filter(|p| p.is_empty() || p.ends_with('.'))
            })
        })
        .map(|p| format!("{p:?}"))
        .collect();
    if found.is_empty() {
        format!(
            "no key under prefix {prefix:?} is an RNN parameter, and no key ends in weight_hh_l0 \
             or weight_hh"
        )
    } else {
        format!(
            "no key under prefix {prefix:?} is an RNN parameter; the file has RNN parameters under prefix {}",
            found.join(", ")
        )
    }
}

impl<B: Backend> FusedRnn<B> {
    /// The canonical tensors under PyTorch's names (`weight_ih_l0`, ...), in
    /// `named_parameters()` order, each with `prefix` in front: what
    /// `module.state_dict()` of the equivalent `nn.LSTM` / `nn.GRU` / `nn.RNN` holds.
    ///
    /// A module with skip input has no `weight_ih_l0` / `bias_ih_l0` (PyTorch has no skip
    /// input, so such a `state_dict` loads only back into this crate).
    pub fn pytorch_state_dict(&self, prefix: &str) -> Vec<(String, TensorData)> {
        let layout = self.layout();
        let nd = self.spec().num_directions();
        layout
            .entries()
            .iter()
            .map(|e| {
                let cell = &self.cells[e.layer * nd + e.direction];
                let data = match e.kind {
                    ParamKind::WeightIh => cell.weight_ih.as_ref().map(|p| p.val().into_data()),
                    ParamKind::WeightHh => Some(cell.weight_hh.val().into_data()),
                    ParamKind::BiasIh => cell.bias_ih.as_ref().map(|p| p.val().into_data()),
                    ParamKind::BiasHh => cell.bias_hh.as_ref().map(|p| p.val().into_data()),
                    ParamKind::WeightHr => cell.weight_hr.as_ref().map(|p| p.val().into_data()),
                }
                .unwrap_or_else(|| panic!("expected {} in the module, got none", e.name()));
                (format!("{prefix}{}", e.name()), data)
            })
            .collect()
    }

    /// Writes the canonical tensors to a `.safetensors` file under PyTorch's names (with
    /// `prefix` in front; `""` for a bare `state_dict`), in the module's dtype, so that
    /// `torch.nn.LSTM(...).load_state_dict(safetensors.torch.load_file(path))` accepts
    /// it. The file's metadata records the mode and sizes (`"mode"`, `"d_input"`, ...).
    ///
    /// # Errors
    ///
    /// [`InteropError::Io`] when the file cannot be written, or a tensor's dtype has no
    /// safetensors equivalent.
    pub fn save_pytorch_safetensors(
        &self,
        path: impl AsRef<Path>,
        prefix: &str,
    ) -> Result<(), InteropError> {
        let path = path.as_ref();
        let spec = self.spec();
        let mut metadata = HashMap::new();
        metadata.insert("format".to_string(), "pt".to_string());
        metadata.insert("mode".to_string(), spec.mode.name().to_string());
        for (k, v) in [
            ("d_input", spec.d_input),
            ("d_hidden", spec.d_hidden),
            ("num_layers", spec.num_layers),
            ("proj_size", spec.proj_size.unwrap_or(0)),
        ] {
            metadata.insert(k.to_string(), v.to_string());
        }
        metadata.insert("bidirectional".into(), spec.bidirectional.to_string());
        metadata.insert("bias".into(), spec.bias.to_string());
        metadata.insert("skip_input".into(), spec.skip_input.to_string());
        write_safetensors(path, self.pytorch_state_dict(prefix), Some(metadata))
    }
}

/// Writes named tensors to a `.safetensors` file.
pub(crate) fn write_safetensors(
    path: &Path,
    tensors: Vec<(String, TensorData)>,
    metadata: Option<HashMap<String, String>>,
) -> Result<(), InteropError> {
    let io = |e: Box<dyn std::error::Error + Send + Sync>| InteropError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let views = tensors
        .iter()
        .map(|(name, data)| {
            let dtype = match data.dtype {
                DType::F64 => safetensors::Dtype::F64,
                DType::F32 => safetensors::Dtype::F32,
                DType::F16 => safetensors::Dtype::F16,
                DType::BF16 => safetensors::Dtype::BF16,
                other => {
                    return Err(io(
                        format!("{name}: dtype {other:?} cannot be exported").into()
                    ))
                }
            };
            // Burn's host data is little-endian on every platform it runs on, as
            // safetensors requires.
            let view =
                safetensors::tensor::TensorView::new(dtype, data.shape.to_vec(), data.as_bytes())
                    .map_err(|e| io(Box::new(e)))?;
            Ok((name.clone(), view))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize_to_file(views, metadata, path).map_err(|e| io(Box::new(e)))
}
