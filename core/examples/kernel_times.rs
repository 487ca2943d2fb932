//! Times the native kernel alone on slices (no Burn), for A/B comparisons on a noisy
//! machine: run it alternately under two settings (or two builds) and compare medians.
//! docs/BENCHMARKS.md ("Where the choices come from") was measured this way; the criterion
//! benchmarks (`benches/kernel.rs` here, `benches/cpu.rs` in the front-ends) are the
//! reference tables.
//!
//! ```sh
//! # 10 timed runs (after 2 warm-up runs) of each configuration, median in ms:
//! RAYON_NUM_THREADS=2 taskset -c 0,1 cargo run --release -p burn-fused-rnn-core \
//!     --example kernel_times -- 10 lstm,256,32,50,fwd gru,256,32,50,train lstm,256,32,100,fwd,2,bi
//! # the same with a blocking choice forced (Note [Input projection], Note [Reduction chunks]):
//! BURN_FUSED_RNN_PROJECTION=ahead BURN_FUSED_RNN_K_CHUNK=0 cargo run --release ...
//! ```
//!
//! A configuration is `mode,H,B,T,pass[,layers[,bi]]`: mode `lstm`, `gru`, `tanh` or
//! `relu`; I = H unless `IN=<n>` sets it for every configuration; pass `fwd` (inference),
//! `fwdtrain` (a training forward, which keeps the reserve) or `train` (forward +
//! backward). `BF=0` makes the input time-major (default batch-first). `FAULTS=1` adds the
//! process's minor page faults per timed run (Linux, `/proc/self/stat`), to tell work
//! from first touches of freshly mapped memory.
//!
//! `VARIANTS=fused,ahead,fused+k0` runs each configuration under each variant in turn, one
//! run of each per round, `<runs>` rounds, and prints each variant's median and the median
//! over rounds of its time over the first variant's: on a host whose speed drifts from one
//! minute to the next, runs milliseconds apart compare better than processes a minute
//! apart. A variant is settings joined by `+`: `auto` (nothing forced: the kernel's own
//! choices), `fused` or `ahead` (the input projection, Note [Input projection]), `k<N>`
//! (reduction chunks of N steps, `k0` one chunk: Note [Reduction chunks]), `b<N>` (blocks
//! of N steps where the input is projected ahead), `pf1` or `pf0` (the next chunk of the
//! step products' weights asked for ahead or not: Note [Next chunk ahead]), `avx512`,
//! `avx2` or `portable` (the SIMD level), `nodx` or `nodw` (a `train` pass without `x`'s
//! gradient, as for a layer that reads data, or without the weights', as for a frozen
//! layer: Note [Gradients not wanted]), `split1` or `split0` (a one-row inference step's
//! panels split with a thread of the pool or not: Note [A step over two threads]).
//!
//! `CACHED=1` gives the `fwd` passes the weights' owner, so that they pack the weights once
//! and take them from the cache after (Note [Packed weights across calls]), as a decoding
//! loop through the front-ends does. Times under 1 ms print in µs.

use std::cell::Cell;
use std::time::Instant;

use burn_fused_rnn_core::cpu::projection::{
    with_input_projection, with_k_chunk, with_next_chunk_ahead, with_projection_block,
    InputProjection,
};
use burn_fused_rnn_core::cpu::simd::{with_simd_level, SimdLevel};
use burn_fused_rnn_core::cpu::split::with_step_split;
use burn_fused_rnn_core::cpu::{self, HostInputs, OutputGrads};
use burn_fused_rnn_core::random::SplitMix64;
use burn_fused_rnn_core::{DropoutSpec, GradsWanted, RnnDescriptor, RnnMode, RnnSpec};

fn values(n: usize, seed: u64, scale: f64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.next_symmetric(scale) as f32).collect()
}

/// `IN`, else `h`.
fn input_size(h: usize) -> usize {
    std::env::var("IN").map_or(h, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("IN: expected an input size, got {v}"))
    })
}

fn parse(spec: &str) -> (RnnDescriptor, String) {
    let f: Vec<&str> = spec.split(',').collect();
    assert!(
        f.len() >= 5,
        "expected mode,H,B,T,pass[,layers[,bi]], got {spec}"
    );
    let mode = match f[0] {
        "lstm" => RnnMode::Lstm,
        "gru" => RnnMode::Gru,
        "tanh" => RnnMode::RnnTanh,
        "relu" => RnnMode::RnnRelu,
        other => panic!("expected a mode lstm, gru, tanh or relu, got {other}"),
    };
    let number = |i: usize| -> usize {
        f[i].parse()
            .unwrap_or_else(|_| panic!("expected a number in {spec}, got {}", f[i]))
    };
    let (h, batch, seq) = (number(1), number(2), number(3));
    let layers = if f.len() > 5 { number(5) } else { 1 };
    let spec_ = RnnSpec {
        num_layers: layers,
        bidirectional: f.get(6) == Some(&"bi"),
        ..RnnSpec::new(mode, input_size(h), h)
    };
    let batch_first = std::env::var("BF").map_or(true, |v| v != "0");
    let desc = RnnDescriptor::new(spec_, seq, batch, batch_first, None, DropoutSpec::NONE);
    (desc, f[4].to_string())
}

/// The process's minor page faults so far (field 10 of `/proc/self/stat`), or 0 where
/// that file is missing.
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) is parenthesised and may hold spaces: count after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after
        .split_whitespace()
        .nth(7)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// Settings forced for some runs (`VARIANTS`).
struct Variant {
    name: String,
    projection: Option<InputProjection>,
    k_chunk: Option<usize>,
    /// Steps projected at once (`b<N>`, Note [Input projection]).
    block: Option<usize>,
    level: Option<SimdLevel>,
    /// The gradients a `train` pass asks for (`nodx`, `nodw`).
    wanted: GradsWanted,
    /// The next chunk asked for ahead or not (`pf1`, `pf0`: Note [Next chunk ahead]).
    ahead: Option<bool>,
    /// One-row steps split over two threads or not (`split1`, `split0`).
    split: Option<bool>,
}

impl Variant {
    fn parse(name: &str) -> Variant {
        let mut variant = Variant {
            name: name.trim().to_string(),
            projection: None,
            k_chunk: None,
            block: None,
            level: None,
            wanted: GradsWanted::ALL,
            ahead: None,
            split: None,
        };
        for setting in variant.name.clone().split('+') {
            if setting == "auto" {
                continue;
            } else if let Some(p) = InputProjection::ALL
                .into_iter()
                .find(|p| p.name() == setting)
            {
                variant.projection = Some(p);
            } else if let Some(l) = SimdLevel::ALL.into_iter().find(|l| l.name() == setting) {
                variant.level = Some(l);
            } else if let Some(on) = setting.strip_prefix("pf").and_then(|v| match v {
                "0" => Some(false),
                "1" => Some(true),
                _ => None,
            }) {
                variant.ahead = Some(on);
            } else if let Some(on) = setting.strip_prefix("split").and_then(|v| match v {
                "0" => Some(false),
                "1" => Some(true),
                _ => None,
            }) {
                variant.split = Some(on);
            } else if setting == "nodx" {
                variant.wanted.x = false;
            } else if setting == "nodw" {
                variant.wanted.weights = false;
            } else if let Some(k) = setting.strip_prefix('k').and_then(|k| k.parse().ok()) {
                variant.k_chunk = Some(if k == 0 { usize::MAX } else { k });
            } else if let Some(b) = setting.strip_prefix('b').and_then(|b| b.parse().ok()) {
                variant.block = Some(b);
            } else {
                panic!(
                    "VARIANTS: expected auto, fused, ahead, k<N>, b<N>, pf0, pf1, split0, split1, avx512, avx2, portable, nodx or nodw, got {setting}"
                );
            }
        }
        variant
    }

    /// `f` under this variant's settings.
    fn run(&self, f: &dyn Fn() -> f64) -> f64 {
        let f = || match self.k_chunk {
            Some(k) => with_k_chunk(k, f),
            None => f(),
        };
        let f = || match self.ahead {
            Some(on) => with_next_chunk_ahead(on, f),
            None => f(),
        };
        let f = || match self.split {
            Some(on) => with_step_split(on, f),
            None => f(),
        };
        let f = || match self.block {
            Some(b) => with_projection_block(b, f),
            None => f(),
        };
        let f = || match self.projection {
            Some(p) => with_input_projection(p, f),
            None => f(),
        };
        match self.level {
            Some(l) => with_simd_level(l, f),
            None => f(),
        }
    }
}

/// `ms` in ms with three decimals, or under 1 ms in µs with one.
fn time(ms: f64) -> String {
    match ms < 1.0 {
        true => format!("{:.1} µs", ms * 1e3),
        false => format!("{ms:.3}"),
    }
}

/// The median of `times` (sorted in place).
fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let faults = std::env::var("FAULTS").is_ok_and(|v| v == "1");
    let owner = std::env::var("CACHED")
        .is_ok_and(|v| v == "1")
        .then_some(&());
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: kernel_times <runs> <mode,H,B,T,pass[,layers[,bi]]>...";
    let runs: usize = args.first().and_then(|r| r.parse().ok()).expect(usage);
    assert!(args.len() > 1, "{usage}");
    let variants: Option<Vec<Variant>> = std::env::var("VARIANTS")
        .ok()
        .map(|v| v.split(',').map(Variant::parse).collect());
    for spec in &args[1..] {
        let (desc, pass) = parse(spec);
        let h = desc.spec.d_hidden;
        let x = values(desc.input_shape().iter().product(), 1, 1.0);
        let w = values(desc.params_size(), 2, 1.0 / (h as f64).sqrt());
        let dy = values(desc.output_shape().iter().product(), 3, 1.0);
        let inputs = HostInputs {
            x: &x,
            h0: None,
            c0: None,
            w: &w,
        };
        let wanted = Cell::new(GradsWanted::ALL);
        let run_once = || {
            let start = Instant::now();
            match pass.as_str() {
                "fwd" => {
                    std::hint::black_box(cpu::forward(&desc, &inputs, owner, false, false));
                }
                "fwdtrain" => {
                    std::hint::black_box(cpu::forward(&desc, &inputs, None::<&()>, true, false));
                }
                "train" => {
                    let wanted = wanted.get();
                    let (out, reserve) = cpu::forward(&desc, &inputs, None::<&()>, true, false);
                    let reserve = reserve.expect("a training forward keeps a reserve");
                    let grads = OutputGrads {
                        dy: Some(&dy),
                        dh_n: None,
                        dc_n: None,
                    };
                    std::hint::black_box(cpu::backward(
                        &desc, &inputs, &out.y, reserve, false, &grads, wanted,
                    ));
                }
                other => panic!("expected a pass fwd, fwdtrain or train, got {other}"),
            }
            start.elapsed().as_secs_f64() * 1e3
        };
        if let Some(variants) = &variants {
            // times[v][round]
            let mut times = vec![Vec::with_capacity(runs); variants.len()];
            for round in 0..runs + 2 {
                for (v, variant) in variants.iter().enumerate() {
                    wanted.set(variant.wanted);
                    let t = variant.run(&run_once);
                    if round >= 2 {
                        times[v].push(t);
                    }
                }
            }
            // Each round's ratios, before `median` sorts the times out of their rounds.
            let mut ratios: Vec<Vec<f64>> = times
                .iter()
                .map(|t| (0..runs).map(|r| t[r] / times[0][r]).collect())
                .collect();
            let mut line = spec.to_string();
            for (v, variant) in variants.iter().enumerate() {
                line += &format!(
                    " {} {} ({:.3})",
                    variant.name,
                    time(median(&mut times[v])),
                    median(&mut ratios[v])
                );
            }
            println!("{line}");
            continue;
        }
        let mut times = Vec::with_capacity(runs);
        let mut faults_before = 0;
        for run in 0..runs + 2 {
            if run == 2 {
                faults_before = minor_faults();
            }
            let t = run_once();
            if run >= 2 {
                times.push(t);
            }
        }
        let faulted = minor_faults().saturating_sub(faults_before);
        match faults {
            true => println!(
                "{spec} {} ({} faults per run)",
                time(median(&mut times)),
                faulted / runs.max(1) as u64
            ),
            false => println!("{spec} {}", time(median(&mut times))),
        }
    }
}
