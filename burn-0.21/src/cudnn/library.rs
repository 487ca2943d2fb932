//! Whether cuDNN and a CUDA device are there: the library's detection (once per process)
//! and the device check the GPU tests skip on.

use std::sync::OnceLock;

use super::ffi;

/// Why the CUDA backend runs the reference path instead of cuDNN (Note [cuDNN fallback]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// No loadable `libcudnn.so.9` (or any `libcudnn` cudarc looks for).
    LibraryMissing,
    /// A cuDNN whose version is not 9.x (`cudnnGetVersion`, e.g. 8907).
    UnsupportedVersion(usize),
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fallback::LibraryMissing => write!(f, "libcudnn could not be loaded"),
            Fallback::UnsupportedVersion(v) => write!(
                f,
                "expected cuDNN 9 (version 90000..100000), got version {v}"
            ),
        }
    }
}

/// The detection logic, without touching the library: `present` says whether libcudnn
/// loads, `version` reads `cudnnGetVersion` (called only when present).
pub fn classify(present: bool, version: impl FnOnce() -> usize) -> Result<usize, Fallback> {
    if !present {
        return Err(Fallback::LibraryMissing);
    }
    match version() {
        v @ 90_000..=99_999 => Ok(v),
        v => Err(Fallback::UnsupportedVersion(v)),
    }
}

/// The loaded cuDNN's version, detected once per process. When it is missing or not 9.x,
/// logs one warning and returns why; the CUDA backend then runs the reference path.
pub fn cudnn_version() -> Result<usize, Fallback> {
    static DETECTED: OnceLock<Result<usize, Fallback>> = OnceLock::new();
    DETECTED
        .get_or_init(|| {
            let detected = classify(ffi::library_present(), ffi::version);
            if let Err(reason) = &detected {
                log::warn!(
                    "burn-fused-rnn: cuDNN is not used ({reason}); the CUDA backend runs the reference implementation"
                );
            }
            detected
        })
        .clone()
}

/// Whether a CUDA driver and at least one CUDA device are present (the GPU tests skip
/// without one). Never panics.
pub fn cuda_device_available() -> Result<usize, String> {
    if !ffi::driver_present() {
        return Err("no CUDA driver library (libcuda) could be loaded".into());
    }
    match cudarc::driver::CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(n as usize),
        Ok(_) => Err("the CUDA driver reports no device".into()),
        Err(e) => Err(format!("the CUDA driver reports no device ({e:?})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_accepts_only_a_loadable_cudnn_9() {
        assert_eq!(classify(true, || 90_100), Ok(90_100));
        assert_eq!(classify(true, || 91_400), Ok(91_400));
        assert_eq!(
            classify(true, || 8_907),
            Err(Fallback::UnsupportedVersion(8_907))
        );
        assert_eq!(
            classify(true, || 100_000),
            Err(Fallback::UnsupportedVersion(100_000))
        );
        let mut asked = false;
        assert_eq!(
            classify(false, || {
                asked = true;
                90_000
            }),
            Err(Fallback::LibraryMissing)
        );
        assert!(!asked, "the version of a missing library is never read");
        assert_eq!(
            Fallback::UnsupportedVersion(8_907).to_string(),
            "expected cuDNN 9 (version 90000..100000), got version 8907"
        );
    }
}
