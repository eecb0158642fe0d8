"""FedRL (paper 002): the two-party protocol log, Q-output mechanisms, privacy.json, learning."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.envs import gridworld as gw
from privrl.federation.vertical import AlphaParty, BetaParty, Channel, ProtocolError
from privrl.privacy.accounting import Accountant, gaussian_epsilon
from privrl.privacy.qoutput import BoundedQGaussian, UnboundedQNoise
from privrl.privacy.report import Report
from privrl.systems.fedrl.algorithm import FedRL, FedRLConfig
from privrl.systems.fedrl.baselines import BaselineConfig, make_baseline

TINY = dict(num_envs=2, batch_size=4, buffer_size=64, updates_per_epoch=3, generated_maps=20)


def _recorded_run(steps=4, **kw):
    """A few FedRL steps, compiled by `Channel.recorded`: the log has every message's value."""
    channel = Channel()
    algo = FedRL(FedRLConfig(**{**TINY, **kw}), channel)
    maps = gw.generate_maps(20, 8, seed=0)
    s = channel.recorded(algo.init)(jax.random.key(0), maps)
    states = [s]
    step = channel.recorded(algo.train_step)
    for _ in range(steps):
        s = step(s, maps)
        states.append(s)
    return algo, channel, states


def _arrays(msgs):
    return [np.asarray(m.value) for m in msgs]


def _contains(haystack, needle):
    """True if `needle` equals `haystack` or any of its rows/sub-blocks along the first axis."""
    h, n = np.asarray(haystack), np.asarray(needle)
    if h.shape == n.shape and np.array_equal(h, n):
        return True
    if h.ndim == n.ndim + 1 and h.shape[1:] == n.shape:
        return any(np.array_equal(row, n) for row in h)
    return False


@pytest.fixture(scope="module")
def recorded():
    """Four recorded steps, a target copy every 2 (`test_target_networks_are_updated`)."""
    return _recorded_run(steps=4, target_period=2)


def test_beta_never_receives_a_reward(recorded):
    _, channel, states = recorded
    to_beta = [m for m in channel.log if m.receiver == "beta"]
    assert {m.kind for m in to_beta} == {"obs", "theta_g", "batch_ids", "actions", "Y",
                                         "C_alpha"}
    rewards = _arrays(m for m in channel.log if m.kind == "reward")
    stored = np.asarray(states[-1].alpha.memory.reward)
    assert len(rewards) == 4 and np.any(stored != 0)
    for m in to_beta:
        v = np.asarray(m.value)
        for r in [*rewards, stored]:
            assert not _contains(v, r) and not _contains(r, v) if v.size > 1 else True
    # Y_j is α's TD target, not the reward itself: it bootstraps through Q_f with γ = 0.9
    ids = [np.asarray(m.value) for m in to_beta if m.kind == "batch_ids"]
    ys = [np.asarray(m.value) for m in to_beta if m.kind == "Y"]
    for j, y in zip(ids, ys, strict=True):
        assert not np.allclose(y, stored[j])
    # β's own state has no reward field at all
    assert "reward" not in states[-1].beta.memory._fields


def test_no_party_receives_the_others_observations_or_parameters(recorded):
    algo, channel, states = recorded
    obs = {p: _arrays(m for m in channel.log if m.sender == "env" and m.receiver == p
                      and m.kind == "obs") for p in ("alpha", "beta")}
    thetas = {"alpha": [np.asarray(s.alpha.theta) for s in states],
              "beta": [np.asarray(s.beta.theta) for s in states]}
    mems = {"alpha": np.asarray(states[-1].alpha.memory.obs),
            "beta": np.asarray(states[-1].beta.memory.obs)}
    for receiver, other in (("alpha", "beta"), ("beta", "alpha")):
        for m in channel.log:
            if m.receiver != receiver or m.sender == "env":
                continue
            v = np.asarray(m.value)
            assert m.sender == other
            for o in obs[other]:
                assert not _contains(v, o) and v.shape[1:] != o.shape[1:], (m.kind, receiver)
            assert not any(r.shape == v.shape and np.array_equal(r, v) for r in mems[other])
            assert all(v.size != t.size for t in thetas[other]), (m.kind, receiver)
    # the party objects hold no reference to each other
    assert not any(isinstance(v, BetaParty) for v in vars(algo.alpha).values())
    assert not any(isinstance(v, AlphaParty) for v in vars(algo.beta).values())


def test_released_q_outputs_are_noisy_and_shared_theta_g_agrees(recorded):
    algo, channel, states = recorded
    # the last exchange's C_alpha: α's Q on the batch rows, plus N(0, 1) noise (not raw)
    ids = [np.asarray(m.value) for m in channel.log if m.kind == "batch_ids"][-1]
    c_alpha = [np.asarray(m.value) for m in channel.log if m.kind == "C_alpha"][-1]
    sa = states[-1].alpha
    raw = np.asarray(jax.jit(algo.alpha.q)(sa.theta, sa.memory.obs[ids]))  # one program
    resid = c_alpha - raw
    assert resid.shape == (4, 16)
    assert 0.5 < resid.std() < 1.6  # 64 N(0,1) draws: P(outside) < 1e-6
    # after an exchange both parties hold the same θ_g (β's last update, sent back to α)
    np.testing.assert_array_equal(states[-1].alpha.theta_g, states[-1].beta.theta_g)
    # and it moved: both parties trained it
    assert not np.allclose(states[0].alpha.theta_g, states[-1].alpha.theta_g)


def test_channel_refuses_messages_outside_the_protocol():
    ch = Channel()
    with pytest.raises(ProtocolError, match="env may not send 'reward' to beta"):
        ch.send("env", "beta", "reward", jnp.ones(3))
    with pytest.raises(ProtocolError):
        ch.send("alpha", "beta", "obs", jnp.ones(3))
    with pytest.raises(ProtocolError):
        ch.send("beta", "alpha", "theta_beta", jnp.ones(3))
    assert ch.log == []


def test_jitted_training_logs_the_same_protocol():
    """A jitted chunk logs its messages (no values) as jit traces it, which is all this needs:
    its state's shapes stand for a state, and nothing is compiled (the chunk compiles and runs
    in test_learning.py and test_cli.py)."""
    algo = FedRL(FedRLConfig(**TINY))
    maps = gw.generate_maps(20, 8, seed=0)
    s = jax.eval_shape(algo.init, jax.random.key(1), maps)
    jax.jit(algo.train_chunk).trace(s, maps)
    kinds = {(m.sender, m.receiver, m.kind) for m in algo.channel.log}
    assert ("env", "alpha", "reward") in kinds
    assert not any(r == "beta" and k == "reward" for _, r, k in kinds)


def test_target_networks_are_updated(recorded):
    _, _, states = recorded
    sa0, sa2, sa3 = states[0].alpha, states[2].alpha, states[3].alpha
    assert not np.array_equal(sa2.target, sa0.target)
    np.testing.assert_array_equal(sa2.target, sa2.theta)
    np.testing.assert_array_equal(sa3.target, sa2.target)  # held between copies
    np.testing.assert_array_equal(states[2].beta.target, states[2].beta.theta)


def test_q_output_mechanisms():
    m = BoundedQGaussian.from_sigma(1.0, 2.0, 1e-5)
    assert m.std == pytest.approx(1.0)
    assert m.event.noise_multiplier == pytest.approx(0.25)  # σ / (2B)
    assert m.guarantee.epsilon == pytest.approx(gaussian_epsilon(0.25, 1e-5))
    assert m.guarantee.sensitivity == 4.0 and "Q-output" in m.guarantee.unit
    # one program (eagerly: some 14 small ones)
    out = jax.jit(lambda k: jax.vmap(m.privatize)(jax.random.split(k, 4000),
                                                  jnp.full((4000, 16), 10.0)))(jax.random.key(0))
    assert isinstance(out, Report)
    # mean = the clipped vector (norm 2), std = 1: 64k draws, 8-σ tolerances
    np.testing.assert_allclose(np.asarray(out.value).mean(0), 2.0 / 4.0, atol=8 / math.sqrt(4000))
    assert abs(float(np.std(np.asarray(out.value))) - 1.0) < 0.03
    u = UnboundedQNoise(1.0)
    assert not u.guarantee.is_private and "unbounded" in u.guarantee.neighbouring
    with pytest.raises(ValueError):
        BoundedQGaussian.from_sigma(1.0, 0.0)


def test_privacy_json_paper_mode_states_no_epsilon():
    rec = FedRL(FedRLConfig(**TINY)).privacy_record(100, 2, 10, 10)
    assert rec["formal_guarantee"] is False and rec["epsilon"] == "none"
    assert rec["statement"].startswith("NO PRIVACY GUARANTEE") and "NO formal ε" in rec["statement"]
    assert rec["headline"].startswith("NO PRIVACY GUARANTEE") and rec["guarantee"] is None
    assert rec["releases"]["beta"] == 100 * 2 + 2 * 100 * 4 + (2 * 10 + 10) * 38


def test_privacy_json_bounded_mode_composes_every_release():
    algo = FedRL(FedRLConfig(**TINY, bounded=5.0, noise_sigma=2.0))
    rec = algo.privacy_record(100, 2, 10, 10)
    assert rec["formal_guarantee"] is True
    for party, count in rec["releases"].items():
        acc = Accountant()
        acc.compose(algo.mechanism.event, count)
        assert rec["parties"][party]["epsilon"] == pytest.approx(acc.epsilon(1e-5))
        assert rec["parties"][party]["events"][0]["noise_multiplier"] == pytest.approx(0.2)
    assert "no end-to-end ε" in rec["statement"]
    # The headline's ε is the whole run's, of the party that spent more; each party's own is
    # stated beside it.
    most = max(p["epsilon"] for p in rec["parties"].values())
    assert rec["guarantee"]["epsilon"] == most
    assert rec["headline"].startswith(f"(ε = {most:.4g}, δ = 1e-05)-LDP")
    for p in rec["parties"].values():
        assert f"(ε = {p['epsilon']:.4g}, δ = 1e-05)-LDP by accountant" in rec["statement"]
    assert rec["noise_keys"]["mode"] == "seeded" and "SIMULATION ONLY" in rec["statement"]
    rec = FedRL(FedRLConfig(**TINY, bounded=5.0, noise="secret")).privacy_record(100, 2, 10, 10)
    assert rec["noise_keys"]["mode"] == "secret" and "SIMULATION" not in rec["statement"]


def test_secret_party_roots_change_only_the_released_noise(recorded):
    """Each party's secret root (its own state, never a message) keys its Q-output noise: the
    same state, observations and seeded keys release the same Q plus different noise, of the
    mechanism's size; a root is reproducible only by whoever holds it."""
    from privrl.federation.vertical import with_secret_roots

    algo = FedRL(FedRLConfig(**TINY, bounded=2.0))
    s = recorded[2][0]  # the parties' initial states (`init` is the same in bounded mode)
    x = with_secret_roots(s)
    obs = s.env.obs_beta
    release_q = jax.jit(algo.beta.release_q)  # a program (eagerly: some 100 small ones)
    _, c_seeded = release_q(s.beta, obs)
    _, c_secret = release_q(x.beta, obs)
    _, c_again = release_q(x.beta, obs)
    raw = np.asarray(jax.jit(algo.beta.q)(s.beta.theta, obs))
    np.testing.assert_array_equal(c_secret, c_again)
    assert not np.allclose(c_seeded, c_secret)
    for c in (c_seeded, c_secret):  # 32 N(0, 1) draws (the secret ones unseeded: ≥ 4.8 sd)
        assert 0.4 < float(np.std(np.asarray(c) - raw)) < 1.8
    assert "noise" not in {m.kind for m in algo.channel.log}
    with pytest.raises(ConfigError, match=r"^noise: "):
        FedRLConfig(noise="public").resolved()


def test_bad_options_fail_before_compute():
    with pytest.raises(ConfigError, match=r"^size: "):
        FedRL(FedRLConfig(size=10))
    with pytest.raises(ConfigError, match=r"^bounded: "):
        FedRL(FedRLConfig(bounded=-1.0))
    with pytest.raises(ConfigError, match=r"^noise_sigma: "):
        FedRL(FedRLConfig(bounded=1.0, noise_sigma=0.0))
    with pytest.raises(ConfigError, match=r"^model: "):
        make_baseline(BaselineConfig(model="dqn-beta"))
    with pytest.raises(ConfigError, match=r"^history: "):
        FedRL(FedRLConfig(history=0))



def test_secure_q_output_noise_is_differentiable_and_on_the_grid(recorded):
    """Float-safe Q outputs (bounded mode): a released vector lies on the secure grid, and its
    derivative in the party's parameters is the float mechanism's (that of the clipped Q: the
    noise does not depend on them), so the parties' training steps work unchanged; the record
    says "secure" with RDP's ε. Refused without bounded mode or with PLD."""
    from privrl.privacy import secure

    algo = FedRL(FedRLConfig(**TINY, bounded=2.0, secure_noise=True, accountant="rdp"))
    mech = algo.mechanism
    s = recorded[2][-1]  # the parties' states after a few (float-noise) steps
    obs = s.env.obs_alpha
    gamma = float(secure.gaussian_grid(mech.std, mech.clip)[0])
    c = np.asarray(jax.jit(lambda sb, o: algo.beta.release_q(sb, o)[1])(s.beta, s.env.obs_beta),
                   np.float64)
    assert c.shape == (2, 16) and np.array_equal(c / gamma, np.round(c / gamma))
    key = jax.random.key(1)
    g_secure = jax.jit(jax.grad(lambda th: algo.alpha.released(key, th, obs).sum()))(
        s.alpha.theta)
    g_clipped = jax.jit(jax.grad(lambda th: algo.alpha.q(th, obs).sum()))(s.alpha.theta)
    np.testing.assert_array_equal(g_secure, g_clipped)
    assert np.abs(np.asarray(g_secure)).max() > 0
    rec = algo.privacy_record(1, 0, 0, 0)
    assert rec["noise_keys"]["mode"] == "secure" and "discrete" in rec["statement"]
    acc = Accountant("rdp")
    acc.compose(mech.event, rec["releases"]["alpha"])
    assert rec["parties"]["alpha"]["epsilon"] == pytest.approx(acc.epsilon(1e-5))
    with pytest.raises(ConfigError, match=r"^secure_noise: "):
        FedRLConfig(secure_noise=True, accountant="rdp").resolved()
    with pytest.raises(ConfigError, match=r"^accountant: "):
        FedRLConfig(bounded=2.0, secure_noise=True).resolved()


def test_the_seed_lets_the_other_party_subtract_seeded_noise_but_not_secret_noise(recorded):
    """The attack secret keys stop, on FedRL: α knows the seed (config.json), hence β's state
    key, hence the keys of β's next release; it recomputes that noise and subtracts it. From a
    seeded release this recovers β's clipped Q outputs to float rounding; from a secret one
    (β's root never left β's state) the residual is as large as the noise itself."""
    from privrl.federation.vertical import with_secret_roots

    algo = FedRL(FedRLConfig(**TINY, bounded=2.0, noise_sigma=1.0))
    s = recorded[2][0]  # the initial states: everything here follows from the seed
    obs = s.env.obs_beta
    truth = np.asarray(jax.jit(algo.beta.q)(s.beta.theta, obs))  # β's clipped Q: protected

    @jax.jit  # one program (eagerly: some 30 small ones)
    def attack(released):
        _, k = jax.random.split(s.beta.key)  # release_q's key, as the seeded code derives it
        keys = jax.random.split(k, obs.shape[0])
        noise = jax.vmap(algo.mechanism.privatize)(keys, jnp.zeros_like(released)).value
        return released - noise

    release_q = jax.jit(algo.beta.release_q)
    seeded = release_q(s.beta, obs)[1]
    np.testing.assert_allclose(np.asarray(attack(seeded)), truth, atol=1e-5)
    secret = release_q(with_secret_roots(s).beta, obs)[1]
    err = np.asarray(attack(secret)) - truth
    # 32 draws of N(0, 2) (sd √2 ≈ 1.41; unseeded: the bounds are ≥ 4.6 sd of the sample sd)
    assert 0.6 < float(np.std(err)) < 2.4
