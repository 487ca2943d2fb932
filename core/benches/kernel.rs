//! The native CPU kernel alone, on slices (no Burn tensors, no module): inference forward
//! (`fwd`) and training forward + backward (`train`), f32, 1 layer, I = H, at the SIMD level
//! the CPU has (or `BURN_FUSED_RNN_SIMD`). What a user calls goes through a Burn front-end:
//! its `benches/cpu.rs` is the benchmark beside PyTorch, ONNX Runtime and burn-nn; this one
//! separates the kernel's time from the front-end's.
//!
//! ```sh
//! RAYON_NUM_THREADS=2 taskset -c 0,1 cargo bench -p burn-fused-rnn-core --bench kernel
//! ```

use std::time::Duration;

use burn_fused_rnn_core::cpu::{self, HostInputs, OutputGrads};
use burn_fused_rnn_core::random::SplitMix64;
use burn_fused_rnn_core::{DropoutSpec, GradsWanted, RnnDescriptor, RnnMode, RnnSpec};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn values(n: usize, seed: u64, scale: f64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.next_symmetric(scale) as f32).collect()
}

fn benches(c: &mut Criterion) {
    for (mode, h, batch, seq) in [
        (RnnMode::Lstm, 256, 32, 50),
        (RnnMode::Gru, 256, 32, 50),
        (RnnMode::Lstm, 32, 1, 1000),
    ] {
        let desc = RnnDescriptor::new(
            RnnSpec::new(mode, h, h),
            seq,
            batch,
            true,
            None,
            DropoutSpec::NONE,
        );
        let x = values(desc.input_shape().iter().product(), 1, 1.0);
        let w = values(desc.params_size(), 2, 1.0 / (h as f64).sqrt());
        let dy = values(desc.output_shape().iter().product(), 3, 1.0);
        let inputs = HostInputs {
            x: &x,
            h0: None,
            c0: None,
            w: &w,
        };
        let name = format!("{}_H{h}_B{batch}_T{seq}", mode.name());
        let mut group = c.benchmark_group(format!("kernel/{name}"));
        group.sample_size(20);
        group.measurement_time(Duration::from_secs(3));
        group.bench_function(BenchmarkId::new("fused", "fwd"), |b| {
            b.iter(|| cpu::forward(&desc, &inputs, None::<&()>, false, false))
        });
        group.bench_function(BenchmarkId::new("fused", "train"), |b| {
            b.iter(|| {
                let (out, reserve) = cpu::forward(&desc, &inputs, None::<&()>, true, false);
                let reserve = reserve.expect("a training forward keeps a reserve");
                let grads = OutputGrads {
                    dy: Some(&dy),
                    dh_n: None,
                    dc_n: None,
                };
                cpu::backward(
                    &desc,
                    &inputs,
                    &out.y,
                    reserve,
                    false,
                    &grads,
                    GradsWanted::ALL,
                )
            })
        });
        group.finish();
    }
}

criterion_group!(kernel, benches);
criterion_main!(kernel);
