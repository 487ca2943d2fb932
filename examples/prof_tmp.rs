use burn::backend::{NdArray, Flex};
use burn::nn::{LstmConfig, GruConfig};
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::*;
use std::time::Instant;
fn tm<F: FnMut()>(n: usize, mut f: F) -> f64 { f(); let s = Instant::now(); for _ in 0..n { f(); } s.elapsed().as_secs_f64()*1e3/n as f64 }
fn run<B: FusedRnnBackend>(name: &str) {
    let d = Default::default();
    let x = Tensor::<B,3>::random([32,50,256], Distribution::Default, &d);
    let f = FusedRnnConfig::new(RnnMode::Lstm, 256, 256).init::<B>(&d);
    let l = LstmConfig::new(256,256,true).init::<B>(&d);
    let fg = FusedRnnConfig::new(RnnMode::Gru, 256, 256).init::<B>(&d);
    let g = GruConfig::new(256,256,true).init::<B>(&d);
    let a = tm(10, || { let _ = f.forward(x.clone(), None); });
    let b = tm(10, || { let _ = l.forward(x.clone(), None); });
    let c = tm(10, || { let _ = fg.forward(x.clone(), None); });
    let e = tm(10, || { let _ = g.forward(x.clone(), None); });
    println!("{name}: lstm fused {a:.1} ms, burn-nn {b:.1} ms, ratio {:.2}; gru fused {c:.1}, burn-nn {e:.1}, ratio {:.2}", b/a, e/c);
}
fn main() { run::<NdArray>("ndarray"); run::<Flex>("flex"); }
