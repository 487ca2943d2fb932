use burn::backend::Flex;
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::*;
fn main() {
    let d = Default::default();
    let x = Tensor::<Flex,3>::random([32,50,256], Distribution::Default, &d);
    let f = FusedRnnConfig::new(RnnMode::Lstm, 256, 256).init::<Flex>(&d);
    for _ in 0..30 { let _ = f.forward(x.clone(), None); }
}
