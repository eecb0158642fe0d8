"""Byzantine agents and robust aggregation in FedPG-Cen (privrl.systems.fedpg.byzantine):
the attacks as defined, who attacks (fixed per seed), the filter's threshold under each LDP
mechanism's noise, the refusal under distributed DP, and a short run's record."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from privrl import main as cli
from privrl.config import ConfigError
from privrl.federation.robust import fedpg_br_keep
from privrl.systems.fedpg.algorithm import FedPGConfig, make_mechanism
from privrl.systems.fedpg.byzantine import (
    attack,
    byzantine_agents,
    filter_radii,
    forge,
    honest_radius,
    noise_radius,
    uniform_act,
)
from privrl.systems.fedpg.local import run_fedpg, summarize

K, D = 10, 386  # FedPG-BR's CartPole policy has 386 parameters
BATCH, SCALE = jnp.asarray(16), jnp.asarray(20.0)


def _mu(seed=0, n=K):
    return jax.random.normal(jax.random.key(seed), (n, 8))


def _cfg(**kw):
    return FedPGConfig(**{"byzantine": 3, "attack": "sign-flip", **kw})


# A tiny network and short rounds for the whole-path runs whose assertions hold at any size
# (the forgeries' norm against PrivUnit's releases, the server's noise and record): a
# smaller program to compile. The sign-flip run stays at FedPG-BR's shapes: its kept shares
# are the learning dynamics' own.
SMALL = dict(hidden=(4,), batch_min=2, batch_max=3, minibatch=1, max_episode_steps=20,
             budget=12)


def test_attacks_as_defined():
    # each attack is one jitted program; the checks read NumPy copies (not one eager JAX op
    # each)
    mu_jax = _mu()
    mu = np.asarray(mu_jax)
    byz = jnp.zeros(K, bool).at[jnp.array([1, 4, 8])].set(True)
    key = jax.random.key(1)
    honest = ~np.asarray(byz)

    def sent(name):
        out = np.asarray(jax.jit(attack, static_argnums=0)(_cfg(attack=name), mu_jax, byz,
                                                           BATCH, SCALE, key))
        assert np.array_equal(out[honest], mu[honest])  # honest lanes untouched
        return out[np.asarray(byz)]

    assert np.allclose(sent("sign-flip"), -2.5 * mu[np.asarray(byz)])
    assert np.all(sent("zero-gradient") == 0)
    assert np.array_equal(sent("random-action"), mu[np.asarray(byz)])  # acts on episodes
    noisy = sent("random-noise") - mu[np.asarray(byz)]
    spread = (mu.max(axis=1) - mu.min(axis=1))[np.asarray(byz)][:, None]
    assert np.all(np.abs(noisy) <= 3 * spread) and np.any(np.abs(noisy) > spread)
    # adaptive: all send μ̄_B moved against it by the honest radius σL̄√(V/B_t)
    mean_b = mu[np.asarray(byz)].mean(axis=0)
    adaptive = sent("adaptive")
    step = mean_b - adaptive[0]
    radius = float(honest_radius(_cfg(), BATCH, SCALE))
    assert np.allclose(np.linalg.norm(step), radius, rtol=1e-5)
    assert np.dot(step, mean_b) > 0 and np.allclose(adaptive, adaptive[0])
    # fedscspg: μ̄_B plus 1.5 × the Byzantine agents' largest pairwise distance
    b = mu[np.asarray(byz)]
    widest = max(np.linalg.norm(b[i] - b[j]) for i in range(3) for j in range(3))
    assert np.allclose(np.linalg.norm(sent("fedscspg")[0] - mean_b), 1.5 * widest, rtol=1e-5)
    # normalized: all send the direction opposite to μ̄_B at the Byzantine agents' mean norm
    norm = sent("normalized")
    assert np.allclose(norm, norm[0])
    assert np.allclose(np.linalg.norm(norm[0]), np.linalg.norm(b, axis=1).mean(), rtol=1e-5)
    cos = np.dot(norm[0], mean_b) / (np.linalg.norm(norm[0]) * np.linalg.norm(mean_b))
    assert cos == pytest.approx(-1.0, abs=1e-5)


def test_byzantine_agents_fixed_per_seed():
    a = byzantine_agents(_cfg(seed=3))
    assert a == byzantine_agents(_cfg(seed=3)) and len(set(a)) == 3
    assert all(0 <= i < K for i in a)
    assert len({byzantine_agents(_cfg(seed=s)) for s in range(10)}) > 1
    assert byzantine_agents(FedPGConfig()) == ()


def test_uniform_actions():
    from privrl.nets.heads import Categorical, Gaussian

    acts = uniform_act(Categorical(2))(None, jax.random.key(0), jnp.zeros((4000, 4)))
    assert acts.dtype == jnp.int32
    assert set(np.unique(acts)) == {0, 1} and abs(float(acts.mean()) - 0.5) < 0.03
    box = uniform_act(Gaussian((-2.0,), (2.0,)))(None, jax.random.key(0), jnp.zeros((4000, 3)))
    assert box.shape == (4000, 1) and float(box.min()) >= -2.0 and float(box.max()) <= 2.0
    assert abs(float(box.mean())) < 0.1 and abs(float(box.std()) - 4 / 12 ** 0.5) < 0.05


def _honest_reports(cfg, key, rho):
    """K honest estimates each within ρ of one g, released through cfg's mechanism."""
    k_g, k_u, k_m = jax.random.split(key, 3)
    g = jax.random.normal(k_g, (D,))
    g = 0.5 * g / jnp.linalg.norm(g)
    u = jax.random.normal(k_u, (K, D))
    mu = g + rho * u / jnp.linalg.norm(u, axis=1, keepdims=True)
    mech = make_mechanism(cfg, D)
    return jax.vmap(mech.privatize)(jax.random.split(k_m, K), mu).value


@pytest.mark.parametrize("mechanism,epsilon", [("gaussian", 4.0), ("laplace", 4.0),
                                               ("privunit", 4.0)])
def test_filter_keeps_honest_noisy_agents_at_the_stated_epsilon(mechanism, epsilon):
    """Ten honest agents whose estimates meet FedPG-BR's assumption (within σL̄√(V/B_t) of the
    gradient) release through an ε = 4 mechanism (gaussian: ε = 4 over the run, σ calibrated;
    laplace, privunit: ε = 4 per report). With the threshold widened by the mechanism's noise
    radius the filter keeps all ten in every one of 30 rounds; with FedPG-BR's noise-free
    threshold it drops honest agents."""
    field = "epsilon" if mechanism == "gaussian" else "epsilon_per_report"
    cfg = FedPGConfig(mechanism=mechanism, clip=1.0, robust="fedpg-br", **{field: epsilon}
                      ).resolved()
    rho = float(honest_radius(cfg, BATCH, SCALE))
    bare = FedPGConfig(robust="fedpg-br")
    thr, wide = filter_radii(cfg, D, BATCH, SCALE)
    thr0, wide0 = filter_radii(bare, D, BATCH, SCALE)
    reports = jax.jit(lambda key: _honest_reports(cfg, key, rho))  # one program, 30 rounds
    keep = jax.jit(fedpg_br_keep, static_argnums=3)
    dropped_bare = 0
    for r in range(30):
        values = reports(jax.random.key(r))
        assert bool(keep(values, thr, wide, cfg.byzantine_alpha).all()), r
        dropped_bare += K - int(keep(values, thr0, wide0, cfg.byzantine_alpha).sum())
    assert dropped_bare > 0


def test_noise_radius_formulas():
    """The radii docs/byzantine.md derives, at K = 10, δ = 0.6 (V = 2 log(2K/δ))."""
    v = 2 * math.log(2 * K / 0.6)
    g = FedPGConfig(mechanism="gaussian", noise_multiplier=2.0, clip=0.5).resolved()
    assert noise_radius(g, D) == pytest.approx(1.0 * (math.sqrt(D) + math.sqrt(v)))
    lap = FedPGConfig(mechanism="laplace", epsilon_per_report=2.0, clip=1.0)
    b = 0.5
    assert noise_radius(lap, D) == pytest.approx(
        b * math.sqrt(2 * D + math.sqrt(20 * D * (2 * K / 0.6 - 1))))
    assert noise_radius(FedPGConfig(), D) == 0.0
    # the Gaussian bound holds empirically: the norm of N(0, s²I_d) exceeds r in < δ/(2K)
    s = 1.0
    norms = np.linalg.norm(np.random.default_rng(0).normal(0, s, (20000, D)), axis=1)
    assert np.mean(norms > noise_radius(g, D)) < 0.6 / (2 * K)


def test_distributed_dp_refused():
    with pytest.raises(ConfigError, match="sees only the secure sum"):
        FedPGConfig(mechanism="distributed-gaussian", epsilon=1.0, clip=1.0,
                    robust="fedpg-br").resolved()


def test_cli_refuses_distributed_robust_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "runs"
    assert cli.main(["run", "fedpg-cen", "--mechanism", "distributed-gaussian", "--epsilon",
                     "1", "--robust", "median", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--robust" in err[0] and "secure sum" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("kw,field", [
    ({"byzantine": 3}, "attack"),
    ({"attack": "sign-flip"}, "attack"),
    ({"byzantine": 10, "attack": "sign-flip"}, "byzantine"),
    ({"algorithm": "dec", "robust": "median"}, "robust"),
    ({"robust": "fedpg-br", "mechanism": "privunitg", "epsilon": 1.0, "clip": 1.0}, "robust"),
    ({"byzantine_alpha": 0.5}, "byzantine_alpha"),
    ({"bypass_mechanism": True, "mechanism": "privunit", "epsilon": 4.0, "clip": 1.0},
     "bypass_mechanism"),  # no Byzantine agent
    ({"byzantine": 3, "attack": "sign-flip", "bypass_mechanism": True}, "bypass_mechanism"),
    ({"byzantine": 3, "attack": "sign-flip", "bypass_mechanism": True,
      "mechanism": "distributed-gaussian", "epsilon": 1.0, "clip": 1.0}, "bypass_mechanism"),
    ({"byzantine": 3, "attack": "sign-flip", "bypass_mechanism": 1, "mechanism": "privunit",
      "epsilon": 4.0, "clip": 1.0}, "bypass_mechanism"),
    ({"byzantine": 3, "attack": "sign-flip", "attack_norm": 10.0, "mechanism": "privunit",
      "epsilon": 4.0, "clip": 1.0}, "attack_norm"),  # the clip would undo it
    ({"byzantine": 3, "attack": "zero-gradient", "attack_norm": 10.0}, "attack_norm"),
    ({"byzantine": 3, "attack": "sign-flip", "attack_norm": -1.0}, "attack_norm"),
    ({"byzantine": 3, "attack": "sign-flip", "attack_norm": math.inf}, "attack_norm"),
    ({"attack_norm": 1.0}, "attack_norm"),
])
def test_bad_byzantine_configs(kw, field):
    with pytest.raises(ConfigError) as e:
        FedPGConfig(**kw).resolved()
    assert e.value.field == field


def test_short_run_records_who_attacked_and_what_was_kept(tmp_path):
    """Three sign-flippers against the filter for a few rounds: the summary names them and
    the filter kept honest reports far more often than theirs (it keeps every report in round
    0, before the server has played, and early gradients are small; 1 − 0.33 of theirs is
    dropped over 13 rounds at budget 400)."""
    cfg = FedPGConfig(byzantine=3, attack="sign-flip", robust="fedpg-br", budget=250, seed=1)
    s = summarize(run_fedpg(cfg))
    assert s["byzantine_agents"] == list(byzantine_agents(cfg))
    assert s["honest_reports_kept"] > 0.85 and s["byzantine_reports_kept"] < 0.5
    assert json.dumps(s)


def test_ldp_run_keeps_every_honest_report_and_states_the_rule(tmp_path):
    """The whole path under ε-LDP (Laplace, ε = 4 per report): the filter, its threshold
    widened by the noise radius, keeps all ten honest agents' reports in every round, and
    privacy.json states the rule as post-processing beside an unchanged per-release ε."""
    from privrl.systems.fedpg.local import privacy_record

    cfg = FedPGConfig(mechanism="laplace", epsilon_per_report=4.0, clip=1.0, robust="fedpg-br",
                      budget=50)
    run = run_fedpg(cfg)
    assert summarize(run)["honest_reports_kept"] == 1.0
    rec = privacy_record(run)
    assert "post-processing" in rec["robust_aggregation"]["guarantee"]
    assert rec["epsilon_per_release"] == 4.0


class AlwaysLeft(nn.Module):
    """A policy that pushes left (action 0) whatever it sees: logits (50, 0)."""

    @nn.compact
    def __call__(self, obs):
        return self.param("b", lambda k: jnp.array([50.0, 0.0])) + 0.0 * jnp.sum(obs)


def test_random_action_attackers_play_uniformly_and_the_honest_follow_the_policy():
    """With a policy that always pushes left, the honest agents' episodes are all action 0;
    the three random-action attackers' lanes hold uniformly random actions."""
    from privrl.systems.fedpg.algorithm import FedPG

    algo = FedPG(_cfg(attack="random-action"), model=AlwaysLeft())
    state = algo.init(jax.random.key(0))
    cen = algo.variant
    plan = jax.jit(cen.plan)(state, jax.random.key(1), jnp.asarray(True))
    ep = jax.jit(lambda p: cen.episodes(algo.source, p))(plan)
    byz = np.asarray(cen.byzantine_lanes(plan))
    played = np.asarray(ep.mask) > 0
    actions = np.asarray(ep.actions)
    assert np.all(actions[~byz][played[~byz]] == 0)
    share = actions[byz][played[byz]].mean()
    assert played[byz].sum() > 300 and 0.4 < share < 0.6


@pytest.mark.parametrize("kw,field", [
    ({"robust": "fedpg-br"}, "robust"),
    ({"algorithm": "dec", "robust": "none"}, "mechanism"),
])
def test_central_dp_refusals(kw, field):
    with pytest.raises(ConfigError) as e:
        FedPGConfig(mechanism="central-gaussian", epsilon=4.0, clip=1.0, **kw).resolved()
    assert e.value.field == field


def test_central_dp_with_a_trimmed_mean_states_a_trusted_server():
    """central-gaussian + trimmed mean (α = 0.3: 4 of 10 values kept per coordinate): the
    server's noise std is σ·C/4, the run's ε (PLD over its rounds) is within the target, and
    privacy.json says the server is trusted with the clipped updates."""
    from privrl.systems.fedpg.algorithm import FedPG
    from privrl.systems.fedpg.local import privacy_record

    cfg = FedPGConfig(mechanism="central-gaussian", epsilon=4.0, clip=1.0, robust="trimmed-mean",
                      byzantine=3, attack="sign-flip", byzantine_alpha=0.3, **SMALL)
    algo = FedPG(cfg)
    assert algo.central.sensitivity == pytest.approx(0.25)
    assert algo.central.std == pytest.approx(algo.config.noise_multiplier * 0.25)
    rec = privacy_record(run_fedpg(cfg))
    g = rec["guarantee"]
    assert g["notion"] == "DP" and "TRUSTED" in g["scope"] and 0 < g["epsilon"] <= 4.0
    assert rec["agents_releases_to_the_trusted_server"]["formal_guarantee"] is False


def test_attack_norm_keeps_the_direction_at_the_chosen_length():
    """attack_norm rescales each Byzantine message (sign-flip: each its own −μ_k; normalized:
    one shared direction) to the given L2 norm; honest lanes are untouched."""
    mu = _mu()
    byz = jnp.zeros(K, bool).at[jnp.array([1, 4, 8])].set(True)
    b = np.asarray(byz)
    sent = jax.jit(attack, static_argnums=0)  # one program an attack, not one per eager op
    for name in ("sign-flip", "normalized", "random-noise"):
        plain = np.asarray(sent(_cfg(attack=name), mu, byz, BATCH, SCALE, jax.random.key(1)))
        loud = np.asarray(sent(_cfg(attack=name, attack_norm=100.0), mu, byz, BATCH, SCALE,
                               jax.random.key(1)))
        assert np.array_equal(loud[~b], np.asarray(mu)[~b])
        assert np.allclose(np.linalg.norm(loud[b], axis=1), 100.0, rtol=1e-5)
        cos = np.sum(loud[b] * plain[b], axis=1) / (
            np.linalg.norm(loud[b], axis=1) * np.linalg.norm(plain[b], axis=1))
        assert np.allclose(cos, 1.0, atol=1e-5)


def _privunit(**kw):
    return FedPGConfig(mechanism="privunit", epsilon_per_report=4.0, clip=1.0, robust="fedpg-br",
                       byzantine=3, attack="sign-flip", **kw).resolved()


def test_forged_reports_are_the_attackers_messages():
    """Bypassing the mechanism, a Byzantine lane's report is its message exactly (no clip, no
    noise); an honest lane's is its mechanism's release, unchanged."""
    cfg = _privunit(bypass_mechanism=True, attack_norm=100.0)
    mech = make_mechanism(cfg, D)
    msg = jax.random.normal(jax.random.key(0), (K, D))
    keys = jax.random.split(jax.random.key(1), K)
    byz = jnp.zeros(K, bool).at[jnp.array([0, 5])].set(True)

    @jax.jit  # one program, not one per eager op of PrivUnit
    def release_and_forge(keys, msg, byz):
        released = jax.vmap(mech.privatize)(keys, msg)
        return released, forge(released, byz, msg)

    released, sent = release_and_forge(keys, msg, byz)
    b = np.asarray(byz)
    assert type(sent) is type(released) and sent.guarantee == released.guarantee
    value, msg, out = np.asarray(sent.value), np.asarray(msg), np.asarray(released.value)
    assert np.array_equal(value[b], msg[b])
    assert np.array_equal(value[~b], out[~b])
    assert np.all(np.linalg.norm(out, axis=1) <= 1.0 / _m(cfg) * (1 + 1e-5))


def _m(cfg):
    from privrl.privacy.ldp_vector import unit_mechanism

    return unit_mechanism("privunit", cfg.epsilon_per_report, cfg.clip).calibration(D).scale


def test_privunit_radius_is_the_span_of_two_releases():
    """Every PrivUnit release has norm at most C/m, so two honest releases are at most 2C/m
    apart: both radii are at most that (tighter than D + 2r = 4C + 2C/m), and honest releases
    of opposite inputs still sit within it."""
    cfg = _privunit()
    span = 2.0 / _m(cfg)
    thr, wide = filter_radii(cfg, D, BATCH, SCALE)
    assert float(thr) <= span * (1 + 1e-6) and float(wide) <= span * (1 + 1e-6)
    assert span < 2.0 + 2 * noise_radius(cfg, D)  # tighter than the generic radius
    mech = make_mechanism(cfg, D)
    u = jax.random.normal(jax.random.key(0), (D,))
    u = u / jnp.linalg.norm(u)
    x = jnp.concatenate([jnp.broadcast_to(u, (200, D)), jnp.broadcast_to(-u, (200, D))])
    v = jax.jit(jax.vmap(mech.privatize))(jax.random.split(jax.random.key(2), 400), x).value
    assert float(jnp.max(jnp.linalg.norm(v[:200, None] - v[None, 200:], axis=-1))) <= thr


def test_filter_drops_loud_off_mechanism_attackers_and_keeps_honest_privunit_reports():
    """K = 20 agents at PrivUnit ε = 4, 6 of them Byzantine and bypassing the mechanism with
    −g rescaled to norm 100 (7.7 × an honest release's): in each of 20 rounds the filter keeps
    all 14 honest releases and drops all 6 forgeries, so its mean is the honest releases'
    mean; the plain mean is pulled against g by 0.3·100 = 30, far beyond the honest signal
    (≤ C = 1)."""
    k, n_byz = 20, 6
    cfg = FedPGConfig(agents=k, mechanism="privunit", epsilon_per_report=4.0, clip=1.0,
                      robust="fedpg-br", byzantine=n_byz, attack="sign-flip",
                      bypass_mechanism=True, attack_norm=100.0).resolved()
    mech = make_mechanism(cfg, D)
    thr, wide = filter_radii(cfg, D, BATCH, SCALE)
    byz = jnp.arange(k) < n_byz
    g = jax.random.normal(jax.random.key(7), (D,))
    g = 0.5 * g / jnp.linalg.norm(g)
    @jax.jit  # one program for the 20 rounds
    def round_of(key):
        k_u, k_m = jax.random.split(key)
        mu = g + 0.3 * jax.random.normal(k_u, (k, D)) / math.sqrt(D)
        msg = attack(cfg, mu, byz, BATCH, SCALE, k_u)
        sent = forge(jax.vmap(mech.privatize)(jax.random.split(k_m, k), msg), byz, msg)
        return sent.value, fedpg_br_keep(sent.value, thr, wide, cfg.byzantine_alpha)

    for r in range(20):
        value, keep = round_of(jax.random.key(r))
        keep = np.asarray(keep)
        assert keep[n_byz:].all() and not keep[:n_byz].any(), r
        assert float(jnp.dot(jnp.mean(value, axis=0), g)) < -0.4 * 30 * 0.5


def test_short_off_mechanism_run_records_the_forgery_and_drops_it(tmp_path):
    """The whole path: 3 of 10 agents bypass PrivUnit (ε = 4) with 100-norm sign-flips;
    fedpg-br keeps every honest report and no forged one, and summary.json records it."""
    cfg = _privunit(bypass_mechanism=True, attack_norm=100.0, **SMALL)
    s = summarize(run_fedpg(cfg))
    assert s["bypass_mechanism"] is True and s["attack_norm"] == 100.0
    assert s["honest_reports_kept"] == 1.0 and s["byzantine_reports_kept"] == 0.0


def test_cli_refuses_attack_norm_through_the_mechanism_and_writes_nothing(tmp_path, capsys):
    """--attack-norm under a mechanism without --bypass-mechanism: the clip would undo it, so
    the command refuses in one line naming the option, exit 2, nothing written."""
    out = tmp_path / "runs"
    assert cli.main(["run", "fedpg-cen", "--mechanism", "privunit", "--epsilon-per-report", "4",
                     "--byzantine", "3", "--attack", "sign-flip", "--attack-norm", "100",
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--attack-norm" in err[0] and "bypass" in err[0]
    assert not out.exists()
