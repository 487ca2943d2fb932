// A model written against burn-nn's recurrent layers, the way a Burn user writes one:
// `#[derive(Module)]`, `B: Backend` bounds, burn-nn's configs, states and `forward`s.
// tests/nn_migration.rs includes this file twice, once after `use burn::nn::{..}` and once
// after `use burn_fused_rnn::nn::{..}`: nothing else differs.
//
// The model reads a batch of sequences through every recurrent type and classifies it.

/// The model's sizes.
#[derive(Config, Debug)]
pub struct ModelConfig {
    pub d_input: usize,
    pub d_hidden: usize,
    pub num_classes: usize,
}

#[derive(Module, Debug)]
pub struct Model<B: Backend> {
    pub lstm: Lstm<B>,
    pub bilstm: BiLstm<B>,
    pub gru: Gru<B>,
    pub bigru: BiGru<B>,
    pub rnn: Rnn<B>,
    pub birnn: BiRnn<B>,
    pub head: Linear<B>,
}

impl ModelConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> Model<B> {
        let (i, h) = (self.d_input, self.d_hidden);
        Model {
            lstm: LstmConfig::new(i, h, true).init(device),
            bilstm: BiLstmConfig::new(h, h, true).init(device),
            gru: GruConfig::new(2 * h, h, true).init(device),
            bigru: BiGruConfig::new(h, h, false).init(device),
            rnn: RnnConfig::new(2 * h, h, true)
                .with_batch_first(false)
                .init(device),
            birnn: BiRnnConfig::new(h, h, true)
                .with_hidden_activation(ActivationConfig::Relu)
                .init(device),
            head: LinearConfig::new(2 * h, self.num_classes).init(device),
        }
    }
}

impl<B: Backend> Model<B> {
    /// `x`: `[batch_size, seq_length, d_input]` -> logits `[batch_size, num_classes]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 2> {
        let [batch, _, _] = x.dims();
        let d_hidden = self.gru.d_hidden;
        let device = x.device();
        let zeros = Tensor::<B, 2>::zeros([batch, d_hidden], &device);
        let (y, lstm_state) = self
            .lstm
            .forward(x, Some(LstmState::new(zeros.clone(), zeros.clone())));
        let (y, bilstm_state) = self.bilstm.forward(y, None);
        let y = self.gru.forward(y, Some(lstm_state.hidden));
        let (y, bigru_state) = self.bigru.forward(y, None);
        // The RNN is sequence-first.
        let (y, rnn_state) = self
            .rnn
            .forward(y.swap_dims(0, 1), Some(RnnState::new(zeros)));
        let (y, _) = self.birnn.forward(y.swap_dims(0, 1), None);
        let [_, seq, features] = y.dims();
        let last = y.narrow(1, seq - 1, 1).reshape([batch, features]);
        let states = bilstm_state.cell.sum_dim(0).reshape([batch, d_hidden])
            + bigru_state.sum_dim(0).reshape([batch, d_hidden])
            + rnn_state.hidden;
        self.head.forward(last + Tensor::cat(vec![states; 2], 1))
    }

    fn d_hidden_of_gru(&self) -> usize {
        self.gru.d_hidden
    }
}

/// Trains `model` for `steps` Adam steps on the batch `(x, labels)`, returning the model
/// and the loss before each step.
pub fn train<B: AutodiffBackend>(
    mut model: Model<B>,
    x: Tensor<B, 3>,
    labels: Tensor<B, 1, Int>,
    steps: usize,
) -> (Model<B>, Vec<f64>) {
    let mut optim = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&x.device());
    let mut losses = Vec::new();
    for _ in 0..steps {
        let loss = loss_fn.forward(model.forward(x.clone()), labels.clone());
        losses.push(loss.clone().into_scalar().elem::<f64>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    let _ = model.d_hidden_of_gru();
    (model, losses)
}
