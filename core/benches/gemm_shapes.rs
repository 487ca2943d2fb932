//! Why the CPU kernel uses the `gemm` crate (Note [GEMM crate] in `src/cpu/gemm.rs`): `gemm`
//! 0.19 against `matrixmultiply` 0.3 (Burn's NdArray GEMM) at the shapes the fused op
//! runs, f32, single-threaded for both, and `gemm` again on rayon's pool (the kernel's
//! setting). `C[m, n] = A[m, k] · B[n, k]^T`, the form of `h · W_hh^T`.
//!
//! ```sh
//! RAYON_NUM_THREADS=2 cargo bench --bench gemm_shapes
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

/// (name, m, k, n)
const SHAPES: [(&str, usize, usize, usize); 5] = [
    ("step_H256_B32", 32, 256, 1024),
    ("step_H512_B64", 64, 512, 2048),
    ("step_H256_B1", 1, 256, 1024),
    ("projection_H256_B32_T50", 1600, 256, 1024),
    ("dW_H256_B32_T50", 1024, 1600, 256),
];

fn with_gemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    par: gemm::Parallelism,
) {
    assert!(a.len() == m * k && b.len() == n * k && c.len() == m * n);
    // SAFETY: the asserts above make every element that the strides reach lie inside `a`,
    // `b` and `c`; `c` is borrowed mutably, so it aliases neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    }
}

fn with_matrixmultiply(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() == m * k && b.len() == n * k && c.len() == m * n);
    // SAFETY: as in `with_gemm`: the strides stay inside the checked lengths, and `c`
    // aliases neither input.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            1,
            k as isize,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        )
    }
}

fn benches(cr: &mut Criterion) {
    let threads = rayon::current_num_threads();
    println!("rayon threads: {threads}");
    for (name, m, k, n) in SHAPES {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut c = vec![0.0f32; m * n];
        // Both crates give the same product.
        let mut check = vec![0.0f32; m * n];
        with_gemm(m, k, n, &a, &b, &mut c, gemm::Parallelism::None);
        with_matrixmultiply(m, k, n, &a, &b, &mut check);
        for (x, y) in c.iter().zip(&check) {
            assert!(
                (x - y).abs() <= 1e-3 * y.abs().max(1.0),
                "gemm {x} vs matrixmultiply {y}"
            );
        }
        let mut group = cr.benchmark_group(format!("gemm_shapes/{name}"));
        group.sample_size(20);
        group.bench_function(BenchmarkId::new("gemm", "1_thread"), |bch| {
            bch.iter(|| with_gemm(m, k, n, &a, &b, &mut c, gemm::Parallelism::None))
        });
        group.bench_function(BenchmarkId::new("matrixmultiply", "1_thread"), |bch| {
            bch.iter(|| with_matrixmultiply(m, k, n, &a, &b, &mut c))
        });
        if threads > 1 {
            group.bench_function(BenchmarkId::new("gemm", "rayon"), |bch| {
                bch.iter(|| with_gemm(m, k, n, &a, &b, &mut c, gemm::Parallelism::Rayon(threads)))
            });
        }
        group.finish();
    }
}

criterion_group!(gemm_shapes, benches);
criterion_main!(gemm_shapes);
