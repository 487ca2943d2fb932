//! The record of a [`FusedRnn`] (canonical weights and their digest) and checked loading
//! of a record: a record that does not fit the configuration, holds a non-finite weight,
//! or whose weights do not match its digest is an error naming the problem, never a
//! silently wrong model.

use burn::module::{
    AutodiffModule, Content, Devices, HasAutodiffModule, Module, ModuleDisplay,
    ModuleDisplayDefault, ModuleMapper, ModuleVisitor, Param,
};
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};

use super::digest::{WeightsDigest, WeightsHasher};
use super::{FusedRnn, FusedRnnLoadError, RnnCell, RnnCellRecord};
use crate::layout::{param_name, ParamKind, RnnLayout};

/// The record of a [`FusedRnn`]: its canonical weights and a digest of them.
///
/// `cells[l * D + d]` holds the tensors of layer `l`, direction `d` (see [`RnnCell`]).
/// `digest` is written by `Module::into_record` (so by every `save_file`) and checked by
/// [`FusedRnn::try_load_record`] and [`FusedRnn::try_load_file`]; see Note [Weights
/// digest] on [`WeightsDigest`]. A record built by hand may leave it `None`.
#[derive(Record)]
pub struct FusedRnnRecord<B: Backend> {
    /// Canonical weights of each pseudo-layer, index `layer * D + direction`.
    pub cells: Vec<RnnCellRecord<B>>,
    /// Digest of the weights (`None`: not checked).
    pub digest: Option<WeightsDigest>,
}

/// The tensors of a cell record, in [`ParamKind::ALL`] order.
pub(crate) fn cell_params<B: Backend>(cell: &RnnCellRecord<B>) -> [CellParam<'_, B>; 5] {
    [
        cell.weight_ih.as_ref().map(CellParam::Matrix),
        Some(CellParam::Matrix(&cell.weight_hh)),
        cell.bias_ih.as_ref().map(CellParam::Vector),
        cell.bias_hh.as_ref().map(CellParam::Vector),
        cell.weight_hr.as_ref().map(CellParam::Matrix),
    ]
    .map(|p| p.unwrap_or(CellParam::Absent))
}

/// One canonical tensor of a cell, or its absence.
pub(crate) enum CellParam<'a, B: Backend> {
    Matrix(&'a Param<Tensor<B, 2>>),
    Vector(&'a Param<Tensor<B, 1>>),
    Absent,
}

impl<B: Backend> CellParam<'_, B> {
    fn shape(&self) -> Option<Vec<usize>> {
        match self {
            Self::Matrix(p) => Some(p.lazy_shape().to_vec()),
            Self::Vector(p) => Some(p.lazy_shape().to_vec()),
            Self::Absent => None,
        }
    }

    fn data(&self) -> Option<TensorData> {
        match self {
            Self::Matrix(p) => Some(p.val().into_data()),
            Self::Vector(p) => Some(p.val().into_data()),
            Self::Absent => None,
        }
    }
}

/// The digest of the weights of `cells` (Note [Weights digest]).
pub(crate) fn digest_of<B: Backend>(cells: &[RnnCellRecord<B>]) -> WeightsDigest {
    let mut hasher = WeightsHasher::digest();
    for cell in cells {
        for data in cell_params(cell).iter().filter_map(CellParam::data) {
            hasher.add(&data);
        }
    }
    hasher.finish()
}

/// Checks the number of cells and the shape (or absence) of every tensor against `layout`;
/// `shapes[idx][k]` is the shape of tensor `ParamKind::ALL[k]` of pseudo-layer `idx`.
pub(crate) fn check_shapes(
    layout: &RnnLayout,
    shapes: &[[Option<Vec<usize>>; 5]],
) -> Result<(), FusedRnnLoadError> {
    let spec = layout.spec();
    if shapes.len() != spec.num_pseudo_layers() {
        return Err(FusedRnnLoadError::CellCount {
            expected: spec.num_pseudo_layers(),
            got: shapes.len(),
        });
    }
    let nd = spec.num_directions();
    for (idx, cell) in shapes.iter().enumerate() {
        let (layer, direction) = (idx / nd, idx % nd);
        for (kind, got) in ParamKind::ALL.into_iter().zip(cell) {
            let expected = layout
                .entry(layer, direction, kind)
                .map(|e| e.shape.clone());
            if &expected != got {
                return Err(FusedRnnLoadError::Shape {
                    name: param_name(kind, layer, direction),
                    expected,
                    got: got.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Checks the values of the canonical tensors `(name, data)`, in flat order: a float dtype
/// and bytes that fit the shape, finite values, and, when the record carries one, the
/// digest (Note [Weights digest]).
pub(crate) fn check_values<'a>(
    tensors: impl IntoIterator<Item = (String, &'a TensorData)>,
    digest: Option<&WeightsDigest>,
) -> Result<(), FusedRnnLoadError> {
    let mut hasher = WeightsHasher::exact();
    for (name, data) in tensors {
        if !matches!(
            data.dtype,
            DType::F64 | DType::F32 | DType::F16 | DType::BF16
        ) {
            return Err(FusedRnnLoadError::BadTensor {
                name,
                problem: format!("expected dtype F64, F32, F16 or BF16, got {:?}", data.dtype),
            });
        }
        let count: usize = data.shape.iter().product();
        let expected_bytes = count.checked_mul(data.dtype.size());
        if expected_bytes != Some(data.bytes.len()) {
            return Err(FusedRnnLoadError::BadTensor {
                name,
                problem: format!(
                    "expected {} bytes for shape {:?} in {:?}, got {}",
                    expected_bytes.map_or("more than usize::MAX".into(), |b| b.to_string()),
                    data.shape.to_vec(),
                    data.dtype,
                    data.bytes.len()
                ),
            });
        }
        if let Some((flat, value)) = data.iter::<f64>().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(FusedRnnLoadError::NotFinite {
                name,
                index: unravel(flat, &data.shape),
                value,
            });
        }
        hasher.add(data);
    }
    match digest {
        Some(digest) if !digest.accepts(hasher.exact_crc()) => {
            Err(FusedRnnLoadError::DigestMismatch {
                expected: *digest,
                got: hasher.exact_crc(),
            })
        }
        _ => Ok(()),
    }
}

/// The row-major index of element `flat` of a tensor of `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (i, &d) in shape.iter().enumerate().rev() {
        index[i] = flat % d;
        flat /= d;
    }
    index
}

/// Checks `record` against `layout`: shapes, then values and digest.
pub(crate) fn check_record<B: Backend>(
    layout: &RnnLayout,
    record: &FusedRnnRecord<B>,
) -> Result<(), FusedRnnLoadError> {
    let shapes: Vec<_> = record
        .cells
        .iter()
        .map(|cell| cell_params(cell).map(|p| p.shape()))
        .collect();
    check_shapes(layout, &shapes)?;
    let nd = layout.spec().num_directions();
    let mut tensors = Vec::new();
    for (idx, cell) in record.cells.iter().enumerate() {
        for (kind, param) in ParamKind::ALL.into_iter().zip(cell_params(cell)) {
            if let Some(data) = param.data() {
                tensors.push((param_name(kind, idx / nd, idx % nd), data));
            }
        }
    }
    check_values(
        tensors.iter().map(|(name, data)| (name.clone(), data)),
        record.digest.as_ref(),
    )
}

impl<B: Backend> FusedRnn<B> {
    /// Loads a record after checking it against this module's configuration.
    ///
    /// Burn's `load_record` copies tensors without looking at them; this is the checked
    /// form. It checks, in this order: the number of cells and every tensor's shape (or
    /// absence), that every weight is finite, and, when the record carries a digest, that
    /// the weights are the ones it was made from (Note [Weights digest] on
    /// [`WeightsDigest`]). A record without a digest loads without that check.
    ///
    /// # Errors
    ///
    /// - [`FusedRnnLoadError::CellCount`] for a different number of layers or directions;
    /// - [`FusedRnnLoadError::Shape`] naming the first tensor whose shape (or presence)
    ///   does not fit, with both shapes;
    /// - [`FusedRnnLoadError::NotFinite`] naming the first tensor with a NaN or infinite
    ///   weight, with the index of the first such element;
    /// - [`FusedRnnLoadError::BadTensor`] for a tensor that is not float data;
    /// - [`FusedRnnLoadError::DigestMismatch`] when the weights changed after the record
    ///   was made.
    pub fn try_load_record(self, record: FusedRnnRecord<B>) -> Result<Self, FusedRnnLoadError> {
        check_record(&self.layout(), &record)?;
        Ok(self.load_record(record))
    }
}

// The `Module` implementation is written out rather than derived so that `into_record`
// can compute the digest of the weights it records: a derived record could only hold
// each field's own record. It does what `#[derive(Module)]` would, field by field
// (`cells` is the only module field; the others are plain settings).

impl<B: Backend> Module<B> for FusedRnn<B> {
    type Record = FusedRnnRecord<B>;

    fn load_record(self, record: Self::Record) -> Self {
        Self {
            cells: self.cells.load_record(record.cells),
            ..self
        }
    }

    fn into_record(self) -> Self::Record {
        let cells = self.cells.into_record();
        FusedRnnRecord {
            digest: Some(digest_of(&cells)),
            cells,
        }
    }

    fn num_params(&self) -> usize {
        Module::num_params(&self.cells)
    }

    fn visit<Visitor: ModuleVisitor<B>>(&self, visitor: &mut Visitor) {
        visitor.enter_module("cells", "Struct:FusedRnn");
        self.cells.visit(visitor);
        visitor.exit_module("cells", "Struct:FusedRnn");
    }

    fn map<Mapper: ModuleMapper<B>>(self, mapper: &mut Mapper) -> Self {
        mapper.enter_module("cells", "Struct:FusedRnn");
        let cells = self.cells.map(mapper);
        mapper.exit_module("cells", "Struct:FusedRnn");
        Self { cells, ..self }
    }

    fn collect_devices(&self, devices: Devices<B>) -> Devices<B> {
        self.cells.collect_devices(devices)
    }

    fn to_device(self, device: &B::Device) -> Self {
        Self {
            cells: self.cells.to_device(device),
            ..self
        }
    }

    fn fork(self, device: &B::Device) -> Self {
        Self {
            cells: self.cells.fork(device),
            ..self
        }
    }
}

impl<B: Backend> FusedRnn<B> {
    /// This module's settings with other cells (any backend).
    fn with_cells<B2: Backend>(&self, cells: Vec<RnnCell<B2>>) -> FusedRnn<B2> {
        FusedRnn {
            cells,
            spec: self.spec,
            batch_first: self.batch_first,
            dropout: self.dropout,
            dropout_calls: self.dropout_calls.clone(),
            flat_memo: Default::default(),
        }
    }
}

impl<B: AutodiffBackend> AutodiffModule<B> for FusedRnn<B> {
    type InnerModule = FusedRnn<B::InnerBackend>;

    fn valid(&self) -> Self::InnerModule {
        self.with_cells(self.cells.valid())
    }

    fn from_inner(module: Self::InnerModule) -> Self {
        let FusedRnn {
            cells,
            spec,
            batch_first,
            dropout,
            dropout_calls,
            flat_memo: _,
        } = module;
        FusedRnn {
            cells: Vec::<RnnCell<B>>::from_inner(cells),
            spec,
            batch_first,
            dropout,
            dropout_calls,
            flat_memo: Default::default(),
        }
    }
}

impl<B: AutodiffBackend> HasAutodiffModule<B> for FusedRnn<B::InnerBackend> {
    type TrainModule = FusedRnn<B>;
}

impl<B: Backend> Clone for FusedRnn<B> {
    fn clone(&self) -> Self {
        self.with_cells(self.cells.clone())
    }
}

impl<B: Backend> core::fmt::Display for FusedRnn<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", ModuleDisplay::format(self, Default::default()))
    }
}

impl<B: Backend> ModuleDisplayDefault for FusedRnn<B> {
    fn content(&self, content: Content) -> Option<Content> {
        content
            .set_top_level_type("FusedRnn")
            .add("cells", &self.cells)
            .add_debug_attribute("spec", &self.spec)
            .add_debug_attribute("batch_first", &self.batch_first)
            .add_debug_attribute("dropout", &self.dropout)
            .optional()
    }

    fn num_params(&self) -> usize {
        Module::num_params(self)
    }
}

impl<B: Backend> ModuleDisplay for FusedRnn<B> {}
