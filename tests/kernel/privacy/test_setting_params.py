"""Settings as data: a mechanism is a release function plus a parameter pytree, and a batch of
settings is those pytrees stacked along a trials axis (`setting_params`, `stack_params`,
`setting_release`), vmapped with the data. Each trial must release exactly what its own
setting releases, alone or inside any program."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy.ldp_vector import PrivUnitMechanism
from privrl.privacy.mechanisms import (
    GaussianMechanism,
    GaussianSumMechanism,
    GaussianSumParams,
    IdentityMechanism,
    LaplaceMechanism,
    ProjectedRandomSignMechanism,
    UnboundedGaussianNoise,
    UnboundedGaussianParams,
    gaussian_sum_release,
    privatize_setting,
    setting_params,
    settings_guarantee,
    stack_params,
    unbounded_gaussian_release,
)

D = 112  # the paper's d: PRS's d̂ = 1, 1, 2, 4 at ε = 1, 2, 5, 10
PGC_RELEASES = ("none", "laplace", "prs")  # PGC-A3C's programs'
MEMBERS = (IdentityMechanism(0.01), LaplaceMechanism(1.0, 0.01), LaplaceMechanism(10.0, 0.3),
           ProjectedRandomSignMechanism(2.0, 1.0, dim=D),
           ProjectedRandomSignMechanism(10.0, 0.7, dim=D))
# FedPG's sweep: no mechanism (no clip), Gaussian and Laplace (paper 004's private variants)
FEDPG = (IdentityMechanism(), GaussianMechanism(18.8, 1.0), GaussianMechanism(3.46, 0.7),
         LaplaceMechanism(100.0, 1.0))
FEDPG_RELEASES = ("none", "laplace", "gaussian")


def _release(mechanisms, releases, which, keys, x):
    """Every setting `which[k]` releasing the rows of x with keys, as one jitted program."""
    reps = len(which) // len(keys)
    params = stack_params([setting_params(mechanisms[i], D) for i in which])
    run = jax.vmap(lambda p, k, v: privatize_setting(mechanisms, releases, p, k, v).value)
    return np.asarray(jax.jit(run)(params, jnp.tile(keys, (reps,)), jnp.tile(x, (reps, 1))))


def _inputs(n=72):
    """Inputs of mixed scale, some inside the clip ball, some far outside."""
    x = jax.random.normal(jax.random.key(0), (n, D)) * jnp.logspace(-5, 1, n)[:, None]
    return x, jax.random.split(jax.random.key(1), n)


def test_each_trial_releases_exactly_what_its_setting_releases():
    """The same floats, bit for bit: PRS's d̂ = 1 setting padded to the largest d̂ (4), every
    release computed and the trial's selected, constants passed as data, not compiled in.
    XLA CPU compiles the clip's division differently for fewer than about 60 inputs (as a
    multiplication by the reciprocal), so each batch here has more, as a run's batches of
    reports do (tests/systems/pgc_a3c/test_settings.py)."""
    x, keys = _inputs()
    n = x.shape[0]
    which = np.repeat(np.arange(len(MEMBERS)), n)
    together = _release(MEMBERS, PGC_RELEASES, which, keys, x)
    for i, m in enumerate(MEMBERS):
        alone = jax.jit(jax.vmap(lambda k, v, m=m: m.privatize(k, v).value))(keys, x)
        np.testing.assert_array_equal(together[which == i], np.asarray(alone))


def test_a_setting_alone_and_inside_a_program_gives_the_same_floats():
    """FedPG's programs compute the same releases (none, laplace, gaussian) alone and together,
    so a setting's own run and a program of several compile the same arithmetic: each
    setting's rows are equal, bit for bit, alone and mixed. Gaussian and no-clip releases are
    also exactly their own mechanisms'; Laplace's transform XLA CPU may round differently
    beside a Gaussian (observed: a few float32 ulps), which naming the same releases settles."""
    x, keys = _inputs()
    n = x.shape[0]
    which = np.repeat(np.arange(len(FEDPG)), n)
    together = _release(FEDPG, FEDPG_RELEASES, which, keys, x)
    for i, m in enumerate(FEDPG):
        alone = _release((m,), FEDPG_RELEASES, np.zeros(n, int), keys, x)
        np.testing.assert_array_equal(together[which == i], alone)
        own = np.asarray(jax.jit(jax.vmap(lambda k, v, m=m: m.privatize(k, v).value))(keys, x))
        if isinstance(m, LaplaceMechanism):
            np.testing.assert_allclose(alone, own, rtol=1e-5, atol=1e-7)
        else:
            np.testing.assert_array_equal(alone, own)
    np.testing.assert_array_equal(together[which == 0], np.asarray(x))  # none: x itself
    with pytest.raises(ValueError, match="releases must name"):
        _release(FEDPG[:1], ("none", "gauss"), np.zeros(n, int), keys, x)
    with pytest.raises(ValueError, match="not \\['prs'\\]"):
        _release((*FEDPG, MEMBERS[3]), FEDPG_RELEASES, which, keys, x)


def test_guarantee_is_the_weakest_setting():
    pure = settings_guarantee(MEMBERS[1:])
    assert pure.epsilon == 10.0 and pure.delta == 0.0 and pure.notion == "ε-LDP"
    g = settings_guarantee(FEDPG[1:])  # Gaussian and Laplace: (max ε, max δ)
    assert g.is_private and g.delta == 1e-5 and g.notion == "(ε, δ)-LDP"
    assert g.epsilon == 100.0 and g.sensitivity is None
    same_clip = settings_guarantee((GaussianMechanism(18.8, 1.0), GaussianMechanism(3.46, 1.0)))
    assert (same_clip.norm, same_clip.sensitivity) == ("L2", 2.0)
    assert not settings_guarantee(MEMBERS).is_private  # with ε = ∞ in the batch
    assert settings_guarantee(FEDPG[1:2]) == FEDPG[1].guarantee  # one setting: its own
    report = privatize_setting(FEDPG[1:], FEDPG_RELEASES, setting_params(FEDPG[2], D),
                               jax.random.key(0), jnp.ones(D))
    assert report.guarantee == g
    with pytest.raises(ValueError, match="at least one"):
        privatize_setting((), FEDPG_RELEASES, setting_params(FEDPG[2], D), jax.random.key(0),
                          jnp.ones(D))


@pytest.mark.parametrize("member", [PrivUnitMechanism(1.0, 0.1),
                                    LaplaceMechanism(1.0, 0.1, secure=True),
                                    GaussianMechanism(1.0, 0.1, secure=True)])
def test_mechanisms_that_cannot_take_data_are_refused(member):
    with pytest.raises(ValueError):
        setting_params(member, D)


# --- DP-SGD's sum and σ·IQR observation noise: their parameters stacked ----------------------
def test_gaussian_sum_parameters_as_data_release_what_each_setting_releases():
    """σ > 0: GaussianSumMechanism's release; std 0: the clipped sum; no clip: the raw sum."""
    from privrl.privacy.clipping import clip_l2

    sigmas = (0.3, 1.7)
    own = [GaussianSumMechanism(s, 1.5) for s in sigmas]
    params = stack_params([GaussianSumParams(np.bool_(False), np.float32(0.0)),
                           GaussianSumParams(np.bool_(True), np.float32(0.0)),
                           *(m.release_params(9) for m in own)])
    rows = jax.random.normal(jax.random.key(2), (4, 5, 9)) * jnp.array([0.1, 1, 3, 9])[:, None,
                                                                                          None]
    keys = jax.random.split(jax.random.key(3), 4)
    got = jax.jit(jax.vmap(lambda p, k, x: gaussian_sum_release(p, k, x, 1.5)))(params, keys,
                                                                                 rows)
    np.testing.assert_array_equal(got[0], rows[0].sum(0))
    np.testing.assert_array_equal(got[1], jax.vmap(lambda r: clip_l2(r, 1.5))(rows[1]).sum(0))
    for i, m in enumerate(own, start=2):
        alone = jax.jit(lambda k, x, m=m: m.privatize(k, x).value)(keys[i], rows[i])
        np.testing.assert_array_equal(got[i], alone)


def test_gaussian_noise_parameters_as_data_release_what_each_setting_releases():
    scales = ((0.0, 0.0, 0.0), (0.5, 0.1, 0.02), (5.0, 1.0, 0.2))
    params = stack_params([UnboundedGaussianParams(np.asarray(s, np.float32)) for s in scales])
    x = jax.random.normal(jax.random.key(4), (3, 3))
    keys = jax.random.split(jax.random.key(5), 3)
    got = jax.jit(jax.vmap(unbounded_gaussian_release))(params, keys, x)
    np.testing.assert_array_equal(got[0], x[0])  # scale 0: the raw input
    for i in (1, 2):
        member = UnboundedGaussianNoise(scales[i])
        alone = jax.jit(lambda k, v, m=member: m.privatize(k, v).value)(keys[i], x[i])
        np.testing.assert_array_equal(got[i], alone)
        np.testing.assert_array_equal(member.release_params(3).scale, params.scale[i])
    with pytest.raises(ValueError, match="coordinates"):
        UnboundedGaussianNoise((1.0, 2.0)).release_params(3)
