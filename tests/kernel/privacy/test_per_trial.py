"""PerTrialMechanism: several mechanisms as one program, parameters as per-trial data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy.ldp_vector import PrivUnitMechanism
from privrl.privacy.mechanisms import (
    IdentityMechanism,
    LaplaceMechanism,
    PerTrialMechanism,
    ProjectedRandomSignMechanism,
)

D = 112  # the paper's d: PRS's d̂ = 1, 1, 2, 4 at ε = 1, 2, 5, 10
MEMBERS = (IdentityMechanism(0.01), LaplaceMechanism(1.0, 0.01), LaplaceMechanism(10.0, 0.3),
           ProjectedRandomSignMechanism(2.0, 1.0, dim=D),
           ProjectedRandomSignMechanism(10.0, 0.7, dim=D))


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


def test_guarantee_is_the_weakest_member_and_privatize_needs_the_data():
    private = PerTrialMechanism(MEMBERS[1:], D)
    assert private.guarantee.epsilon == 10.0 and private.guarantee.is_private
    assert not PerTrialMechanism(MEMBERS, D).guarantee.is_private  # with ε = ∞ in the batch
    with pytest.raises(TypeError, match="privatize_with"):
        private.privatize(jax.random.key(0), jnp.zeros(D))
    report = private.privatize_with(private.args(1), jax.random.key(0), jnp.ones(D))
    assert report.guarantee == private.guarantee


@pytest.mark.parametrize("member", [PrivUnitMechanism(1.0, 0.1),
                                    LaplaceMechanism(1.0, 0.1, secure=True),
                                    IdentityMechanism()])
def test_members_that_cannot_take_data_are_refused(member):
    with pytest.raises(ValueError):
        PerTrialMechanism((LaplaceMechanism(1.0, 0.1), member), D)
