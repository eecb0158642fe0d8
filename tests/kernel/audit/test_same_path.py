"""What is audited is what runs: for every mechanism family, `audit_mechanism` and the path a
run releases with (several settings as one program: `privatize_setting` over `setting_params`,
`gaussian_sum_release` over `sum_setting`'s parameters; or the mechanism itself where a run
uses it alone) call the family's ONE release function with
the same parameters, and a deliberately broken family (patched into that function) is refuted
by the audit.

The audits run at confidence 1 − 1e-6 on fixed seeds; each broken family leaks far beyond its
claim of ε = 1 (10× too little noise, or near-faithful signs), so the refutations have high
power, and the unpatched family is audited on the same draws to show it is not refuted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from privrl.audit import audit_mechanism
from privrl.privacy import ldp_vector
from privrl.privacy import mechanisms as m
from privrl.privacy.accounting import calibrate_noise_multiplier

CONF = 1 - 1e-6
N = 20_000
D = 4
Z1 = calibrate_noise_multiplier(1.0, 1e-5, 1)  # one Gaussian release with ε = 1 at δ = 1e-5


def _weaker(p: Any) -> Any:
    """A family's parameters with 10× too little noise (PRS: signs flipped 10× less often)."""
    if isinstance(p, m.LaplaceParams):
        return p._replace(scale=p.scale / 10)
    if isinstance(p, m.GaussianParams | m.BoxGaussianParams | m.GaussianSumParams):
        return p._replace(std=p.std / 10)
    if isinstance(p, m.PRSParams):
        low = p.low / 10
        return p._replace(low=low, slope=(1 - 2 * low) / (2 * p.clip))
    assert isinstance(p, ldp_vector.UnitParams)
    return p._replace(cal=p.cal._replace(p=1 - (1 - p.cal.p) / 100))


# family: (module, release function's name, the mechanism (claims ε = 1), the run's release)
def _program(mech: Any) -> Callable[[Any, Any], Any]:
    """The release of a run of several settings as one program, with `mech` its only member."""
    if isinstance(mech, m.GaussianSumMechanism):
        from privrl.systems.dpsgd_rl.episodic import sum_setting

        p = sum_setting(mech.noise_multiplier, mech.clip)
        return lambda key, x: m.gaussian_sum_release(p, key, x, mech.clip)
    return lambda key, x: m.privatize_setting((mech,), m.SETTING_RELEASES,
                                              m.setting_params(mech, D), key, x).value


def _alone(mech: Any) -> Callable[[Any, Any], Any]:
    """The release of a run that uses the mechanism alone (PrivUnit, box Gaussian states)."""
    return lambda key, x: mech.privatize(key, x).value


FAMILIES = {
    "laplace": (m, "laplace_release", m.LaplaceMechanism(1.0, 1.0), _program),
    "prs": (m, "prs_release", m.ProjectedRandomSignMechanism(1.0, 1.0, dim=D), _program),
    "gaussian": (m, "gaussian_release", m.GaussianMechanism(2 * Z1, 1.0), _program),
    "gaussian-sum": (m, "gaussian_sum_release", m.GaussianSumMechanism(Z1, 1.0), _program),
    "box-gaussian": (m, "box_gaussian_release",
                     m.BoxGaussianMechanism((0.0,) * D, (1.0,) * D, Z1), _alone),
    "privunit": (ldp_vector, "unit_release", ldp_vector.PrivUnitMechanism(1.0, 1.0), _alone),
    "privunitg": (ldp_vector, "unit_release", ldp_vector.PrivUnitGMechanism(1.0, 1.0), _alone),
}


def _audit(mech: Any) -> Any:
    return audit_mechanism(mech, key=jax.random.key(0), samples=N, confidence=CONF, dim=D,
                           chunk=N)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_audit_and_run_call_the_same_release_with_the_same_parameters(family, spy_release):
    module, name, mech, run_path = FAMILIES[family]
    calls = spy_release(module, name)
    x = (jnp.ones((3, D)) if family == "gaussian-sum" else jnp.full((D,), 0.1))
    jax.block_until_ready(jax.jit(run_path(mech))(jax.random.key(1), x))
    run = set(calls)
    assert run, f"a run's release did not reach {name}"
    calls.clear()
    audit_mechanism(mech, key=jax.random.key(0), samples=20, confidence=0.5, dim=D)
    assert calls, f"the audit did not reach {name}"
    assert set(calls) == run  # the same numbers: the audit's claim is the run's release


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_broken_release_is_refuted_through_the_path_a_run_uses(family, spy_release):
    module, name, mech, _ = FAMILIES[family]
    honest = _audit(mech)
    assert not honest.violated, honest
    calls = spy_release(module, name, change=_weaker)
    broken = _audit(mech)
    assert calls and broken.epsilon_claimed == pytest.approx(1.0, rel=1e-5)
    assert broken.violated, broken
