//! What the forward and the backward share: sizes, launch shapes, buffers, weight blocks,
//! sequence lengths and dropout masks on the device, and the reserve layout.

use burn::backend::ops::FloatTensorOps;
use burn::backend::{DType, FloatDType, Shape, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::{empty_device_contiguous_dtype, zeros_client};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;
use cubecl::prelude::*;

use super::kernel::{self, gate_row_blocks, num_gates};
use crate::descriptor::{RnnDescriptor, Sizes};
use crate::dropout::LayerMask;
use crate::layout::{ParamKind, RnnLayout};
use crate::spec::{RnnMode, RnnSpec};

/// The tile of one unit of a step kernel, and the units of a cube (Note [Step kernel] in
/// `super`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tiles {
    /// Columns (hidden or state units) per unit.
    pub(crate) units: usize,
    /// Sequences per unit.
    pub(crate) rows: usize,
    /// Units per cube, along `x`.
    pub(crate) cube: u32,
}

impl Tiles {
    /// The tiles of a kernel whose product has `gates` column blocks of `columns` columns,
    /// on a device whose planes have at most `plane_size` lanes, for `batch` sequences.
    ///
    /// A CPU driver (lavapipe: planes of at most 16 lanes) loads every value whose address
    /// differs between lanes one lane at a time, and a tile of `U` columns × `R` sequences
    /// does `G·U·R` products per `G·U + R` such loads: there, 4 × 8 tiles for gated
    /// products (LSTM, GRU) and 8 × 8 for one-gate products (measured on lavapipe, H256
    /// B32: about twice as fast as 1 × 4 tiles; 8 × 8 gated tiles gain another ~20% but
    /// take several times longer to compile). A GPU coalesces the weight loads of
    /// neighbouring units, and gains more from reading each weight for more sequences: 1 ×
    /// 8 tiles in cubes of 64 units (chosen, not measured: no GPU was at hand).
    /// `BURN_FUSED_RNN_CUBE_TILES=units,rows,cube` overrides the choice (for tuning on a
    /// new device).
    pub(crate) fn choose(gates: usize, plane_size: u32, batch: usize, columns: usize) -> Self {
        Self::from_env().unwrap_or_else(|| Self::for_device(gates, plane_size, batch, columns))
    }

    /// [`Tiles::choose`] without the override.
    fn for_device(gates: usize, plane_size: u32, batch: usize, columns: usize) -> Self {
        let chosen = if plane_size < 32 {
            let units = if gates > 1 { 4 } else { 8 };
            Tiles {
                units,
                rows: 8,
                cube: if units == 8 { 16 } else { 32 },
            }
        } else {
            Tiles {
                units: 1,
                rows: 8,
                cube: 64,
            }
        };
        // A tile past the problem only repeats work (rows and columns are clamped), and a
        // bigger tile is a bigger shader to compile: small problems get small tiles.
        let needed = columns.div_ceil(chosen.cube as usize).next_power_of_two();
        Tiles {
            units: chosen.units.min(needed),
            rows: chosen.rows.min(batch.next_power_of_two()),
            cube: chosen.cube,
        }
    }

    fn from_env() -> Option<Self> {
        let v = std::env::var("BURN_FUSED_RNN_CUBE_TILES").ok()?;
        let mut it = v.split(',').map(|s| s.trim().parse::<usize>().ok());
        let (units, rows, cube) = (it.next()??, it.next()??, it.next()??);
        (units > 0 && rows > 0 && cube > 0).then_some(Tiles {
            units,
            rows,
            cube: cube as u32,
        })
    }
}

/// Sizes of one call.
#[derive(Debug)]
pub(crate) struct Plan<'d> {
    pub(crate) desc: &'d RnnDescriptor,
    pub(crate) spec: RnnSpec,
    pub(crate) layout: RnnLayout,
    /// `T`, `B`, `H`, `P`, `D`, `G` (the plan derefs to them).
    pub(crate) sizes: Sizes,
    /// The mode as the kernels' compile-time parameter.
    pub(crate) mode: u32,
    /// Valid length of each sequence.
    pub(crate) lengths: Vec<u32>,
    /// Whether some sequence is shorter than `T`.
    pub(crate) padded: bool,
}

impl core::ops::Deref for Plan<'_> {
    type Target = Sizes;

    fn deref(&self) -> &Sizes {
        &self.sizes
    }
}

impl<'d> Plan<'d> {
    pub(crate) fn new(desc: &'d RnnDescriptor) -> Self {
        let spec = desc.spec;
        let lengths: Vec<u32> = (0..desc.batch_size)
            .map(|b| desc.seq_length_of(b) as u32)
            .collect();
        Self {
            desc,
            spec,
            layout: RnnLayout::new(spec),
            sizes: desc.sizes(),
            mode: mode_id(spec.mode),
            padded: lengths.iter().any(|&len| len as usize != desc.seq_length),
            lengths,
        }
    }

    /// Width `W` of a reserve gate row (Note [Cube reserve] in `super`).
    pub(crate) fn gate_width(&self) -> usize {
        gate_row_blocks(self.mode) * self.h
    }

    /// Offset of a canonical tensor in the flat weights, if the layout has it.
    pub(crate) fn offset(&self, layer: usize, d: usize, kind: ParamKind) -> Option<u32> {
        self.layout.entry(layer, d, kind).map(|e| e.offset as u32)
    }

    /// The offsets of `kind` for both directions (the second repeats the first when there
    /// is one direction).
    pub(crate) fn offsets(&self, layer: usize, kind: ParamKind) -> Option<(u32, u32)> {
        let first = self.offset(layer, 0, kind)?;
        let second = if self.nd == 2 {
            self.offset(layer, 1, kind)?
        } else {
            first
        };
        Some((first, second))
    }

    /// The tiles of a step kernel whose product has `gates` column blocks of `columns`.
    pub(crate) fn tiles(&self, like: &CubeTensor, gates: usize, columns: usize) -> Tiles {
        let plane = like.client.properties().hardware.plane_size_max;
        Tiles::choose(gates, plane, self.b, columns)
    }

    /// The launch of a step kernel with `tiles` over `units` columns of every sequence and
    /// direction.
    pub(crate) fn step_launch(&self, tiles: Tiles, units: usize) -> (CubeCount, CubeDim) {
        let x = units.div_ceil(tiles.cube as usize * tiles.units) as u32;
        let y = self.b.div_ceil(tiles.rows) as u32;
        (
            CubeCount::Static(x, y, self.nd as u32),
            CubeDim::new_1d(tiles.cube),
        )
    }

    /// The scan arguments of step `s` of `layer`.
    pub(crate) fn scan(&self, layer: usize, s: usize) -> kernel::ScanLaunch {
        kernel::ScanLaunch::new(
            self.t as u32,
            self.b as u32,
            self.h as u32,
            self.p as u32,
            self.nd as u32,
            u32::from(self.desc.batch_first),
            s as u32,
            (layer * self.nd) as u32,
        )
    }

    /// `(t, b)` of a row (Note [Cube rows] in `super`).
    pub(crate) fn row_step(&self, row: usize) -> (usize, usize) {
        if self.desc.batch_first {
            (row % self.t, row / self.t)
        } else {
            (row / self.b, row % self.b)
        }
    }
}

/// The kernels' mode constant.
pub(crate) fn mode_id(mode: RnnMode) -> u32 {
    match mode {
        RnnMode::Lstm => kernel::LSTM,
        RnnMode::Gru => kernel::GRU,
        RnnMode::RnnTanh => kernel::RNN_TANH,
        RnnMode::RnnRelu => kernel::RNN_RELU,
    }
}

/// Whether every index the kernels compute fits in their 32-bit arguments with room to
/// spare (Note [Cube fallback] in `super`).
pub(crate) fn fits(desc: &RnnDescriptor) -> bool {
    let spec = &desc.spec;
    let rows = desc.seq_length as u128 * desc.batch_size as u128;
    let widest = [
        spec.d_input,
        spec.output_size() * 2,
        num_gates(mode_id(spec.mode)) * spec.d_hidden * spec.num_directions(),
        gate_row_blocks(mode_id(spec.mode)) * spec.d_hidden,
    ]
    .into_iter()
    .max()
    .unwrap_or(0) as u128;
    let limit = 1u128 << 31;
    rows * widest * spec.num_directions() as u128 <= limit
        && crate::layout::params_size(spec) as u128 <= limit
        && (spec.num_pseudo_layers() as u128 * desc.batch_size as u128 * spec.d_hidden as u128)
            <= limit
}

/// `t` as a contiguous, packed `F32` tensor (cast when needed).
pub(crate) fn f32_contiguous(t: CubeTensor) -> CubeTensor {
    into_contiguous(cast(t, DType::F32))
}

/// `t` in `dtype` (a float dtype).
pub(crate) fn cast(t: CubeTensor, dtype: DType) -> CubeTensor {
    if t.dtype() == dtype {
        t
    } else {
        CubeBackend::float_cast(t, FloatDType::from(dtype))
    }
}

/// A fresh, packed `F32` buffer of `shape` (uninitialised: every kernel writes all of it).
pub(crate) fn empty(like: &CubeTensor, shape: &[usize]) -> CubeTensor {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::from(shape.to_vec()),
        DType::F32,
    )
}

/// A fresh, packed `F32` buffer of zeros.
pub(crate) fn zeros(like: &CubeTensor, shape: &[usize]) -> CubeTensor {
    into_contiguous(zeros_client(
        like.client.clone(),
        like.device.clone(),
        Shape::from(shape.to_vec()),
        DType::F32,
    ))
}

/// A fresh, packed `F32` copy of `t`, or zeros of `shape`: a buffer the kernels may write
/// in place (never the caller's).
pub(crate) fn owned_copy(t: Option<CubeTensor>, like: &CubeTensor, shape: &[usize]) -> CubeTensor {
    match t {
        Some(t) => {
            let t = f32_contiguous(t);
            let copy = empty(like, shape);
            let n = shape.iter().product::<usize>();
            copy_into(&t, &copy, n);
            copy
        }
        None => zeros(like, shape),
    }
}

/// `dst[..n] = src[..n]` (both packed `F32`).
fn copy_into(src: &CubeTensor, dst: &CubeTensor, n: usize) {
    let dim = CubeDim::new_1d(256);
    let count = cubecl::calculate_cube_count_elemwise(&src.client, n, dim);
    kernel::gather_blocks::launch::<f32>(
        &src.client,
        count,
        dim,
        src.clone().into_tensor_arg(),
        dst.clone().into_tensor_arg(),
        0,
        0,
        1,
        n as u32,
        false,
    );
}

/// A one-element buffer for a kernel argument a configuration does not use.
pub(crate) fn unused(like: &CubeTensor) -> CubeTensor {
    empty(like, &[1])
}

/// The sequence lengths on the device, `u32`.
pub(crate) fn lengths(plan: &Plan<'_>, like: &CubeTensor) -> CubeTensor {
    let bytes: Vec<u8> = plan.lengths.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let handle = like.client.create_from_slice(&bytes);
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::from(vec![plan.b]),
        handle,
        DType::U32,
    )
}

/// `D` blocks of `rows × cols` of the flat weights at the offsets of `kind` in `layer`,
/// as `[D, rows, cols]`, or transposed, `[D, cols, rows]`.
pub(crate) fn weight_blocks(
    plan: &Plan<'_>,
    weights: &CubeTensor,
    layer: usize,
    kind: ParamKind,
    rows: usize,
    cols: usize,
    transpose: bool,
) -> CubeTensor {
    let (off0, off1) = plan
        .offsets(layer, kind)
        .expect("the layout has this tensor");
    let shape = if transpose {
        [plan.nd, cols, rows]
    } else {
        [plan.nd, rows, cols]
    };
    let out = empty(weights, &shape);
    let n = plan.nd * rows * cols;
    let dim = CubeDim::new_1d(256);
    let count = cubecl::calculate_cube_count_elemwise(&weights.client, n, dim);
    kernel::gather_blocks::launch::<f32>(
        &weights.client,
        count,
        dim,
        weights.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        off0,
        off1,
        rows as u32,
        cols as u32,
        transpose,
    );
    out
}

/// `x` (rows of `features`) with the rows of padded steps zeroed, in a fresh buffer.
pub(crate) fn zero_padded_rows(
    plan: &Plan<'_>,
    x: &CubeTensor,
    lengths: &CubeTensor,
    features: usize,
) -> CubeTensor {
    let out = empty(x, &[plan.rows(), features]);
    let n = plan.rows() * features;
    let dim = CubeDim::new_1d(256);
    let count = cubecl::calculate_cube_count_elemwise(&x.client, n, dim);
    kernel::zero_padded_rows::launch::<f32>(
        &x.client,
        count,
        dim,
        x.clone().into_tensor_arg(),
        lengths.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        plan.t as u32,
        plan.b as u32,
        features as u32,
        u32::from(plan.desc.batch_first),
    );
    out
}

/// The scaled keep mask of `layer`'s input, `[T·B, D·P]` in the call's row order,
/// computed on the host (Note [Dropout masks] in `crate::dropout`) and uploaded.
pub(crate) fn dropout_mask(plan: &Plan<'_>, layer: usize, like: &CubeTensor) -> CubeTensor {
    let mask = LayerMask::new(plan.desc, layer);
    let f = plan.nd * plan.p;
    let mut bytes = Vec::with_capacity(plan.rows() * f * 4);
    for row in 0..plan.rows() {
        let (t, b) = plan.row_step(row);
        let base = (t * plan.b + b) * f;
        for k in 0..f {
            bytes.extend_from_slice(&(mask.factor(base + k) as f32).to_ne_bytes());
        }
    }
    let handle = like.client.create_from_slice(&bytes);
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::from(vec![plan.rows(), f]),
        handle,
        DType::F32,
    )
}

/// The reserve's shapes (Note [Cube reserve] in `super`), all `F32`.
pub(crate) fn reserve_shapes(desc: &RnnDescriptor) -> Vec<[usize; 2]> {
    let plan = Plan::new(desc);
    let rows = plan.rows();
    let mut shapes = Vec::new();
    for layer in 0..plan.spec.num_layers {
        if layer > 0 {
            shapes.push([rows, plan.nd * plan.p]);
        }
        shapes.push([plan.nd * rows, plan.gate_width()]);
        shapes.push([plan.nd * rows, plan.p]);
    }
    shapes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DropoutSpec, FusedRnnConfig, RnnMode};

    fn tiles(units: usize, rows: usize, cube: u32) -> Tiles {
        Tiles { units, rows, cube }
    }

    /// Wide tiles on a CPU driver, tall ones on GPUs, never wider than the problem.
    #[test]
    fn tiles_follow_the_device_and_the_problem() {
        // lavapipe (planes of 8 lanes), H256 B32: gated and one-gate products.
        assert_eq!(Tiles::for_device(4, 8, 32, 256), tiles(4, 8, 32));
        assert_eq!(Tiles::for_device(1, 8, 32, 256), tiles(8, 8, 16));
        // A GPU (planes of 32 lanes).
        assert_eq!(Tiles::for_device(4, 32, 128, 1024), tiles(1, 8, 64));
        // Small problems: no more rows than the batch needs, no more columns per unit.
        assert_eq!(Tiles::for_device(4, 8, 3, 4), tiles(1, 4, 32));
        assert_eq!(Tiles::for_device(1, 8, 1, 64), tiles(4, 1, 16));
        assert_eq!(Tiles::for_device(1, 32, 2, 4), tiles(1, 2, 64));
    }

    /// The reserve of Note [Cube reserve], from the descriptor alone.
    #[test]
    fn reserve_shapes_follow_the_note() {
        let spec = FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
            .with_num_layers(2)
            .with_bidirectional(true)
            .with_proj_size(Some(2))
            .spec();
        let desc = RnnDescriptor::new(spec, 7, 3, true, None, DropoutSpec::NONE);
        // T·B = 21 rows, D = 2, W = 5H = 25, P = 2.
        assert_eq!(
            reserve_shapes(&desc),
            vec![[42, 25], [42, 2], [21, 4], [42, 25], [42, 2]]
        );
        let gru = FusedRnnConfig::new(RnnMode::Gru, 3, 5).spec();
        let desc = RnnDescriptor::new(gru, 4, 2, false, None, DropoutSpec::NONE);
        assert_eq!(reserve_shapes(&desc), vec![[8, 20], [8, 5]]);
    }

    /// Sizes past 32-bit indexing go to the reference (Note [Cube fallback]).
    #[test]
    fn sizes_past_32_bit_indices_do_not_fit() {
        let spec = FusedRnnConfig::new(RnnMode::Lstm, 1024, 1024).spec();
        let small = RnnDescriptor::new(spec, 100, 128, true, None, DropoutSpec::NONE);
        assert!(fits(&small));
        let huge = RnnDescriptor::new(spec, 100_000, 1024, true, None, DropoutSpec::NONE);
        assert!(!fits(&huge));
    }
}
