//! What the forward and the backward share: sizes, launch shapes, buffers, weight blocks,
//! sequence lengths and dropout masks on the device, and the reserve layout.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::{empty_device_contiguous_dtype, zeros_client};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;

use super::kernel;
use crate::layout::ParamKind;

/// A CubeCL backend: Burn's `CubeBackend` on any runtime (Wgpu, CUDA, ...).
pub(crate) trait CubeOps: Backend<FloatTensorPrimitive = CubeTensor<Self::Runtime>> {
    /// The CubeCL runtime.
    type Runtime: CubeRuntime;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> CubeOps
    for CubeBackend<R, F, I, BT>
{
    type Runtime = R;
}

/// The Burn-free part of the plan: the core crate's (sizes, offsets, rows, tiles, which
/// calls fit, the reserve's shapes).
pub(crate) use burn_fused_rnn_core::cube::{fits, reserve_shapes, Plan, Tiles};

/// What a launch reads from a [`Plan`] on a device.
pub(crate) trait Launch {
    /// The tiles of a step kernel whose product has `gates` column blocks of `columns`.
    fn tiles<R: CubeRuntime>(&self, like: &CubeTensor<R>, gates: usize, columns: usize) -> Tiles;
    /// The launch of a step kernel with `tiles` over `units` columns of every sequence and
    /// direction.
    fn step_launch(&self, tiles: Tiles, units: usize) -> (CubeCount, CubeDim);
    /// The scan arguments of step `s` of `layer`.
    fn scan<R: Runtime>(&self, layer: usize, s: usize) -> kernel::ScanLaunch<R>;
}

impl Launch for Plan<'_> {
    fn tiles<R: CubeRuntime>(&self, like: &CubeTensor<R>, gates: usize, columns: usize) -> Tiles {
        let plane = like.client.properties().hardware.plane_size_max;
        Tiles::choose(gates, plane, self.b, columns)
    }

    fn step_launch(&self, tiles: Tiles, units: usize) -> (CubeCount, CubeDim) {
        let x = units.div_ceil(tiles.cube as usize * tiles.units) as u32;
        let y = self.b.div_ceil(tiles.rows) as u32;
        (
            CubeCount::Static(x, y, self.nd as u32),
            CubeDim::new_1d(tiles.cube),
        )
    }

    fn scan<R: Runtime>(&self, layer: usize, s: usize) -> kernel::ScanLaunch<R> {
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
}

/// `t` as a contiguous, packed `F32` tensor (cast when needed).
pub(crate) fn f32_contiguous<B: CubeOps>(t: CubeTensor<B::Runtime>) -> CubeTensor<B::Runtime> {
    let t = crate::op_types::cast::<B>(t, DType::F32);
    into_contiguous(t)
}

/// A fresh, packed `F32` buffer of `shape` (uninitialised: every kernel writes all of it).
pub(crate) fn empty<R: CubeRuntime>(like: &CubeTensor<R>, shape: &[usize]) -> CubeTensor<R> {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::from(shape.to_vec()),
        DType::F32,
    )
}

/// A fresh, packed `F32` buffer of zeros.
pub(crate) fn zeros<R: CubeRuntime>(like: &CubeTensor<R>, shape: &[usize]) -> CubeTensor<R> {
    into_contiguous(zeros_client(
        like.client.clone(),
        like.device.clone(),
        Shape::from(shape.to_vec()),
        DType::F32,
    ))
}

/// A fresh, packed `F32` copy of `t`, or zeros of `shape`: a buffer the kernels may write
/// in place (never the caller's).
pub(crate) fn owned_copy<B: CubeOps>(
    t: Option<CubeTensor<B::Runtime>>,
    like: &CubeTensor<B::Runtime>,
    shape: &[usize],
) -> CubeTensor<B::Runtime> {
    match t {
        Some(t) => {
            let t = f32_contiguous::<B>(t);
            let copy = empty(like, shape);
            let n = shape.iter().product::<usize>();
            copy_into(&t, &copy, n);
            copy
        }
        None => zeros(like, shape),
    }
}

/// `dst[..n] = src[..n]` (both packed `F32`).
fn copy_into<R: CubeRuntime>(src: &CubeTensor<R>, dst: &CubeTensor<R>, n: usize) {
    let dim = CubeDim::new_1d(256);
    let count = cubecl::calculate_cube_count_elemwise(&src.client, n, dim);
    kernel::gather_blocks::launch::<f32, R>(
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
pub(crate) fn unused<R: CubeRuntime>(like: &CubeTensor<R>) -> CubeTensor<R> {
    empty(like, &[1])
}

/// The sequence lengths on the device, `u32`.
pub(crate) fn lengths<R: CubeRuntime>(plan: &Plan<'_>, like: &CubeTensor<R>) -> CubeTensor<R> {
    let handle = like.client.create_from_slice(&plan.lengths_bytes());
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
pub(crate) fn weight_blocks<R: CubeRuntime>(
    plan: &Plan<'_>,
    weights: &CubeTensor<R>,
    layer: usize,
    kind: ParamKind,
    rows: usize,
    cols: usize,
    transpose: bool,
) -> CubeTensor<R> {
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
    kernel::gather_blocks::launch::<f32, R>(
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
pub(crate) fn zero_padded_rows<R: CubeRuntime>(
    plan: &Plan<'_>,
    x: &CubeTensor<R>,
    lengths: &CubeTensor<R>,
    features: usize,
) -> CubeTensor<R> {
    let out = empty(x, &[plan.rows(), features]);
    let n = plan.rows() * features;
    let dim = CubeDim::new_1d(256);
    let count = cubecl::calculate_cube_count_elemwise(&x.client, n, dim);
    kernel::zero_padded_rows::launch::<f32, R>(
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
pub(crate) fn dropout_mask<R: CubeRuntime>(
    plan: &Plan<'_>,
    layer: usize,
    like: &CubeTensor<R>,
) -> CubeTensor<R> {
    let f = plan.nd * plan.p;
    let handle = like
        .client
        .create_from_slice(&plan.dropout_mask_bytes(layer));
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::from(vec![plan.rows(), f]),
        handle,
        DType::F32,
    )
}
