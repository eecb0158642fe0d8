"""Learning: short FedPG-Cen and FedPG-Dec runs (paper preset, K = 10) improve the mean return
clearly over the initial policy (CartPole's near-random initial policy scores ≈ 22)."""

import numpy as np
import pytest

from privrl.systems.fedpg.algorithm import FedPGConfig
from privrl.systems.fedpg.local import final_return, run_fedpg


@pytest.mark.parametrize(
    "algorithm, topology, budget",
    # compiling costs more than optimization saves (benchmarks/log/32-suite.md)
    [pytest.param("cen", "ring", 1500, marks=pytest.mark.learning(xla_optimize=False)),
     # its execution dominates: XLA's full LLVM optimization pays (tests/conftest.py)
     pytest.param("dec", "exponential", 1500, marks=pytest.mark.learning(llvm_level=2))],
)
def test_short_runs_improve_clearly_over_the_initial_policy(algorithm, topology, budget):
    run = run_fedpg(FedPGConfig(algorithm=algorithm, topology=topology, trials=2,
                                budget=budget, seed=0))
    initial = np.nanmean(run.mean_return[:, :3], axis=1)  # the first rounds' batches
    final = final_return(run, tail=5)
    # Measured at these settings (seed 0; trials, and Dec's nodes, computed one at a time
    # since session 15): initial batches 21-24; final (last 5 rounds) 70 and 483 (Cen, compiled
    # without XLA's optimizations), 47 and 404 (Dec); a policy that does not learn stays at
    # ≈ 22 ± 1 (batches of ≈ 160 episodes).
    # The slow first trial is the torch-style initialization's near-uniform policy taking
    # longer to leave the random regime.
    assert np.all(initial < 40), initial
    assert np.all(final > 2 * initial), (initial, final)
    assert final.mean() > 3 * initial.mean(), (initial, final)
