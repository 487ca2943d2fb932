//! Whether Burn's Wgpu backend can run here. Without a graphics adapter (on Linux: no
//! Vulkan driver, e.g. a fresh machine without `mesa-vulkan-drivers`), creating a Wgpu
//! device panics inside cubecl; the Wgpu tests skip instead, with a message, as the CUDA
//! tests do without a GPU. `.ci/run` installs lavapipe (Vulkan on the CPU) and sets
//! `BURN_FUSED_RNN_REQUIRE_WGPU=1`, under which a missing adapter fails the test rather
//! than skipping it, so that CI runs the Wgpu tests for real.
//!
//! Included with `#[path]` by the tests that use Wgpu.
#![allow(dead_code)]

use std::sync::OnceLock;

use burn::backend::wgpu::graphics::{AutoGraphicsApi, GraphicsApi};
use burn::backend::wgpu::WgpuRuntime;
use burn::cubecl::Runtime;

/// The reason Wgpu cannot run here, or `None` when it can. Asks wgpu for the adapters of
/// the graphics API that Burn's default Wgpu device uses (Vulkan on Linux): the same
/// enumeration cubecl does before it picks one, without creating a device, so it cannot
/// panic; an adapter that is listed is one cubecl can pick.
fn missing_adapter() -> Option<&'static str> {
    static REASON: OnceLock<Option<String>> = OnceLock::new();
    REASON
        .get_or_init(|| {
            let backend = AutoGraphicsApi::backend();
            if WgpuRuntime::enumerate_all_devices(&backend).is_empty() {
                Some(format!(
                    "no {backend:?} adapter (wgpu lists none; on Debian/Ubuntu, \
                     `apt-get install mesa-vulkan-drivers libvulkan1` gives lavapipe, \
                     Vulkan on the CPU)"
                ))
            } else {
                None
            }
        })
        .as_deref()
}

/// `true` when Burn's Wgpu backend can run here; otherwise prints `SKIPPED {test}: …` and
/// returns `false`, or panics when `BURN_FUSED_RNN_REQUIRE_WGPU=1`.
pub fn wgpu_available(test: &str) -> bool {
    let Some(reason) = missing_adapter() else {
        return true;
    };
    if std::env::var("BURN_FUSED_RNN_REQUIRE_WGPU").as_deref() == Ok("1") {
        panic!("{test}: BURN_FUSED_RNN_REQUIRE_WGPU=1, but {reason}");
    }
    eprintln!("SKIPPED {test}: {reason}");
    false
}
