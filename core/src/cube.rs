//! The host side of the front-ends' CubeCL kernels, without a device: the plan of a call
//! (sizes, weight offsets, row order, sequence lengths), the kernels' tiles, which calls
//! fit their 32-bit indices, the reserve's shapes and the dropout masks in the kernels' row
//! order.
//!
//! The kernels themselves, their launches and the device buffers live in each front-end's
//! `cube` module (they name CubeCL, whose versions follow Burn's); the notes cited here
//! (Note [Step kernel], [Cube reserve], [Cube rows], [Cube fallback]) are that module's.

use crate::descriptor::{RnnDescriptor, Sizes};
use crate::dropout::LayerMask;
use crate::layout::{ParamKind, RnnLayout};
use crate::spec::{RnnMode, RnnSpec};

/// The kernels' compile-time mode constant of `mode`: LSTM 0, GRU 1, RNN tanh 2, RNN relu 3
/// (each front-end's kernel file defines the same constants, and its tests check them
/// against these).
pub fn mode_id(mode: RnnMode) -> u32 {
    match mode {
        RnnMode::Lstm => 0,
        RnnMode::Gru => 1,
        RnnMode::RnnTanh => 2,
        RnnMode::RnnRelu => 3,
    }
}

/// Width `W` of a reserve gate row, in units of `H` (Note [Cube reserve]): LSTM 5 (the
/// four activated gates and `c`), GRU 4 (three gates and `R_n h + b_Rn`), RNN 1.
pub fn gate_row_blocks(mode: RnnMode) -> usize {
    match mode {
        RnnMode::Lstm => 5,
        RnnMode::Gru => 4,
        RnnMode::RnnTanh | RnnMode::RnnRelu => 1,
    }
}

/// The tile of one unit of a step kernel, and the units of a cube (Note [Step kernel]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiles {
    /// Columns (hidden or state units) per unit.
    pub units: usize,
    /// Sequences per unit.
    pub rows: usize,
    /// Units per cube, along `x`.
    pub cube: u32,
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
    pub fn choose(gates: usize, plane_size: u32, batch: usize, columns: usize) -> Self {
        Self::from_env().unwrap_or_else(|| Self::for_device(gates, plane_size, batch, columns))
    }

    /// [`Tiles::choose`] without the override.
    pub fn for_device(gates: usize, plane_size: u32, batch: usize, columns: usize) -> Self {
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
            cube: u32::try_from(cube).ok()?,
        })
    }
}

/// Sizes of one call, as the kernels' launches read them.
#[derive(Debug)]
pub struct Plan<'d> {
    /// The call.
    pub desc: &'d RnnDescriptor,
    /// Its network.
    pub spec: RnnSpec,
    /// Its canonical weights' layout.
    pub layout: RnnLayout,
    /// `T`, `B`, `H`, `P`, `D`, `G` (the plan derefs to them).
    pub sizes: Sizes,
    /// The mode as the kernels' compile-time parameter ([`mode_id`]).
    pub mode: u32,
    /// Valid length of each sequence.
    pub lengths: Vec<u32>,
    /// Whether some sequence is shorter than `T`.
    pub padded: bool,
}

impl core::ops::Deref for Plan<'_> {
    type Target = Sizes;

    fn deref(&self) -> &Sizes {
        &self.sizes
    }
}

impl<'d> Plan<'d> {
    /// The plan of `desc`; call it only for a descriptor that [`fits`].
    pub fn new(desc: &'d RnnDescriptor) -> Self {
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

    /// Width `W` of a reserve gate row (Note [Cube reserve]).
    pub fn gate_width(&self) -> usize {
        gate_row_blocks(self.spec.mode) * self.h
    }

    /// Offset of a canonical tensor in the flat weights, if the layout has it.
    pub fn offset(&self, layer: usize, d: usize, kind: ParamKind) -> Option<u32> {
        self.layout.entry(layer, d, kind).map(|e| e.offset as u32)
    }

    /// The offsets of `kind` for both directions (the second repeats the first when there
    /// is one direction).
    pub fn offsets(&self, layer: usize, kind: ParamKind) -> Option<(u32, u32)> {
        let first = self.offset(layer, 0, kind)?;
        let second = if self.nd == 2 {
            self.offset(layer, 1, kind)?
        } else {
            first
        };
        Some((first, second))
    }

    /// `(t, b)` of a row (Note [Cube rows]).
    pub fn row_step(&self, row: usize) -> (usize, usize) {
        if self.desc.batch_first {
            (row % self.t, row / self.t)
        } else {
            (row / self.b, row % self.b)
        }
    }

    /// The sequence lengths as the kernels read them: `B` native-endian `u32`s.
    pub fn lengths_bytes(&self) -> Vec<u8> {
        self.lengths.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    /// The scaled keep mask of `layer`'s input (Note [Dropout masks] in
    /// [`crate::dropout`]), `[T·B, D·P]` native-endian `f32`s in the call's row order.
    pub fn dropout_mask_bytes(&self, layer: usize) -> Vec<u8> {
        let mask = LayerMask::new(self.desc, layer);
        let f = self.nd * self.p;
        let mut bytes = Vec::with_capacity(self.rows() * f * 4);
        for row in 0..self.rows() {
            let (t, b) = self.row_step(row);
            let base = (t * self.b + b) * f;
            for k in 0..f {
                bytes.extend_from_slice(&(mask.factor(base + k) as f32).to_ne_bytes());
            }
        }
        bytes
    }
}

/// Whether every index the kernels compute fits in their 32-bit arguments with room to
/// spare (Note [Cube fallback]).
pub fn fits(desc: &RnnDescriptor) -> bool {
    let spec = &desc.spec;
    let rows = desc.seq_length as u128 * desc.batch_size as u128;
    let widest = [
        spec.d_input,
        spec.output_size() * 2,
        spec.mode.num_gates() * spec.d_hidden * spec.num_directions(),
        gate_row_blocks(spec.mode) * spec.d_hidden,
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

/// The reserve's shapes (Note [Cube reserve]), all `F32`: per layer, the layer's input
/// (from the second layer on), the gate rows and the outputs of both directions.
pub fn reserve_shapes(desc: &RnnDescriptor) -> Vec<[usize; 2]> {
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
    use crate::descriptor::DropoutSpec;

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
        let spec = RnnSpec {
            num_layers: 2,
            bidirectional: true,
            proj_size: Some(2),
            ..RnnSpec::new(RnnMode::Lstm, 3, 5)
        };
        let desc = RnnDescriptor::new(spec, 7, 3, true, None, DropoutSpec::NONE);
        // T·B = 21 rows, D = 2, W = 5H = 25, P = 2.
        assert_eq!(
            reserve_shapes(&desc),
            vec![[42, 25], [42, 2], [21, 4], [42, 25], [42, 2]]
        );
        let gru = RnnSpec::new(RnnMode::Gru, 3, 5);
        let desc = RnnDescriptor::new(gru, 4, 2, false, None, DropoutSpec::NONE);
        assert_eq!(reserve_shapes(&desc), vec![[8, 20], [8, 5]]);
    }

    /// Sizes past 32-bit indexing go to the reference (Note [Cube fallback]).
    #[test]
    fn sizes_past_32_bit_indices_do_not_fit() {
        let spec = RnnSpec::new(RnnMode::Lstm, 1024, 1024);
        let small = RnnDescriptor::new(spec, 100, 128, true, None, DropoutSpec::NONE);
        assert!(fits(&small));
        let huge = RnnDescriptor::new(spec, 100_000, 1024, true, None, DropoutSpec::NONE);
        assert!(!fits(&huge));
    }

    /// Rows run over `(t, b)` in the call's layout, and the masks and lengths follow them.
    #[test]
    fn rows_lengths_and_masks_follow_the_layout() {
        let spec = RnnSpec {
            num_layers: 2,
            ..RnnSpec::new(RnnMode::Gru, 2, 3)
        };
        let lengths = [3usize, 1];
        let dropout = DropoutSpec {
            probability: 0.5,
            seed: 7,
        };
        let seq_major = RnnDescriptor::new(spec, 3, 2, false, Some(lengths.to_vec()), dropout);
        let batch_first = RnnDescriptor::new(spec, 3, 2, true, Some(lengths.to_vec()), dropout);
        let (a, b) = (Plan::new(&seq_major), Plan::new(&batch_first));
        assert!(a.padded);
        assert_eq!(
            a.lengths_bytes(),
            [3u32.to_ne_bytes(), 1u32.to_ne_bytes()].concat()
        );
        assert_eq!(a.row_step(1), (0, 1));
        assert_eq!(b.row_step(1), (1, 0));
        // The same (t, b) gets the same factors in both layouts.
        let (ma, mb) = (a.dropout_mask_bytes(1), b.dropout_mask_bytes(1));
        let f = 3 * 4;
        for row in 0..6 {
            let (t, s) = a.row_step(row);
            let other = (0..6).find(|&r| b.row_step(r) == (t, s)).unwrap();
            assert_eq!(ma[row * f..(row + 1) * f], mb[other * f..(other + 1) * f]);
        }
        let factors: Vec<f32> = ma
            .chunks(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert!(factors.iter().all(|&v| v == 0.0 || v == 2.0), "{factors:?}");
        assert!(factors.contains(&0.0) && factors.contains(&2.0));
    }
}
