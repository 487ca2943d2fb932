//! Times the kernel's parts alone (Note [Parts alone] in the core's `cpu::parts`): one
//! step's product over packed weights, the LSTM cell update, and the input projection's
//! GEMM, on made-up values at the SIMD level a call would run at (`BURN_FUSED_RNN_SIMD`
//! forces one). Each round runs every part in turn, so the parts see the same minute of a
//! noisy host; each part's median over the rounds is printed with its rate.
//!
//! ```sh
//! # 20 rounds; per thread at LSTM H256 B32 on two threads: 16 rows, W_hh 256 -> 1024;
//! # the cells of those rows; its projection, 800 rows in blocks of 512:
//! taskset -c 0 cargo run --release -p burn-fused-rnn-core --example kernel_parts -- 20 \
//!     product,16,256,256 cells,16,256 projection,800,256,1024,512
//! ```
//!
//! A part is one of:
//! - `product,ROWS,HIDDEN,K[,kN][,pf0|pf1]`: `[ROWS, K] · W^T`, `W` an LSTM's
//!   `[4·HIDDEN, K]` packed as the kernel packs `W_hh`; `kN` forces reduction chunks of N
//!   steps (`k0`: one chunk; Note [Reduction chunks]), else this CPU's; `pf1` (`pf0`) forces
//!   the next chunk asked for ahead (not), else as this CPU's L2 says (Note [Next chunk
//!   ahead]);
//! - `cells,ROWS,HIDDEN`: the LSTM cell update (inference) of `ROWS × HIDDEN` units;
//! - `projection,ROWS,K,N,BLOCK`: `[ROWS, K] · W^T` (`W` `[N, K]`) plus biases, `BLOCK`
//!   rows at a time, as the kernel projects a block of steps (`W` packed once per run, then
//!   the packed kernel);
//! - `gemm,ROWS,K,N,BLOCK,THREADS`: the same through the `gemm` crate, biases first and the
//!   product added, one GEMM per `BLOCK` rows on `THREADS` threads of rayon's pool (the
//!   kernel's projection until 2026-12-06);
//! - `wgrad,ROWS,HIDDEN,K,THREADS[,fresh]`: an LSTM layer's weight gradients over `ROWS`
//!   rows (`dW_ih`, `4·HIDDEN × K`, and `dW_hh`) on `THREADS` threads, as the backward
//!   splits them (Note [Weight gradients by rows]); `fresh` writes them into a new buffer
//!   each run, as a call does.
//!
//! Two processes at once, one per core, show what the cores do to each other.

use std::time::Instant;

use burn_fused_rnn_core::cpu::parts::{LstmCells, Projection, StepProduct, WeightGrads};
use burn_fused_rnn_core::cpu::projection::with_next_chunk_ahead;
use burn_fused_rnn_core::cpu::simd::SimdLevel;

/// A part, ready to run.
enum Part {
    Product(StepProduct),
    Cells(LstmCells),
    Projection {
        projection: Projection,
        block: usize,
        threads: usize,
        /// Through the packed kernel at this level, not the `gemm` crate.
        packed: Option<SimdLevel>,
    },
    WeightGrads {
        grads: WeightGrads,
        threads: usize,
        fresh: bool,
    },
}

impl Part {
    fn parse(spec: &str, level: SimdLevel) -> Part {
        let f: Vec<&str> = spec.split(',').collect();
        let number = |i: usize| -> usize {
            let v = f
                .get(i)
                .unwrap_or_else(|| panic!("{spec}: expected more fields"));
            v.parse()
                .unwrap_or_else(|_| panic!("{spec}: expected a number, got {v}"))
        };
        match f[0] {
            "product" => {
                let (mut chunk, mut ahead) = (None, None);
                for &option in f.iter().skip(4) {
                    match option {
                        "pf0" => ahead = Some(false),
                        "pf1" => ahead = Some(true),
                        k => {
                            let n: usize = k
                                .strip_prefix('k')
                                .and_then(|n| n.parse().ok())
                                .unwrap_or_else(|| {
                                    panic!("{spec}: expected k<N>, pf0 or pf1, got {k}")
                                });
                            chunk = Some(if n == 0 { usize::MAX } else { n });
                        }
                    }
                }
                let make = || StepProduct::new(level, number(1), number(2), number(3), chunk);
                Part::Product(match ahead {
                    Some(on) => with_next_chunk_ahead(on, make),
                    None => make(),
                })
            }
            "cells" => Part::Cells(LstmCells::new(level, number(1), number(2))),
            "projection" => Part::Projection {
                projection: Projection::new(number(1), number(2), number(3)),
                block: number(4),
                threads: 1,
                packed: Some(level),
            },
            "gemm" => Part::Projection {
                projection: Projection::new(number(1), number(2), number(3)),
                block: number(4),
                threads: number(5),
                packed: None,
            },
            "wgrad" => Part::WeightGrads {
                grads: WeightGrads::new(number(1), number(2), number(3)),
                threads: number(4),
                fresh: match f.get(5) {
                    None => false,
                    Some(&"fresh") => true,
                    Some(other) => panic!("{spec}: expected fresh, got {other}"),
                },
            },
            other => {
                panic!("expected a part product, cells, projection, gemm or wgrad, got {other}")
            }
        }
    }

    fn run(&mut self) {
        match self {
            Part::Product(p) => p.run(),
            Part::Cells(c) => c.run(),
            Part::Projection {
                projection,
                block,
                threads,
                packed: None,
            } => projection.run_gemm(*block, *threads),
            Part::Projection {
                projection,
                block,
                packed: Some(level),
                ..
            } => projection.run(*level, *block),
            Part::WeightGrads {
                grads,
                threads,
                fresh,
            } => grads.run(*threads, *fresh),
        }
    }

    /// The rate of one run taking `secs`.
    fn rate(&self, secs: f64) -> String {
        match self {
            Part::Product(p) => format!(
                "{:.0} GFLOP/s ({} KiB packed, chunks of {}{})",
                p.flops() / secs / 1e9,
                p.weight_bytes() / 1024,
                match p.k_chunk() {
                    usize::MAX => "all".to_string(),
                    k => k.to_string(),
                },
                if p.next_chunk_ahead() {
                    ", next asked for ahead"
                } else {
                    ""
                }
            ),
            Part::Cells(c) => format!("{:.2} ns per unit", secs * 1e9 / c.units() as f64),
            Part::Projection { projection, .. } => {
                format!("{:.0} GFLOP/s", projection.flops() / secs / 1e9)
            }
            Part::WeightGrads { grads, .. } => {
                format!("{:.0} GFLOP/s", grads.flops() / secs / 1e9)
            }
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args
        .next()
        .map(|r| {
            r.parse()
                .unwrap_or_else(|_| panic!("expected a number of rounds, got {r}"))
        })
        .unwrap_or(20);
    let specs: Vec<String> = args.collect();
    assert!(
        !specs.is_empty(),
        "expected at least one part after the rounds"
    );
    let level = SimdLevel::current();
    let mut parts: Vec<Part> = specs.iter().map(|s| Part::parse(s, level)).collect();
    // Runs per round: enough for about 5 ms of each part, from one warm-up run.
    let reps: Vec<usize> = parts
        .iter_mut()
        .map(|part| {
            part.run();
            let start = Instant::now();
            part.run();
            (5e-3 / start.elapsed().as_secs_f64().max(1e-7)).clamp(1.0, 10_000.0) as usize
        })
        .collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); parts.len()];
    for _ in 0..rounds {
        for ((part, &reps), times) in parts.iter_mut().zip(&reps).zip(&mut times) {
            let start = Instant::now();
            for _ in 0..reps {
                part.run();
            }
            times.push(start.elapsed().as_secs_f64() / reps as f64);
        }
    }
    println!("SIMD level {}, {rounds} rounds", level.name());
    for ((spec, part), times) in specs.iter().zip(&parts).zip(&mut times) {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!("{spec}: {:.1} us, {}", median * 1e6, part.rate(median));
    }
}
