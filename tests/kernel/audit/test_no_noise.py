"""An audit that adding no noise cannot fool (issue 53 item 11).

Fisher's discriminant alone (the audit's statistic before) weighs each direction by the
pseudo-inverse of the pooled covariance, which is zero where the output has no noise: a
plug-in that returns its input, and a Laplace that leaves the one coordinate the pair differs in
un-noised, both audited at ε = 0. With the single-coordinate and exact-equality statistics
both are refuted at every claimed ε tried, while an honest Laplace still keeps its claim.
Confidence 1 − 1e-6 (as tests/kernel/audit/test_audit.py): an honest mechanism fails by chance
with probability ≤ 1e-6. With 10⁴ held-out draws a deterministic release bounds ε at
log(10⁴/14.5) ≈ 6.5 at that confidence, so the largest claim tried is 5.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from privrl.audit import audit_mechanism
from privrl.main import main
from privrl.privacy.mechanisms import LaplaceMechanism, Mechanism, laplace_release
from privrl.privacy.report import Guarantee

CONF = 1 - 1e-6
N = 20_000
EPSILONS = (0.5, 1.0, 5.0)


@dataclass(frozen=True)
class NoNoise(Mechanism):
    """An attacker's plug-in: declares ε, returns its input."""

    epsilon: float
    name = "no-noise"

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee(epsilon=self.epsilon, delta=0.0, notion="ε-LDP", unit="report",
                         neighbouring="any two inputs")

    def release_params(self, dim: int) -> Any:
        return ()

    def release(self, params: Any, key: Any, x: Any) -> Any:
        return x

    def audit_pair(self, dim: int) -> tuple[Any, Any]:
        e1 = jnp.zeros((dim,), jnp.float32).at[0].set(2.0)
        return e1, -e1


@dataclass(frozen=True)
class OneCoordinateBare(LaplaceMechanism):
    """Laplace's release with coordinate 0 (the one the audit pair differs in) left un-noised."""

    name = "laplace-one-coordinate-bare"

    def release(self, params: Any, key: Any, x: Any) -> Any:
        noisy = laplace_release(params, key, x)
        clipped = laplace_release(params._replace(scale=params.scale * 0), key, x)
        return noisy.at[0].set(clipped[0])


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("make", [NoNoise, lambda e: OneCoordinateBare(e, 1.0)],
                         ids=["no-noise", "one-coordinate-bare"])
def test_a_mechanism_without_noise_is_refuted(make, eps):
    r = audit_mechanism(make(eps), key=jax.random.key(5), samples=N, confidence=CONF, dim=3)
    assert r.violated and r.epsilon_lower > 6.0, r


@pytest.mark.parametrize("eps", EPSILONS)
def test_an_honest_laplace_keeps_its_claim(eps):
    r = audit_mechanism(LaplaceMechanism(eps, 1.0), key=jax.random.key(5), samples=N,
                        confidence=CONF, dim=3)
    assert not r.violated and r.epsilon_lower > 0.5 * eps, r


FAKE = '''
import jax.numpy as jnp
from privrl.privacy import Guarantee, Mechanism


class Fake(Mechanism):
    name = "fake"

    def __init__(self, epsilon):
        self.epsilon = epsilon

    @property
    def guarantee(self):
        return Guarantee(epsilon=self.epsilon, delta=0.0, notion="ε-LDP", unit="report",
                         neighbouring="any two inputs")

    def release_params(self, dim):
        return ()

    def release(self, params, key, x):
        return x

    def audit_pair(self, dim):
        return jnp.ones((dim,)), -jnp.ones((dim,))


def fake(request):
    return Fake(request.epsilon)
'''


def test_audit_mechanism_command_refutes_a_plugin_that_returns_its_input(tmp_path):
    """The issue's command: `privrl audit mechanism --mechanism fake.py:fake`."""
    (tmp_path / "fake_no_noise.py").write_text(FAKE)
    out = tmp_path / "run"
    rc = main(["audit", "mechanism", "--mechanism", f"{tmp_path}/fake_no_noise.py:fake",
               "--epsilon", "1,5", "--samples", "20000", "--no-progress", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader((out / "audit.csv").open()))
    assert [r["violated"] for r in rows] == ["1", "1"], rows


def test_a_run_audits_a_plugin_first_and_refuses_a_false_declaration(tmp_path, load_example,
                                                                   fails_in_one_line):
    """Issue 53 item 4: the quick audit at the start of a run refutes the no-noise plug-in
    (one line, exit 2, nothing written); with audit_plugin off it is built unaudited."""
    from privrl.audit.quick import audited, quick_samples
    from privrl.config import ConfigError
    from privrl.privacy.user import MechanismRequest, user_mechanism
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig, make_mechanism

    (tmp_path / "fake_no_noise.py").write_text(FAKE)
    name = f"{tmp_path}/fake_no_noise.py:fake"
    fails_in_one_line("pgc-a3c", ["--mechanism", name, "--epsilon", "8", "--trials", "1"],
                      "quick audit")
    assert quick_samples(8.0, 35) > 2 * 40 * 2980  # enough to refute ε = 8 without noise
    cfg = PGCA3CConfig(mechanism=name, epsilon=3.0, submissions_per_agent=1).resolved()
    with pytest.raises(ConfigError, match="declares ε = 3 per release, but privrl's quick"):
        make_mechanism(cfg, 5)
    off = make_mechanism(replace(cfg, audit_plugin=False), 5)
    assert off.params()["quick_audit"] is None
    load_example("own_mechanism")
    honest = audited(user_mechanism("own_mechanism:duchi", MechanismRequest(2.0, 0.0, 1.0, 4)),
                     4, 1.0)
    assert 0 < honest.params()["quick_audit"]["epsilon_lower"] <= 2.0
