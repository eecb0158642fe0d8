"""Several settings as one program (`run_pgc_a3c_settings`): each setting's results are its own
run's, bit for bit, and each keeps its own ledger.

Equal floats need both programs to compile a trial's arithmetic alike: XLA CPU compiles it
differently by batch size and context, so every piece of a round is computed a fixed number of
trials at a time (the setting's own trials per device), behind optimization barriers
(`compute.sharding.in_blocks`). 3 trials: small batches, where this used to fail (θ differed in
its last bits); benchmarks/log/01-*.md has the check at the paper's sizes.
"""

import math
from dataclasses import replace

import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig, one_program_field
from privrl.systems.pgc_a3c.local import privacy_record, run_pgc_a3c, run_pgc_a3c_settings

# The paper preset's settings: |B| = 1 and 100, PRS's d̂ = 1 (ε = 2) and 4 (ε = 10, padded
# to), the non-private baseline; a low target, so that trials retire at different chunks.
SETTINGS = [("none", None), ("laplace", 1.0), ("prs", 2.0), ("prs", 10.0)]


def configs(**kw):
    return [PGCA3CConfig(mechanism=m, epsilon=e, trials=3, submissions=450, seed=3,
                         target_score=12.0, **kw).resolved() for m, e in SETTINGS]


def test_each_setting_of_one_program_equals_its_own_run():
    together = run_pgc_a3c_settings(configs(), devices=1, retire_on_success=True,
                                    chunk_rounds=10)
    retired_somewhere = False
    for cfg, out in zip(configs(), together, strict=True):
        alone = run_pgc_a3c(cfg, devices=1, retire_on_success=True, chunk_rounds=10)
        np.testing.assert_array_equal(out.scores, alone.scores)
        np.testing.assert_array_equal(out.theta, alone.theta)
        np.testing.assert_array_equal(out.submitted, alone.submitted)
        assert out.ledger.summary() == alone.ledger.summary()
        assert privacy_record(out) == privacy_record(alone)
        assert out.mechanism == alone.mechanism
        assert out.program == {"settings": 4, "trials": 12,
                               "episodes": sum(int(o.submitted.sum()) for o in together)}
        retired_somewhere |= bool((out.submitted > 0).all() and (out.submitted < 450).any())
    assert retired_somewhere  # the retirement checks were exercised
    eps = [o.ledger.summary()["per_agent_epsilon"]["max"] for o in together[1:]]
    assert eps == [1.0, 2.0, 10.0] and math.isinf(together[0].config.epsilon)


def test_settings_that_differ_in_more_than_numbers_are_refused():
    base = configs()
    assert one_program_field(base) is None
    assert one_program_field([*base, PGCA3CConfig(gamma=0.9, trials=3, submissions=450,
                                                  seed=3, target_score=12.0).resolved()]) \
        == "gamma"
    assert one_program_field([*base, PGCA3CConfig(mechanism="privunit", epsilon=1.0, trials=3,
                                                  submissions=450, seed=3,
                                                  target_score=12.0).resolved()]) \
        == "mechanism"
    secret = PGCA3CConfig(mechanism="laplace", epsilon=2.0, noise="secret", trials=3,
                          submissions=450, seed=3, target_score=12.0).resolved()
    assert one_program_field([*base, secret]) == "noise"  # seeded and secret private runs
    with pytest.raises(ConfigError) as e:
        PGCA3C.for_settings([base[0], replace(base[1], seed=4)])
    assert e.value.field == "seed"


def test_a_run_that_could_join_a_program_releases_as_the_program_does():
    """A Laplace setting alone and beside the non-private one (the paper sweep's pair): the same
    reports, bit for bit, for one block of 10 trials × 9 agents. Computed alone through its
    own `LaplaceMechanism`, XLA CPU contracted `clipped + scale·noise` into a multiply-add
    differently from the program's select between the two (2,666 of 10,080 values an ulp
    apart with Threefry unrolled): so a run that could join a program computes through the
    program's releases (`settings_algorithm`: its setting as data, `privatize_setting`)."""
    import jax

    from privrl.compute.sharding import in_blocks
    from privrl.systems.pgc_a3c.algorithm import settings_algorithm

    lap = PGCA3CConfig(mechanism="laplace", epsilon=5.0).resolved()
    none = PGCA3CConfig(mechanism="none").resolved()
    alone, program = settings_algorithm([lap]), settings_algorithm([none, lap])
    grads = 0.02 * jax.random.normal(jax.random.key(1), (10, 9, alone.dim))
    keys = jax.random.split(jax.random.key(2), 10)

    def reports(algo, index):
        setting = algo.setting_data([index] * 10)
        release = jax.vmap(lambda g, k, s: algo.privatize(g, k, None, s).value)
        return np.asarray(jax.jit(in_blocks(release, 10))(grads, keys, setting))

    np.testing.assert_array_equal(reports(alone, 0), reports(program, 1))
