//! The semantics every implementation of the fused op follows (the reference in Burn
//! tensor ops, the native CPU kernel, the CubeCL kernels, cuDNN), written down once.
//! Nothing here is code: each front-end's implementations cite these notes.
//!
//! # Note [Variable lengths]
//!
//! Sequence `b` is valid for steps `t < len[b]`. At an invalid step the state is held and
//! the output is zero, so: the forward direction's final state is the state after step
//! `len[b] - 1`; the reverse direction scans `t = T-1 .. 0` and holds its initial state until
//! `t = len[b] - 1`, so it starts at each sequence's own last step; a length of 0 gives zero
//! outputs and final states equal to the initial states.
//!
//! # Note [Padding never leaks]
//!
//! Whatever the padded slots of the input (or of the output gradient) hold, NaN and
//! infinities included, changes no output and no gradient. Every implementation uses
//! *select* semantics at invalid steps (keep the old state, write a zero), never a
//! multiplication by a 0/1 mask, since `NaN · 0 = NaN` (the reference: `mask_where` /
//! `mask_fill`), and the padded rows of `x` are zeroed before the weight gradient
//! `dW_ih = dG^T x` reads them. cuDNN with padded IO behaves the same (checked on an H100).
//!
//! # Note [Half precision]
//!
//! F16 and BF16 inputs run in F32: the entry points cast `x`, the states, the weights and
//! the output gradients up once, compute everything (GEMM accumulation, the recurrence,
//! the reserve) in F32, and cast the results back to the input's dtype once. A recurrence
//! run in half precision would round the state at every step, and the exp-based
//! activations (Note [Activations through exp] in the reference's `cell`) overflow F16 at
//! `|x| > 11`. The only half-precision rounding left is that of the inputs and outputs
//! themselves.
