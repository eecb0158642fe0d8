"""Learning: short FedPG-Cen and FedPG-Dec runs (paper preset, K = 10) improve the mean return
clearly over the initial policy (CartPole's near-random initial policy scores ≈ 22).

The runs take Adam's step 3e-3 over 1,000 episodes per agent: a short-run setting, not the
paper's (1e-3 over 5,000). At the paper's step, the 1,500-episode runs this test had passed at
its own seed only by luck (Dec missed the 3x mean at seeds 2 and 3); the larger step learns
within the shorter budget at every seed tried, at about the same CPU (an episode that lasts
longer costs more to simulate)."""

import numpy as np
import pytest

from privrl.systems.fedpg.algorithm import FedPGConfig
from privrl.systems.fedpg.local import final_return, run_fedpg


@pytest.mark.parametrize(
    "algorithm, topology",
    # Both compiled with XLA's full LLVM optimization (tests/conftest.py). Cen's unoptimized
    # program (the compile-speed preset since session 16) now runs longer than optimizing
    # costs: ≈ 1.5 CPU-s less optimized (benchmarks/log/41-fedpg.md; log 32-suite.md had
    # found the opposite before the preset). Dec's execution dominates.
    [pytest.param("cen", "ring", marks=pytest.mark.learning(llvm_level=2)),
     pytest.param("dec", "exponential", marks=pytest.mark.learning(llvm_level=2))],
)
def test_short_runs_improve_clearly_over_the_initial_policy(algorithm, topology):
    # the short-run setting (module docstring): Adam 3e-3 over 1,000 episodes per agent
    run = run_fedpg(FedPGConfig(algorithm=algorithm, topology=topology, trials=2,
                                budget=1000, learning_rate=3e-3, seed=0))
    initial = np.nanmean(run.mean_return[:, :3], axis=1)  # the first rounds' batches
    final = final_return(run, tail=5)
    # Measured at these settings (trials, and Dec's nodes, computed one at a time since
    # session 15): initial batches 19.8-25.9 at every seed; final (last 5 rounds) at seed 0
    # 435 and 228 (Cen), 70 and 454 (Dec); a policy that does not learn stays at ≈ 22 ± 1
    # (batches of ≈ 160 episodes). At seeds 0-7 the smallest per-trial final/initial is 4.4
    # (Cen, seed 5) and 3.2 (Dec, seed 0; ≥ 4.6 at seeds 1-9), the smallest mean ratio 8.0
    # (Cen, seed 1) and 7.1 (Dec, seed 3) (log 41-fedpg-seeds.md). The slow trial is the
    # torch-style initialization's near-uniform policy taking longer to leave the random regime.
    assert np.all(initial < 40), initial
    assert np.all(final > 2 * initial), (initial, final)
    assert final.mean() > 3 * initial.mean(), (initial, final)
