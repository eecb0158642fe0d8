"""Learning: short FedPG-Cen and FedPG-Dec runs (paper preset, K = 10) improve the mean return
clearly over the initial policy (CartPole's near-random initial policy scores ≈ 22)."""

import numpy as np
import pytest

from privrl.systems.fedpg.algorithm import FedPGConfig
from privrl.systems.fedpg.local import final_return, run_fedpg


@pytest.mark.parametrize(
    "algorithm, topology, budget",
    # Both compiled with XLA's full LLVM optimization (tests/conftest.py). Cen's unoptimized
    # program (the compile-speed preset since session 16) now runs longer than optimizing
    # costs: ≈ 1.5 CPU-s less optimized (benchmarks/log/41-fedpg.md; log 32-suite.md had
    # found the opposite before the preset). Dec's execution dominates.
    [pytest.param("cen", "ring", 1500, marks=pytest.mark.learning(llvm_level=2)),
     pytest.param("dec", "exponential", 1500, marks=pytest.mark.learning(llvm_level=2))],
)
def test_short_runs_improve_clearly_over_the_initial_policy(algorithm, topology, budget):
    run = run_fedpg(FedPGConfig(algorithm=algorithm, topology=topology, trials=2,
                                budget=budget, seed=0))
    initial = np.nanmean(run.mean_return[:, :3], axis=1)  # the first rounds' batches
    final = final_return(run, tail=5)
    # Measured at these settings (seed 0; trials, and Dec's nodes, computed one at a time
    # since session 15): initial batches 21-24; final (last 5 rounds) 71 and 417 (Cen), 47 and
    # 328 (Dec); a policy that does not learn stays at ≈ 22 ± 1 (batches of ≈ 160 episodes).
    # The budget is not shortened: at 1,200 episodes Cen fails at 2 of seeds 0-3, Dec at all
    # four, and at 1,500 Dec already fails the 3x mean at seeds 2 and 3 (log 41-fedpg.md).
    # The slow first trial is the torch-style initialization's near-uniform policy taking
    # longer to leave the random regime.
    assert np.all(initial < 40), initial
    assert np.all(final > 2 * initial), (initial, final)
    assert final.mean() > 3 * initial.mean(), (initial, final)
