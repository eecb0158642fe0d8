"""paper 004's settings as one program (`FedPG.for_settings`, `run_fedpg_settings`): each
setting's run is its own, bit for bit (curves, final parameters, releases, ledger, account),
while every trial of every setting shares one jitted round.

What could go wrong and is checked here: a trial given another setting's key, mechanism or
mixing matrix; a setting's rows recorded after its trials ended (a Laplace setting with a
privacy budget ends before the others); a ledger charged for another setting's releases.
"""

from dataclasses import replace

import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.systems.fedpg import local
from privrl.systems.fedpg.algorithm import FedPG, FedPGConfig
from privrl.systems.fedpg.reproduce import FedPGSweep, programs

TINY = FedPGConfig(agents=3, hidden=(4,), batch_min=2, batch_max=4, minibatch=2,
                   max_episode_steps=40, budget=60, trials=2, seed=7)
FIELDS = ("mean_return", "used_before", "batch", "inner_steps", "used", "z", "releases",
          "privacy_budget_spent")


def _equal_runs(settings: dict[str, FedPGConfig]) -> list[local.FedPGRun]:
    configs = [local.local_config(c.resolved()) for c in settings.values()]
    together = local.run_fedpg_settings(FedPG.for_settings(configs))
    for name, cfg, run in zip(settings, configs, together, strict=True):
        own = local.run_fedpg(cfg)
        for field in FIELDS:
            np.testing.assert_array_equal(getattr(run, field), getattr(own, field),
                                          err_msg=f"{name}: {field}")
        assert run.episodes_played == own.episodes_played and run.rounds_run == own.rounds_run
        assert run.ledger.summary() == own.ledger.summary(), name
        assert run.accounting == own.accounting, name
        assert local.privacy_record(run) == local.privacy_record(own), name
        assert run.program == {"settings": len(settings), "trials": 2 * len(settings)}
    return together


def test_cen_settings_in_one_program_equal_their_own_runs():
    """No mechanism, Gaussian (σ calibrated for ε = 20) and Laplace with a budget that ends
    its trials after 3 rounds, while the others run on."""
    runs = _equal_runs({
        "none": TINY,
        "gaussian": replace(TINY, mechanism="gaussian", epsilon=20.0, clip=1.0),
        "laplace": replace(TINY, mechanism="laplace", epsilon_per_report=1.0, clip=1.0,
                           epsilon_budget=3.0),
    })
    assert runs[2].releases.tolist() == [3, 3] and runs[2].privacy_budget_spent.all()
    assert runs[0].rounds_run > 3
    assert not np.array_equal(runs[0].z, runs[1].z)  # the mechanisms did differ


def test_dec_graphs_and_mechanisms_in_one_program_equal_their_own_runs():
    _equal_runs({
        "ring": replace(TINY, algorithm="dec", topology="ring"),
        "exponential-gaussian": replace(TINY, algorithm="dec", topology="exponential",
                                        mechanism="gaussian", noise_multiplier=2.0, clip=1.0),
    })


@pytest.mark.parametrize("other, field", [
    (dict(agents=4), "agents"),
    (dict(mechanism="privunit", epsilon=1.0, clip=1.0), "mechanism"),
    (dict(mechanism="laplace", epsilon=1.0, clip=1.0, secure_noise=True), "secure_noise"),
    (dict(noise="secret"), "noise"),
])
def test_settings_that_cannot_share_a_program_are_refused(other, field):
    with pytest.raises(ConfigError) as err:
        FedPG.for_settings([TINY, replace(TINY, **other)])
    assert err.value.field == field


def test_the_sweep_runs_as_three_programs():
    """FedPG-Cen's four settings, FedPG-Dec's six, the single agent (K = 1) alone; each alone
    with --per-setting."""
    sweep = FedPGSweep(trials=1, budget=60)
    configs = {n: local.local_config(c.resolved()) for n, c in sweep.settings().items()}
    names = list(configs)
    groups = programs(configs, names)
    assert groups == [
        ["cen", "cen-gaussian-eps10", "cen-gaussian-eps100", "cen-laplace-eps100"],
        ["dec-ring", "dec-exponential", "dec-random", "dec-ring-gaussian-eps10",
         "dec-ring-gaussian-eps100", "dec-ring-laplace-eps100"],
        ["single"]]
    assert programs(configs, names, one_program=False) == [[n] for n in names]
