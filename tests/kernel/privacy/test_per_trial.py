"""PerTrialMechanism: several mechanisms as one program, parameters as per-trial data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy.ldp_vector import PrivUnitMechanism
from privrl.privacy.mechanisms import (
    GaussianMechanism,
    IdentityMechanism,
    LaplaceMechanism,
    PerTrialMechanism,
    ProjectedRandomSignMechanism,
)

D = 112  # the paper's d: PRS's d̂ = 1, 1, 2, 4 at ε = 1, 2, 5, 10
MEMBERS = (IdentityMechanism(0.01), LaplaceMechanism(1.0, 0.01), LaplaceMechanism(10.0, 0.3),
           ProjectedRandomSignMechanism(2.0, 1.0, dim=D),
           ProjectedRandomSignMechanism(10.0, 0.7, dim=D))
# FedPG's sweep: no mechanism (no clip), Gaussian and Laplace (paper 004's private variants)
FEDPG = (IdentityMechanism(), GaussianMechanism(18.8, 1.0), GaussianMechanism(3.46, 0.7),
         LaplaceMechanism(100.0, 1.0))


def _release(mech, which, keys, x):
    """Every member `which[k]` releasing the rows of x with keys, as one jitted program."""
    reps = len(which) // len(keys)
    return np.asarray(jax.jit(jax.vmap(lambda a, k, v: mech.privatize_with(a, k, v).value))(
        mech.stack(which), jnp.tile(keys, (reps,)), jnp.tile(x, (reps, 1))))


def test_each_trial_releases_exactly_what_its_member_releases():
    """The same floats, bit for bit: PRS's d̂ = 1 member padded to the largest d̂ (4), every
    family computed and the trial's selected, constants passed as data, not compiled in.
    XLA CPU compiles the clip's division differently for fewer than about 60 inputs (as a
    multiplication by the reciprocal), so each batch here has more, as a run's batches of
    reports do (tests/systems/pgc_a3c/test_settings.py)."""
    mech = PerTrialMechanism(MEMBERS, D)
    assert mech.rows == 4
    n = 72  # per member: inputs of mixed scale, some inside the clip ball, some far outside
    x = jax.random.normal(jax.random.key(0), (n, D)) * jnp.logspace(-5, 1, n)[:, None]
    keys = jax.random.split(jax.random.key(1), n)
    which = np.repeat(np.arange(len(MEMBERS)), n)
    together = jax.jit(jax.vmap(lambda a, k, v: mech.privatize_with(a, k, v).value))(
        mech.stack(which), jnp.tile(keys, (len(MEMBERS),)), jnp.tile(x, (len(MEMBERS), 1)))
    for i, m in enumerate(MEMBERS):
        alone = jax.jit(jax.vmap(lambda k, v, m=m: m.privatize(k, v).value))(keys, x)
        np.testing.assert_array_equal(np.asarray(together)[which == i], np.asarray(alone))


def test_named_families_give_one_member_the_floats_of_any_program_it_joins():
    """FedPG's programs name their families (none, laplace, gaussian), so a setting's own run
    and a program of several compile the same arithmetic: each member's rows are equal, bit
    for bit, alone and mixed. Gaussian and no-clip releases are also exactly their own
    mechanisms'; Laplace's transform XLA CPU may round differently beside a Gaussian
    (observed: a few float32 ulps), which the named families settle."""
    families = ("none", "laplace", "gaussian")
    n = 72
    x = jax.random.normal(jax.random.key(0), (n, D)) * jnp.logspace(-5, 1, n)[:, None]
    keys = jax.random.split(jax.random.key(1), n)
    which = np.repeat(np.arange(len(FEDPG)), n)
    together = _release(PerTrialMechanism(FEDPG, D, families), which, keys, x)
    for i, m in enumerate(FEDPG):
        alone = _release(PerTrialMechanism((m,), D, families), np.zeros(n, int), keys, x)
        np.testing.assert_array_equal(together[which == i], alone)
        own = np.asarray(jax.jit(jax.vmap(lambda k, v, m=m: m.privatize(k, v).value))(keys, x))
        if isinstance(m, LaplaceMechanism):
            np.testing.assert_allclose(alone, own, rtol=1e-5, atol=1e-7)
        else:
            np.testing.assert_array_equal(alone, own)
    np.testing.assert_array_equal(together[which == 0], np.asarray(x))  # none: x itself
    with pytest.raises(ValueError, match="unknown families"):
        PerTrialMechanism(FEDPG, D, ("gauss",))


def test_guarantee_is_the_weakest_member_and_privatize_needs_the_data():
    pure = PerTrialMechanism(MEMBERS[1:], D)
    assert pure.guarantee.epsilon == 10.0 and pure.guarantee.delta == 0.0
    assert pure.guarantee.notion == "ε-LDP"
    private = PerTrialMechanism(FEDPG[1:], D)  # Gaussian and Laplace: (max ε, max δ)
    g = private.guarantee
    assert g.is_private and g.delta == 1e-5 and g.notion == "(ε, δ)-LDP"
    assert g.epsilon == 100.0 and g.sensitivity is None
    same_clip = PerTrialMechanism((GaussianMechanism(18.8, 1.0), GaussianMechanism(3.46, 1.0)), D)
    assert (same_clip.guarantee.norm, same_clip.guarantee.sensitivity) == ("L2", 2.0)
    assert not PerTrialMechanism(MEMBERS, D).guarantee.is_private  # with ε = ∞ in the batch
    with pytest.raises(TypeError, match="privatize_with"):
        private.privatize(jax.random.key(0), jnp.zeros(D))
    report = private.privatize_with(private.args(1), jax.random.key(0), jnp.ones(D))
    assert report.guarantee == private.guarantee


@pytest.mark.parametrize("member", [PrivUnitMechanism(1.0, 0.1),
                                    LaplaceMechanism(1.0, 0.1, secure=True),
                                    GaussianMechanism(1.0, 0.1, secure=True)])
def test_members_that_cannot_take_data_are_refused(member):
    with pytest.raises(ValueError):
        PerTrialMechanism((LaplaceMechanism(1.0, 0.1), member), D)


# --- DP-SGD's sum and σ·IQR observation noise with their noise levels as data -----------------
def test_gaussian_sum_per_trial_releases_what_each_member_releases():
    """σ > 0: GaussianSumMechanism's release; 0: the clipped sum; None: the raw sum."""
    from privrl.privacy.clipping import clip_l2
    from privrl.privacy.mechanisms import PerTrialGaussianSum

    mech = PerTrialGaussianSum((None, 0.0, 0.3, 1.7), clip=1.5, delta=1e-5)
    rows = jax.random.normal(jax.random.key(2), (4, 5, 9)) * jnp.array([0.1, 1, 3, 9])[:, None,
                                                                                          None]
    keys = jax.random.split(jax.random.key(3), 4)
    got = jax.jit(jax.vmap(lambda a, k, x: mech.privatize_with(a, k, x).value))(
        mech.stack(range(4)), keys, rows)
    np.testing.assert_array_equal(got[0], rows[0].sum(0))
    np.testing.assert_array_equal(got[1], jax.vmap(lambda r: clip_l2(r, 1.5))(rows[1]).sum(0))
    for i in (2, 3):
        member = mech.member(i)
        assert member is not None and member.noise_multiplier == mech.sigmas[i]
        alone = jax.jit(lambda k, x, m=member: m.privatize(k, x).value)(keys[i], rows[i])
        np.testing.assert_array_equal(got[i], alone)
    assert mech.member(0) is None and mech.member(1) is None
    assert not mech.guarantee.is_private  # some members add no noise
    both = PerTrialGaussianSum((0.3, 1.7), clip=1.5)
    assert both.guarantee.epsilon == both.member(0).guarantee.epsilon  # the weakest (σ = 0.3)
    with pytest.raises(TypeError, match="privatize_with"):
        both.privatize(keys[0], rows[0])
    with pytest.raises(ValueError, match="noise multipliers"):
        PerTrialGaussianSum((-1.0,), clip=1.0)


def test_gaussian_noise_per_trial_releases_what_each_member_releases():
    from privrl.privacy.mechanisms import PerTrialGaussianNoise, UnboundedGaussianNoise

    scales = (None, (0.5, 0.1, 0.02), (5.0, 1.0, 0.2))
    mech = PerTrialGaussianNoise(scales, dim=3)
    x = jax.random.normal(jax.random.key(4), (3, 3))
    keys = jax.random.split(jax.random.key(5), 3)
    got = jax.jit(jax.vmap(lambda a, k, v: mech.privatize_with(a, k, v).value))(
        mech.stack(range(3)), keys, x)
    np.testing.assert_array_equal(got[0], x[0])  # off: the raw input
    for i in (1, 2):
        member = UnboundedGaussianNoise(scales[i])
        alone = jax.jit(lambda k, v, m=member: m.privatize(k, v).value)(keys[i], x[i])
        np.testing.assert_array_equal(got[i], alone)
    assert not mech.guarantee.is_private  # unbounded inputs: no member has a guarantee
    with pytest.raises(ValueError, match="coordinates"):
        PerTrialGaussianNoise(((1.0, 2.0),), dim=3)
