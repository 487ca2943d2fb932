//! Times a training step (`forward`, `sum`, `backward`) of a `FusedRnn` under `Autodiff` on
//! NdArray and Flex two ways, alternated in one process: through the module (its flat
//! weights built by `FusedRnnBackend::fused_rnn_concat`, a chain of links under `Autodiff`:
//! Note [Flat weights from parts] in the crate's `backend` module), and through the op fed
//! by the public `FusedRnn::flat_weights` (Burn's reshape and `cat`, what every call did
//! before). Prints the median step through the module and the median over rounds of the
//! other's time over it. docs/BENCHMARKS.md ("the flat weights without Burn's
//! concatenation") was measured this way.
//!
//! ```sh
//! RAYON_NUM_THREADS=2 taskset -c 0,1 cargo run --release -p burn-fused-rnn \
//!     --example flat_weights_times -- 20 lstm,256,32,50 gru,256,32,50 lstm,256,32,100,2,bi
//! ```
//!
//! A configuration is `mode,H,B,T[,layers[,bi]]` (mode `lstm` or `gru`, I = H, batch
//! first); `BACKEND=ndarray` or `BACKEND=flex` runs one backend only.

use std::time::Instant;

use burn::backend::{Autodiff, Flex, NdArray};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{
    fused_rnn, DropoutSpec, FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnDescriptor, RnnMode,
};

struct Case<B: AutodiffBackend> {
    rnn: FusedRnn<B>,
    x: Tensor<B, 3>,
}

impl<B: AutodiffBackend + FusedRnnBackend> Case<B> {
    fn new(spec: &str) -> Self {
        let f: Vec<&str> = spec.split(',').collect();
        assert!(
            f.len() >= 4,
            "expected mode,H,B,T[,layers[,bi]], got {spec}"
        );
        let mode = match f[0] {
            "lstm" => RnnMode::Lstm,
            "gru" => RnnMode::Gru,
            other => panic!("expected a mode lstm or gru, got {other}"),
        };
        let number = |i: usize| -> usize {
            f[i].parse()
                .unwrap_or_else(|_| panic!("expected a number in {spec}, got {}", f[i]))
        };
        let (h, batch, seq) = (number(1), number(2), number(3));
        let layers = if f.len() > 4 { number(4) } else { 1 };
        let device = B::Device::default();
        let rnn = FusedRnnConfig::new(mode, h, h)
            .with_num_layers(layers)
            .with_bidirectional(f.get(5) == Some(&"bi"))
            .init(&device);
        let x = Tensor::random([batch, seq, h], Distribution::Default, &device).require_grad();
        Self { rnn, x }
    }

    /// A training step through the module, in ms.
    fn step(&self) -> f64 {
        let start = Instant::now();
        drop(self.rnn.forward(self.x.clone(), None).0.sum().backward());
        start.elapsed().as_secs_f64() * 1e3
    }

    /// The same step through the op fed by `flat_weights` (Burn's reshape and `cat`), in ms.
    fn step_through_cat(&self) -> f64 {
        let start = Instant::now();
        let [batch, seq, _] = self.x.dims();
        let desc = RnnDescriptor::new(
            *self.rnn.spec(),
            seq,
            batch,
            self.rnn.batch_first(),
            None,
            DropoutSpec::NONE,
        );
        let out = fused_rnn(&desc, self.x.clone(), None, None, self.rnn.flat_weights());
        drop(out.output.sum().backward());
        start.elapsed().as_secs_f64() * 1e3
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `rounds` rounds after two warm-up rounds, the two ways in turns (which goes first
/// alternates): the median step through the module and the median ratio.
fn compare<B: AutodiffBackend + FusedRnnBackend>(spec: &str, rounds: usize) -> (f64, f64) {
    let case = Case::<B>::new(spec);
    let (mut steps, mut ratios) = (Vec::new(), Vec::new());
    for round in 0..rounds + 2 {
        let (module, cat) = if round % 2 == 0 {
            let module = case.step();
            (module, case.step_through_cat())
        } else {
            let cat = case.step_through_cat();
            (case.step(), cat)
        };
        if round >= 2 {
            steps.push(module);
            ratios.push(cat / module);
        }
    }
    (median(steps), median(ratios))
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
    let backend = std::env::var("BACKEND").unwrap_or_default();
    for spec in args {
        if backend != "flex" {
            let (t, r) = compare::<Autodiff<NdArray>>(&spec, rounds);
            println!("{spec} ndarray: step {t:.3} ms, through Burn's cat {r:.3}x");
        }
        if backend != "ndarray" {
            let (t, r) = compare::<Autodiff<Flex>>(&spec, rounds);
            println!("{spec} flex: step {t:.3} ms, through Burn's cat {r:.3}x");
        }
    }
}
