"""How far PGC-A3C's gradients lie beyond the L2 clip, as a private trial learns (issue 42).

    PYTHONPATH=src python benchmarks/ldp_grad_norms.py [preset] [mechanism] [epsilon]

One trial of `tuned-ldp` (PrivUnit2, ε = 1, seed 0) learns for 8 blocks of 300 rounds; before
each block, 20 rounds of 3 agents' episodes at the current θ give the episode lengths and the
quantiles of ‖∇‖ (the gradient the mechanism clips to norm C). If ‖∇‖ ≫ C, the clip always
binds: every report is already C·∇/‖∇‖, and scaling it to norm C changes nothing.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from privrl.systems.pgc_a3c.algorithm import (
    JITTED_EPISODES,
    PGCA3C,
    PGCA3CConfig,
    trial_env_key,
)


def main(preset: str = "tuned-ldp", mechanism: str = "privunit", epsilon: str = "1") -> None:
    cfg = PGCA3CConfig.from_preset(preset, mechanism=mechanism, epsilon=float(epsilon),
                                   submissions=30_000, noise="seeded")
    algo = PGCA3C(cfg)
    p = algo.config.parallel_agents
    states = jax.tree_util.tree_map(lambda x: x[None], algo.init(jax.random.PRNGKey(0)))
    learn = jax.jit(lambda s: algo.run_rounds(s, 300))
    print(f"clip C = {algo.config.clip}, d = {algo.dim}")
    for _ in range(8):
        st = jax.tree_util.tree_map(lambda x: x[0], states)
        norms, lengths = [], []
        for r in range(20):
            plan = algo.agents_plan(st.submitted, jax.random.PRNGKey(1000 + r),
                                    trial_env_key(st), jnp.arange(p), jnp.ones(p, bool))
            traj = algo._one_trial(JITTED_EPISODES, st.agg.theta, plan)
            grads = np.asarray(algo.episode_grads(st.agg.theta, traj))
            norms += list(np.linalg.norm(grads, axis=1))
            lengths += list(np.asarray(traj.length))
        q = np.quantile(norms, [0.1, 0.5, 0.9])
        print(f"after {int(st.submitted):>5} submissions: median episode {np.median(lengths):6.1f}"
              f" steps, ‖∇‖ 10/50/90 % {q[0]:.2f} / {q[1]:.2f} / {q[2]:.2f}"
              f" ({q[0] / algo.config.clip:.0f}× C at the 10 % quantile)")
        states, _ = learn(states)


if __name__ == "__main__":
    main(*sys.argv[1:])
