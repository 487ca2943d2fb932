//! Checked record loading: a record that does not fit the configuration is an error that
//! names the tensor and both shapes, never a silently wrong model.

use core::fmt;
use std::path::PathBuf;

use burn::module::{Module, Param};
use burn::record::{FileRecorder, RecorderError};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{FusedRnn, FusedRnnRecord, RnnCellRecord};
use crate::layout::{param_name, ParamKind, RnnLayout};

/// Why a record could not be loaded into a [`FusedRnn`].
#[derive(Debug)]
pub enum FusedRnnLoadError {
    /// The recorder failed (missing file, corrupt or foreign format).
    Recorder(RecorderError),
    /// The record has a different number of pseudo-layers (`num_layers * directions`).
    CellCount {
        /// Pseudo-layers the configuration has.
        expected: usize,
        /// Pseudo-layers the record has.
        got: usize,
    },
    /// A tensor's shape, or its presence, does not fit the configuration.
    Shape {
        /// PyTorch name of the tensor, e.g. `weight_ih_l1_reverse`.
        name: String,
        /// Shape the configuration expects (`None`: the configuration has no such tensor).
        expected: Option<Vec<usize>>,
        /// Shape in the record (`None`: the record has no such tensor).
        got: Option<Vec<usize>>,
    },
}

impl fmt::Display for FusedRnnLoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = |s: &Option<Vec<usize>>| s.as_ref().map_or("none".into(), |s| format!("{s:?}"));
        match self {
            Self::Recorder(e) => write!(f, "could not read the record: {e}"),
            Self::CellCount { expected, got } => write!(
                f,
                "record does not fit the configuration: expected {expected} cells (num_layers * directions), got {got}"
            ),
            Self::Shape {
                name,
                expected,
                got,
            } => write!(
                f,
                "record does not fit the configuration: expected {name} of shape {}, got {}",
                shape(expected),
                shape(got)
            ),
        }
    }
}

impl std::error::Error for FusedRnnLoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Recorder(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RecorderError> for FusedRnnLoadError {
    fn from(e: RecorderError) -> Self {
        Self::Recorder(e)
    }
}

fn shape_of<B: Backend, const D: usize>(p: &Option<Param<Tensor<B, D>>>) -> Option<Vec<usize>> {
    p.as_ref().map(|p| p.lazy_shape().to_vec())
}

/// Checks every tensor of `record` against `layout`.
pub(crate) fn check_record<B: Backend>(
    layout: &RnnLayout,
    record: &FusedRnnRecord<B>,
) -> Result<(), FusedRnnLoadError> {
    let spec = layout.spec();
    if record.cells.len() != spec.num_pseudo_layers() {
        return Err(FusedRnnLoadError::CellCount {
            expected: spec.num_pseudo_layers(),
            got: record.cells.len(),
        });
    }
    let nd = spec.num_directions();
    for (idx, cell) in record.cells.iter().enumerate() {
        let (layer, direction) = (idx / nd, idx % nd);
        for kind in ParamKind::ALL {
            let expected = layout
                .entry(layer, direction, kind)
                .map(|e| e.shape.clone());
            let got = cell_shape(cell, kind);
            if expected != got {
                return Err(FusedRnnLoadError::Shape {
                    name: param_name(kind, layer, direction),
                    expected,
                    got,
                });
            }
        }
    }
    Ok(())
}

fn cell_shape<B: Backend>(cell: &RnnCellRecord<B>, kind: ParamKind) -> Option<Vec<usize>> {
    match kind {
        ParamKind::WeightIh => shape_of(&cell.weight_ih),
        ParamKind::WeightHh => Some(cell.weight_hh.lazy_shape().to_vec()),
        ParamKind::BiasIh => shape_of(&cell.bias_ih),
        ParamKind::BiasHh => shape_of(&cell.bias_hh),
        ParamKind::WeightHr => shape_of(&cell.weight_hr),
    }
}

impl<B: Backend> FusedRnn<B> {
    /// Loads a record after checking that every tensor fits this module's configuration.
    ///
    /// Burn's `load_record` copies tensors without looking at their shapes; this is the
    /// checked form.
    ///
    /// # Errors
    ///
    /// [`FusedRnnLoadError::Shape`] naming the first tensor whose shape (or presence) does
    /// not fit, with both shapes; [`FusedRnnLoadError::CellCount`] for a different number of
    /// layers or directions.
    pub fn try_load_record(self, record: FusedRnnRecord<B>) -> Result<Self, FusedRnnLoadError> {
        check_record(&self.layout(), &record)?;
        Ok(self.load_record(record))
    }

    /// Reads a record with `recorder` and loads it with [`FusedRnn::try_load_record`].
    ///
    /// # Errors
    ///
    /// [`FusedRnnLoadError::Recorder`] when the file cannot be read, else as
    /// [`FusedRnn::try_load_record`].
    pub fn try_load_file<R: FileRecorder<B>, P: Into<PathBuf>>(
        self,
        path: P,
        recorder: &R,
        device: &B::Device,
    ) -> Result<Self, FusedRnnLoadError> {
        let record = recorder.load(path.into(), device)?;
        self.try_load_record(record)
    }
}
