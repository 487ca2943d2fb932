//! Which call shape each request runs, and when to build, probe and forget: the policy
//! of the per-(thread, device) cache (Note [RNN algorithms], Note [Reserve tag]), generic
//! over what it builds ([`Build`]: cuDNN's in `build`, a recording fake in the tests), so
//! that it is tested without a GPU. The cache itself lives in `state`.
//!
//! One file although it passes 700 lines: half of it is the tests, which replay every
//! build and probe the policy asks for and read its private maps.

use std::collections::HashMap;
use std::rc::Rc;

use burn::tensor::DType;

use super::algorithm::{Algo, Pass, Settings};
use super::ffi::Error;
use crate::descriptor::RnnDescriptor;
use crate::spec::RnnSpec;

/// What a call shape depends on besides its network.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ShapeKey {
    seq_length: usize,
    batch_size: usize,
    batch_first: bool,
    seq_lengths: Option<Vec<usize>>,
}

impl ShapeKey {
    fn of(desc: &RnnDescriptor) -> Self {
        Self {
            seq_length: desc.seq_length,
            batch_size: desc.batch_size,
            batch_first: desc.batch_first,
            seq_lengths: desc.seq_lengths.clone(),
        }
    }
}

/// One network: what its RNN descriptor, dropout descriptor and weight plan depend on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct NetKey {
    pub spec: RnnSpec,
    pub dropout_bits: u64,
    pub dtype: DType,
    pub tf32: bool,
    pub algo: Algo,
    /// The batch size a `PERSIST_DYNAMIC` network is compiled for; `None` otherwise.
    pub dynamic_batch: Option<usize>,
}

impl NetKey {
    pub(crate) fn of(desc: &RnnDescriptor, dtype: DType, tf32: bool, algo: Algo) -> Self {
        Self {
            spec: desc.spec,
            dropout_bits: desc.dropout.probability.to_bits(),
            dtype,
            tf32,
            algo,
            dynamic_batch: (algo == Algo::PersistDynamic).then_some(desc.batch_size),
        }
    }

    /// The key of the network's dropout state: one per network, except that the
    /// `PERSIST_DYNAMIC` networks of every batch size share one, so that a new batch size
    /// continues the random stream instead of seeding a second one (Note [cuDNN dropout]).
    fn dropout_key(&self) -> NetKey {
        NetKey {
            dynamic_batch: None,
            ..self.clone()
        }
    }
}

/// One call shape of one network: the entry a training forward and its backward share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CallKey {
    net: NetKey,
    shape: ShapeKey,
}

/// One forward request: the descriptor, dtype, settings and pass it was made with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RequestKey {
    spec: RnnSpec,
    dropout_bits: u64,
    dtype: DType,
    settings: Settings,
    pass: Pass,
    shape: ShapeKey,
}

impl RequestKey {
    pub(crate) fn of(desc: &RnnDescriptor, dtype: DType, settings: Settings, pass: Pass) -> Self {
        Self {
            spec: desc.spec,
            dropout_bits: desc.dropout.probability.to_bits(),
            dtype,
            settings,
            pass,
            shape: ShapeKey::of(desc),
        }
    }
}

/// What [`Cache`] asks to be built or run. The cuDNN implementation is `build::CudnnBuild`;
/// the tests use a recording fake.
pub(crate) trait Build {
    /// A dropout descriptor and its generator states.
    type Dropout;
    /// A network (RNN descriptor, weight plan).
    type Network;
    /// A call shape of a network (data descriptors, lengths, temporary sizes).
    type Call;
    /// The dropout state of the networks keyed by [`NetKey::dropout_key`].
    fn dropout(&mut self, desc: &RnnDescriptor) -> Result<Self::Dropout, Error>;
    /// The network of `key`.
    fn network(
        &mut self,
        key: &NetKey,
        desc: &RnnDescriptor,
        dropout: &Rc<Self::Dropout>,
    ) -> Result<Self::Network, Error>;
    /// The call shape of `desc` on `net`.
    fn call(&mut self, net: &Rc<Self::Network>, desc: &RnnDescriptor) -> Result<Self::Call, Error>;
    /// Runs `pass` of a call shape on zeros (Note [RNN algorithms]).
    fn probe(&mut self, call: &Self::Call, desc: &RnnDescriptor, pass: Pass) -> Result<(), Error>;
}

/// Entries kept per map before the cache is cleared.
const CACHE_LIMIT: usize = 256;

/// Which call shape each request runs, and everything built for it (Note [RNN
/// algorithms], Note [Reserve tag]). `None` remembers a failure: the reference path for a
/// request, a network cuDNN refused.
///
/// Fields drop in order: requests and call shapes hold networks, networks hold dropout
/// states.
pub(crate) struct Cache<D, N, C> {
    /// Forward requests: the call shape chosen, or `None` (the reference path).
    requests: HashMap<RequestKey, Option<Rc<C>>>,
    /// Every call shape built, per network: where a backward finds its forward's.
    calls: HashMap<CallKey, Rc<C>>,
    networks: HashMap<NetKey, Option<Rc<N>>>,
    /// Standard networks' probes at `T = B = 1`, per pass.
    network_probes: HashMap<(NetKey, Pass), Result<(), Error>>,
    dropouts: HashMap<NetKey, Rc<D>>,
}

impl<D, N, C> Default for Cache<D, N, C> {
    fn default() -> Self {
        Self {
            requests: HashMap::new(),
            calls: HashMap::new(),
            networks: HashMap::new(),
            network_probes: HashMap::new(),
            dropouts: HashMap::new(),
        }
    }
}

impl<D, N, C> Cache<D, N, C> {
    /// The choice made for `key` before (`Some(None)`: the reference path), if any.
    pub(crate) fn request(&self, key: &RequestKey) -> Option<Option<Rc<C>>> {
        self.requests.get(key).cloned()
    }

    /// Chooses the call shape of a new request: the first of `candidates` that builds and
    /// passes its probe for the request's pass, or `None`; remembered for the request.
    /// Each refusal adds a warning.
    pub(crate) fn choose<B>(
        &mut self,
        b: &mut B,
        desc: &RnnDescriptor,
        key: RequestKey,
        candidates: &[Algo],
        warnings: &mut Vec<String>,
    ) -> Option<Rc<C>>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        self.make_room();
        let mut chosen = None;
        for &algo in candidates {
            let net = NetKey::of(desc, key.dtype, key.settings.tf32, algo);
            match self.build(b, desc, net, Some(key.pass)) {
                Ok(call) => {
                    chosen = Some(call);
                    break;
                }
                Err(reason) => warnings.push(format!(
                    "cuDNN does not run {:?} in {:?} at T = {}, B = {} with the {} algorithm ({reason})",
                    desc.spec,
                    key.dtype,
                    desc.seq_length,
                    desc.batch_size,
                    algo.public()
                )),
            }
        }
        self.requests.insert(key, chosen.clone());
        chosen
    }

    /// The call shape a training forward of `desc` ran with `algo` and `tf32` (its
    /// reserve's tag, Note [Reserve tag]), whatever algorithm it was asked for.
    pub(crate) fn trained(
        &self,
        desc: &RnnDescriptor,
        dtype: DType,
        algo: Algo,
        tf32: bool,
    ) -> Option<Rc<C>> {
        let key = CallKey {
            net: NetKey::of(desc, dtype, tf32, algo),
            shape: ShapeKey::of(desc),
        };
        self.calls.get(&key).cloned()
    }

    /// Builds exactly the network and call shape of [`Cache::trained`] again, without a
    /// probe: for a backward whose forward's entry is gone.
    pub(crate) fn rebuild<B>(
        &mut self,
        b: &mut B,
        desc: &RnnDescriptor,
        dtype: DType,
        algo: Algo,
        tf32: bool,
    ) -> Result<Rc<C>, Error>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        self.make_room();
        self.build(b, desc, NetKey::of(desc, dtype, tf32, algo), None)
    }

    /// The call shape of `desc` on the network `net` (built or taken from the cache), and,
    /// with `probe`, its check for that pass: a persistent call shape is probed itself, a
    /// standard network once per pass at `T = B = 1`.
    fn build<B>(
        &mut self,
        b: &mut B,
        desc: &RnnDescriptor,
        net: NetKey,
        probe: Option<Pass>,
    ) -> Result<Rc<C>, Error>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        let network = self.network(b, desc, &net)?;
        let persistent = net.algo.is_persistent();
        if let (Some(pass), false) = (probe, persistent) {
            self.probe_network(b, desc, &net, &network, pass)?;
        }
        let key = CallKey {
            net,
            shape: ShapeKey::of(desc),
        };
        let call = match self.calls.get(&key) {
            Some(call) => call.clone(),
            None => {
                let call = Rc::new(b.call(&network, desc)?);
                self.calls.insert(key, call.clone());
                call
            }
        };
        if let (Some(pass), true) = (probe, persistent) {
            b.probe(&call, desc, pass)?;
        }
        Ok(call)
    }

    fn network<B>(&mut self, b: &mut B, desc: &RnnDescriptor, key: &NetKey) -> Result<Rc<N>, Error>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        match self.networks.get(key) {
            Some(Some(network)) => return Ok(network.clone()),
            Some(None) => return Err(Error::FailedBefore),
            None => {}
        }
        let built = self
            .dropout(b, desc, key.dropout_key())
            .and_then(|dropout| b.network(key, desc, &dropout))
            .map(Rc::new);
        self.networks
            .insert(key.clone(), built.as_ref().ok().cloned());
        built
    }

    fn dropout<B>(&mut self, b: &mut B, desc: &RnnDescriptor, key: NetKey) -> Result<Rc<D>, Error>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        if let Some(dropout) = self.dropouts.get(&key) {
            return Ok(dropout.clone());
        }
        let dropout = Rc::new(b.dropout(desc)?);
        self.dropouts.insert(key, dropout.clone());
        Ok(dropout)
    }

    /// A standard network's check for `pass`: one call at `T = B = 1` on zeros, once per
    /// network and pass (cuDNN refuses some networks, BF16 ones, only when it runs them).
    fn probe_network<B>(
        &mut self,
        b: &mut B,
        desc: &RnnDescriptor,
        key: &NetKey,
        network: &Rc<N>,
        pass: Pass,
    ) -> Result<(), Error>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        let probe_key = (key.clone(), pass);
        if let Some(result) = self.network_probes.get(&probe_key) {
            return result.clone();
        }
        let tiny = RnnDescriptor::new(desc.spec, 1, 1, false, None, desc.dropout);
        let result = b
            .call(network, &tiny)
            .and_then(|call| b.probe(&call, &tiny, pass));
        self.network_probes.insert(probe_key, result.clone());
        result
    }

    /// Forgets everything built once a map is full. Requests and call shapes go together
    /// (a request's call shape must stay where its backward looks for it); networks go with
    /// everything that holds them, so that a network is never built twice (with a second
    /// dropout state) while one lives.
    fn make_room(&mut self) {
        if self.requests.len() >= CACHE_LIMIT || self.calls.len() >= CACHE_LIMIT {
            self.requests.clear();
            self.calls.clear();
        }
        if self.networks.len() >= CACHE_LIMIT || self.dropouts.len() >= CACHE_LIMIT {
            self.requests.clear();
            self.calls.clear();
            self.networks.clear();
            self.network_probes.clear();
            self.dropouts.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FusedRnnConfig;
    use crate::cudnn::algorithm::tests::H100;
    use crate::cudnn::algorithm::{self, RnnAlgorithm};
    use crate::cudnn::ffi::CudnnError;
    use crate::descriptor::DropoutSpec;
    use crate::spec::RnnMode;
    use cudarc::cudnn::sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED;
    use std::collections::HashSet;

    /// Builds labelled stand-ins and records every build and probe.
    #[derive(Default)]
    struct Fake {
        log: Vec<String>,
        /// Probes that fail: (algorithm, pass).
        refuse: HashSet<(Algo, Pass)>,
        dropouts: usize,
    }

    /// A fake network: its key and the id of its dropout state.
    struct FakeNet(NetKey, usize);

    impl Build for Fake {
        type Dropout = usize;
        type Network = FakeNet;
        type Call = (NetKey, usize);

        fn dropout(&mut self, _: &RnnDescriptor) -> Result<usize, Error> {
            self.dropouts += 1;
            self.log.push(format!("dropout {}", self.dropouts));
            Ok(self.dropouts)
        }

        fn network(
            &mut self,
            key: &NetKey,
            _: &RnnDescriptor,
            dropout: &Rc<usize>,
        ) -> Result<FakeNet, Error> {
            self.log.push(format!("network {}", key.algo.public()));
            Ok(FakeNet(key.clone(), **dropout))
        }

        fn call(&mut self, net: &Rc<FakeNet>, d: &RnnDescriptor) -> Result<(NetKey, usize), Error> {
            self.log
                .push(format!("call {} B{}", net.0.algo.public(), d.batch_size));
            Ok((net.0.clone(), d.batch_size))
        }

        fn probe(
            &mut self,
            call: &(NetKey, usize),
            _: &RnnDescriptor,
            pass: Pass,
        ) -> Result<(), Error> {
            let algo = call.0.algo;
            self.log
                .push(format!("probe {} {pass:?} B{}", algo.public(), call.1));
            if self.refuse.contains(&(algo, pass)) {
                return Err(Error::Cudnn {
                    error: CudnnError {
                        call: "cudnnRNNForward",
                        status: CUDNN_STATUS_NOT_SUPPORTED,
                    },
                    text: "the fake refuses".into(),
                });
            }
            Ok(())
        }
    }

    type FakeCache = Cache<usize, FakeNet, (NetKey, usize)>;

    fn desc(mode: RnnMode, h: usize, b: usize) -> RnnDescriptor {
        let spec = FusedRnnConfig::new(mode, h, h).with_num_layers(2).spec();
        RnnDescriptor::new(spec, 10, b, true, None, DropoutSpec::NONE)
    }

    /// A forward request as `prepared` makes it, with the real candidate list.
    fn forward(
        cache: &mut FakeCache,
        b: &mut Fake,
        d: &RnnDescriptor,
        dtype: DType,
        settings: Settings,
        pass: Pass,
    ) -> Option<Rc<(NetKey, usize)>> {
        let key = RequestKey::of(d, dtype, settings, pass);
        if let Some(found) = cache.request(&key) {
            return found;
        }
        let candidates = algorithm::candidates(settings, d, dtype, pass, H100);
        cache.choose(b, d, key, &candidates, &mut Vec::new())
    }

    fn settings(algorithm: RnnAlgorithm, tf32: bool) -> Settings {
        Settings { algorithm, tf32 }
    }

    #[test]
    fn a_backward_finds_its_forwards_call_shape_for_every_algorithm_without_building() {
        // (setting, shape and dtype, the algorithm the training forward runs): `Auto`
        // picks small-H for LSTM H = 128 and persist-static for an F16 layer of 256.
        let small = desc(RnnMode::Lstm, 128, 8);
        let f16 = {
            let spec = FusedRnnConfig::new(RnnMode::Lstm, 256, 256).spec();
            RnnDescriptor::new(spec, 10, 8, true, None, DropoutSpec::NONE)
        };
        let cases = [
            (RnnAlgorithm::Standard, &small, DType::F32, Algo::Standard),
            (
                RnnAlgorithm::PersistStatic,
                &small,
                DType::F32,
                Algo::PersistStatic,
            ),
            (
                RnnAlgorithm::PersistStaticSmallH,
                &small,
                DType::F32,
                Algo::PersistStaticSmallH,
            ),
            (
                RnnAlgorithm::PersistDynamic,
                &small,
                DType::F32,
                Algo::PersistDynamic,
            ),
            (
                RnnAlgorithm::Auto,
                &small,
                DType::F32,
                Algo::PersistStaticSmallH,
            ),
            (RnnAlgorithm::Auto, &f16, DType::F16, Algo::PersistStatic),
        ];
        for (algorithm, d, dtype, runs) in cases {
            for tf32 in [false, true] {
                let what = format!("{algorithm} tf32={tf32} {dtype:?}");
                let (mut cache, mut b) = (FakeCache::default(), Fake::default());
                let s = settings(algorithm, tf32);
                let forward = forward(&mut cache, &mut b, d, dtype, s, Pass::Training)
                    .unwrap_or_else(|| panic!("{what}: the forward found no call shape"));
                assert_eq!((forward.0.algo, forward.0.tf32), (runs, tf32), "{what}");
                // The forward probed the training pass only.
                assert!(
                    b.log.iter().any(|l| l.contains("Training")),
                    "{what}: {:?}",
                    b.log
                );
                assert!(
                    !b.log.iter().any(|l| l.contains("Inference")),
                    "{what}: {:?}",
                    b.log
                );
                b.log.clear();
                let backward = cache
                    .trained(d, dtype, runs, tf32)
                    .unwrap_or_else(|| panic!("{what}: the backward missed its forward's entry"));
                assert!(
                    Rc::ptr_eq(&forward, &backward),
                    "{what}: another call shape"
                );
                assert!(
                    b.log.is_empty(),
                    "{what}: the backward built or probed: {:?}",
                    b.log
                );
                // The other math mode is another network: not this entry.
                assert!(cache.trained(d, dtype, runs, !tf32).is_none(), "{what}");
            }
        }
    }

    #[test]
    fn a_refused_probe_in_the_forward_gives_a_standard_backward() {
        let d = desc(RnnMode::Gru, 64, 4);
        let (mut cache, mut b) = (FakeCache::default(), Fake::default());
        b.refuse.insert((Algo::PersistStaticSmallH, Pass::Training));
        let s = settings(RnnAlgorithm::Auto, false);
        let forward = forward(&mut cache, &mut b, &d, DType::F32, s, Pass::Training).unwrap();
        assert_eq!(forward.0.algo, Algo::Standard);
        assert_eq!(
            b.log,
            [
                "dropout 1",
                "network persist_static_small_h",
                "call persist_static_small_h B4",
                "probe persist_static_small_h Training B4",
                "dropout 2",
                "network standard",
                "call standard B1",
                "probe standard Training B1",
                "call standard B4",
            ]
        );
        b.log.clear();
        let backward = cache
            .trained(&d, DType::F32, Algo::Standard, false)
            .unwrap();
        assert!(Rc::ptr_eq(&forward, &backward));
        assert!(b.log.is_empty(), "{:?}", b.log);
        // The same request again: remembered, nothing built or probed.
        let again = self::forward(&mut cache, &mut b, &d, DType::F32, s, Pass::Training).unwrap();
        assert!(Rc::ptr_eq(&forward, &again));
        assert!(b.log.is_empty(), "{:?}", b.log);
    }

    #[test]
    fn after_a_clear_the_backward_rebuilds_exactly_the_tagged_network_without_a_probe() {
        let d = desc(RnnMode::Lstm, 64, 8);
        for algo in [
            Algo::Standard,
            Algo::PersistStatic,
            Algo::PersistStaticSmallH,
            Algo::PersistDynamic,
        ] {
            let (mut cache, mut b) = (FakeCache::default(), Fake::default());
            assert!(cache.trained(&d, DType::F32, algo, true).is_none());
            let call = cache.rebuild(&mut b, &d, DType::F32, algo, true).unwrap();
            assert_eq!((call.0.algo, call.0.tf32, call.1), (algo, true, 8));
            let name = algo.public();
            assert_eq!(
                b.log,
                [
                    "dropout 1".to_string(),
                    format!("network {name}"),
                    format!("call {name} B8")
                ]
            );
            let found = cache.trained(&d, DType::F32, algo, true).unwrap();
            assert!(Rc::ptr_eq(&call, &found));
        }
    }

    #[test]
    fn an_inference_request_probes_only_the_inference_forward() {
        // LSTM H = 192: small-H runs its forward (Auto picks it for inference) but not its
        // backward (Auto does not pick it for training).
        let d = desc(RnnMode::Lstm, 192, 8);
        let (mut cache, mut b) = (FakeCache::default(), Fake::default());
        b.refuse.insert((Algo::PersistStaticSmallH, Pass::Training));
        let auto = settings(RnnAlgorithm::Auto, false);
        let inference = forward(&mut cache, &mut b, &d, DType::F32, auto, Pass::Inference).unwrap();
        assert_eq!(inference.0.algo, Algo::PersistStaticSmallH);
        assert_eq!(
            b.log,
            [
                "dropout 1",
                "network persist_static_small_h",
                "call persist_static_small_h B8",
                "probe persist_static_small_h Inference B8",
            ]
        );
        b.log.clear();
        let training = forward(&mut cache, &mut b, &d, DType::F32, auto, Pass::Training).unwrap();
        assert_eq!(training.0.algo, Algo::Standard);
        assert!(!b.log.iter().any(|l| l.contains("small_h")), "{:?}", b.log);
        // The explicit choice is probed for training too, refused there, and the standard
        // network (already checked for training) takes over without a second build.
        b.log.clear();
        let explicit = settings(RnnAlgorithm::PersistStaticSmallH, false);
        let chosen = forward(&mut cache, &mut b, &d, DType::F32, explicit, Pass::Training).unwrap();
        assert!(Rc::ptr_eq(&chosen, &training));
        assert_eq!(b.log, ["probe persist_static_small_h Training B8"]);
        // A standard network is probed once per pass, at T = B = 1.
        let standard = settings(RnnAlgorithm::Standard, false);
        let d2 = desc(RnnMode::Gru, 32, 3);
        b.log.clear();
        forward(
            &mut cache,
            &mut b,
            &d2,
            DType::F32,
            standard,
            Pass::Inference,
        )
        .unwrap();
        forward(
            &mut cache,
            &mut b,
            &d2,
            DType::F32,
            standard,
            Pass::Training,
        )
        .unwrap();
        assert_eq!(
            b.log,
            [
                "dropout 3",
                "network standard",
                "call standard B1",
                "probe standard Inference B1",
                "call standard B3",
                "call standard B1",
                "probe standard Training B1",
            ]
        );
    }

    #[test]
    fn persist_dynamic_networks_of_every_batch_size_share_one_dropout_state() {
        let (mut cache, mut b) = (FakeCache::default(), Fake::default());
        let net_dropout = |call: &Rc<(NetKey, usize)>, cache: &FakeCache| {
            let net = cache.networks[&call.0].clone().unwrap();
            net.1
        };
        let mut dropout_of = |algorithm, batch| {
            let d = desc(RnnMode::Lstm, 64, batch);
            let s = settings(algorithm, false);
            let call = forward(&mut cache, &mut b, &d, DType::F32, s, Pass::Training).unwrap();
            (call.0.dynamic_batch, net_dropout(&call, &cache))
        };
        let (dynamic8, dynamic4) = (
            dropout_of(RnnAlgorithm::PersistDynamic, 8),
            dropout_of(RnnAlgorithm::PersistDynamic, 4),
        );
        assert_eq!(
            (dynamic8.0, dynamic4.0),
            (Some(8), Some(4)),
            "one network per batch size"
        );
        assert_eq!(dynamic8.1, dynamic4.1, "one dropout state for both");
        // Every other network has its own, for every batch size.
        let (standard8, standard4) = (
            dropout_of(RnnAlgorithm::Standard, 8),
            dropout_of(RnnAlgorithm::Standard, 4),
        );
        assert_eq!(
            standard8.1, standard4.1,
            "one standard network for both batch sizes"
        );
        assert_ne!(standard8.1, dynamic8.1);
        assert_ne!(dropout_of(RnnAlgorithm::PersistStatic, 8).1, standard8.1);
    }

    #[test]
    fn a_full_cache_is_cleared_and_rebuilt() {
        let (mut cache, mut b) = (FakeCache::default(), Fake::default());
        let s = settings(RnnAlgorithm::Standard, false);
        let first = forward(
            &mut cache,
            &mut b,
            &desc(RnnMode::Gru, 8, 1),
            DType::F32,
            s,
            Pass::Inference,
        )
        .unwrap();
        for batch in 2..=CACHE_LIMIT {
            forward(
                &mut cache,
                &mut b,
                &desc(RnnMode::Gru, 8, batch),
                DType::F32,
                s,
                Pass::Inference,
            )
            .unwrap();
        }
        assert!(cache
            .trained(&desc(RnnMode::Gru, 8, 1), DType::F32, Algo::Standard, false)
            .is_some());
        assert_eq!(cache.requests.len(), CACHE_LIMIT);
        // The next request clears requests and call shapes, not the network.
        b.log.clear();
        forward(
            &mut cache,
            &mut b,
            &desc(RnnMode::Gru, 8, 999),
            DType::F32,
            s,
            Pass::Inference,
        )
        .unwrap();
        assert_eq!(b.log, ["call standard B999"]);
        assert_eq!(cache.requests.len(), 1);
        assert!(cache
            .trained(&desc(RnnMode::Gru, 8, 1), DType::F32, Algo::Standard, false)
            .is_none());
        drop(first);
    }
}
