//! The drop-in layers' forward on any `B: Backend`.
//!
//! # Note [Drop-in dispatch]
//!
//! A model written against burn-nn says `impl<B: Backend> Model<B>`, and calls its layers'
//! `forward` there; the fused op needs `B: FusedRnnBackend`, which a generic `B: Backend`
//! does not promise. For changing the `use` line to be the whole migration, the drop-ins'
//! `forward` takes any `B: Backend` and finds the fused op at run time: when `B` is one
//! of the backends this crate implements the op for, as Burn's own names spell them
//! (`NdArray`, `NdArray<f64>`, `Flex`, `Wgpu`, `Wgpu<f16>`, `Cuda`, `Cuda<f16>`,
//! `Cuda<bf16>`, with or without fusion, and `Autodiff` of each, with either checkpointing
//! strategy), the module is that backend's (a downcast through `Any`, whose `TypeId`s
//! compare equal exactly when the types are the same), and the call runs the fused op:
//! the native CPU kernel, cuDNN, one autodiff node. Any other backend runs the reference
//! implementation as Burn tensor ops ([`FusedRnn::forward_reference`]): the same numbers,
//! without the fused kernels or the single backward node. To get the fused op on such a
//! backend, implement `FusedRnnBackend` for it and call [`FusedRnn`] directly.

// Without a backend feature there is nothing to dispatch to: everything runs the
// reference, and what dispatches goes unused.
#![cfg_attr(
    not(any(
        feature = "ndarray",
        feature = "flex",
        feature = "wgpu",
        feature = "cuda"
    )),
    allow(dead_code, unused_variables, unused_macros)
)]

use core::any::Any;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::module::{FusedRnn, RnnState};

/// `value` as type `To`, which is its own type (`From` and `To` are the same type, known
/// only at run time).
fn same<From: 'static, To: 'static>(value: From) -> To {
    match (Box::new(value) as Box<dyn Any>).downcast::<To>() {
        Ok(value) => *value,
        Err(_) => unreachable!("the module's backend is the tensors' backend"),
    }
}

/// Runs `fused.forward(input, state)`: the fused op where `B` is known to implement it,
/// the reference as Burn ops elsewhere (Note [Drop-in dispatch]).
pub(crate) fn forward<B: Backend>(
    fused: &FusedRnn<B>,
    input: Tensor<B, 3>,
    state: Option<RnnState<B>>,
) -> (Tensor<B, 3>, RnnState<B>) {
    let any = fused as &dyn Any;
    // Tries each backend `$t`, with `Autodiff` over it (both checkpointing strategies).
    macro_rules! native {
        ($($t:ty),* $(,)?) => {$(
            native!(@one $t);
            #[cfg(feature = "autodiff")]
            native!(@one burn::backend::Autodiff<$t>);
            #[cfg(feature = "autodiff")]
            native!(@one burn::backend::Autodiff<$t, burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing>);
        )*};
        (@one $t:ty) => {
            if let Some(module) = any.downcast_ref::<FusedRnn<$t>>() {
                let (y, state) = module.forward(same(input), same(state));
                return (same(y), same(state));
            }
        };
    }
    #[cfg(feature = "ndarray")]
    native!(burn::backend::NdArray, burn::backend::NdArray<f64>);
    #[cfg(feature = "flex")]
    native!(burn::backend::Flex);
    #[cfg(feature = "wgpu")]
    native!(
        burn::backend::Wgpu,
        burn::backend::Wgpu<burn::tensor::f16>,
        burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>,
    );
    #[cfg(feature = "cuda")]
    native!(
        burn::backend::Cuda,
        burn::backend::Cuda<burn::tensor::f16>,
        burn::backend::Cuda<burn::tensor::bf16>,
        burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>,
    );
    #[cfg(test)]
    tests::REFERENCE_CALLS.with(|calls| calls.set(calls.get() + 1));
    fused.forward_reference(input, state)
}

#[cfg(test)]
mod tests {
    use core::cell::Cell;

    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::backend::Backend;
    use burn::tensor::Tensor;

    use super::forward;
    use crate::{FusedRnnConfig, RnnMode};

    thread_local! {
        /// Calls of this thread that ran the reference as Burn ops.
        pub(super) static REFERENCE_CALLS: Cell<usize> = const { Cell::new(0) };
    }

    /// Whether a forward on `B` ran the reference rather than the fused op.
    fn runs_reference<B: Backend>() -> bool {
        let device = Default::default();
        let rnn = FusedRnnConfig::new(RnnMode::Gru, 2, 3).init::<B>(&device);
        let before = REFERENCE_CALLS.with(Cell::get);
        let (y, _) = forward(&rnn, Tensor::zeros([1, 2, 2], &device), None);
        assert_eq!(y.dims(), [1, 2, 3]);
        REFERENCE_CALLS.with(Cell::get) > before
    }

    #[test]
    fn listed_backends_run_the_fused_op() {
        assert!(!runs_reference::<NdArray>());
        assert!(!runs_reference::<Autodiff<NdArray>>());
        assert!(!runs_reference::<burn::backend::Flex>());
        assert!(!runs_reference::<Autodiff<burn::backend::Flex>>());
    }

    #[test]
    fn other_backends_run_the_reference() {
        // NdArray with 32-bit integers implements the fused op, but is not in the list.
        assert!(runs_reference::<NdArray<f32, i32>>());
    }
}
