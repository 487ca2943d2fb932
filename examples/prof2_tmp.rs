use burn::backend::{NdArray, Flex};
use burn::tensor::{Distribution, Tensor, backend::Backend};
use std::time::Instant;
fn t<F: FnMut()>(name: &str, mut f: F) { f(); let s = Instant::now(); for _ in 0..5 { f(); } println!("  {name}: {:.3} ms", s.elapsed().as_secs_f64()*1e3/5.0); }
fn run<B: Backend>(name: &str) {
    let d = Default::default();
    println!("== {name}");
    let x = Tensor::<B,2>::random([1600,256], Distribution::Default, &d);
    let w4: Vec<_> = (0..4).map(|_| Tensor::<B,2>::random([256,256], Distribution::Default, &d)).collect();
    t("4 gemms [1600,256]x[256,256]", || { for w in &w4 { let _ = x.clone().matmul(w.clone()); } });
    let parts: Vec<_> = (0..4).map(|_| Tensor::<B,3>::random([50,32,256], Distribution::Default, &d)).collect();
    t("stack 4 along dim1", || { let _ = Tensor::stack::<4>(parts.clone(), 1); });
}
fn main() { let a: Vec<String> = std::env::args().collect(); if a[1]=="nd" {run::<NdArray>("ndarray")} else {run::<Flex>("flex")} }
