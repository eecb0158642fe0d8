"""One FedPG-Cen round's aggregate under Byzantine agents and a robust rule, against the honest
gradient: where a full K = 1,000 learning run does not fit the time limit, this shows whether a
rule can learn at all, from whether its μ_t points along the gradient.

    python benchmarks/byzantine_alignment.py [--agents 1000] [--byzantine 300] \
        [--attack normalized] [--mechanism privunit] [--epsilon-per-report 4] [--rounds 5] \
        [--policy RUN_DIR/policy.npz:TRIAL] [--bypass-mechanism --attack-norm X]

Per rule (none, median, trimmed-mean, fedpg-br) and round: the server's μ_t, computed by the run's
own code (`CenRound.plan` → `episodes` → `mu`: the attack, the mechanism and the rule), and the
honest agents' mean estimate g over as many other rounds (no attack, no mechanism; independent
of the compared rounds' noise). fedpg-br's σ scale L̄ is set to the agents' mean episode length
at θ, as the server's own episodes would give it after round 0. Printed: cos(μ_t, g) per round
and its mean. A rule whose μ_t has cos < 0 steps against the gradient on average and cannot
learn from θ; cos > 0 is necessary, not sufficient. Every rule sees the same episodes and
mechanism keys (the same round keys).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privrl.systems.fedpg.algorithm import FedPGConfig, settings_algorithm
from privrl.systems.fedpg.byzantine import attack


def alignment(cfg: FedPGConfig, theta: np.ndarray | None, rounds: int, seed: int
              ) -> tuple[list[float], list[float], float]:
    """cos(μ_t, g) over `rounds` rounds at θ (None: the initial policy), g the honest agents'
    mean estimate over `rounds` other rounds (independent of the rounds compared with it),
    then that of the rounds' summed μ_t (less of the mechanism's noise); cos(E[μ_t of none],
    g) per round (the clipped inputs' mean); and L̄, their mean episode length (the filter's
    σ scale: the server's own episodes at θ have the same law)."""
    algo = settings_algorithm([cfg.resolved()])
    state = algo.init(jax.random.key(seed))
    if algo.setting_mechanisms is not None:  # the setting as data, as a run's
        state = state._replace(setting=jax.tree_util.tree_map(lambda a: a[0],
                                                              algo.setting_data([0])))
    if theta is not None:
        state = state._replace(gossip=state.gossip._replace(x=jnp.asarray(theta)[None]))
    cen = algo.variant

    @jax.jit
    def one(state: Any, key: jax.Array) -> tuple[jax.Array, ...]:
        plan = cen.plan(state, key, jnp.bool_(True))
        ep = cen.episodes(algo.source, plan)
        mu = cen.mu(state, plan, ep)[0][0]
        length = jnp.sum(ep.length * ep.live) / jnp.maximum(jnp.sum(ep.live), 1)
        grads, byz = algo.gradients(plan.thetas, ep), cen.byzantine_lanes(plan)
        # the mean of what enters the mechanism after the L2 clip: E[μ_t] of `none` under an
        # unbiased mechanism (PrivUnit, Gaussian), free of its noise
        sent = attack(algo.config, grads, byz, plan.batch, cen.length_scale(state),
                      jax.random.fold_in(plan.key, 0xA77))
        norms = jnp.linalg.norm(sent, axis=1, keepdims=True)
        clipped = sent * jnp.minimum(1.0, algo.config.clip / jnp.maximum(norms, 1e-12))
        return mu, grads, byz, length, jnp.mean(clipped, axis=0)

    keys = jax.random.split(jax.random.key(seed), 2 * rounds)
    ref, lengths = [], []
    for key in keys[rounds:]:
        _, grads, byz, length, _ = (np.asarray(a) for a in one(state, key))
        ref.append(grads[~byz])
        lengths.append(float(length))
    g = np.concatenate(ref).mean(axis=0)
    if state.length is not None:
        state = state._replace(length=jnp.float32(np.mean(lengths)))
    cos = lambda v: float(v @ g / (np.linalg.norm(v) * np.linalg.norm(g) + 1e-12))  # noqa: E731
    out, expected, total = [], [], 0.0
    for key in keys[:rounds]:
        mu, *_, clipped = (np.asarray(a) for a in one(state, key))
        out.append(cos(mu))
        expected.append(cos(clipped))
        total = total + mu
    return [*out, cos(total)], expected, float(np.mean(lengths))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--byzantine", type=int, default=300)
    ap.add_argument("--attack", default="normalized")
    ap.add_argument("--mechanism", default="privunit")
    ap.add_argument("--epsilon-per-report", type=float, default=4.0)
    ap.add_argument("--rules", default="none,median,trimmed-mean,fedpg-br")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", help="NPZ:TRIAL, a run's policy.npz and the trial's θ to use")
    ap.add_argument("--bypass-mechanism", action="store_true",
                    help="the attackers' reports are their messages (docs/byzantine.md)")
    ap.add_argument("--attack-norm", type=float, help="rescale each attacker's message")
    args = ap.parse_args()
    theta = None
    if args.policy:
        path, trial = args.policy.rsplit(":", 1)
        theta = np.load(path)["a0"][int(trial), 0]
    base = FedPGConfig(agents=args.agents, byzantine=args.byzantine, attack=args.attack,
                       mechanism=args.mechanism, clip=1.0,
                       epsilon=None if args.mechanism == "none" else args.epsilon_per_report,
                       byzantine_alpha=0.3 if args.byzantine / args.agents >= 0.3 else 0.4,
                       bypass_mechanism=args.bypass_mechanism, attack_norm=args.attack_norm,
                       seed=args.seed)
    for rule in args.rules.split(","):
        cos, expected, length = alignment(replace(base, robust=rule), theta, args.rounds,
                                          args.seed)
        print(f"{rule:13s} cos(μ_t, g) mean {np.mean(cos[:-1]):+.3f}, of the summed μ_t "
              f"{cos[-1]:+.3f}; per round " + " ".join(f"{c:+.3f}" for c in cos[:-1])
              + f"  (mean episode length {length:.0f})", flush=True)
        if rule == "none" and args.mechanism != "none" and not args.bypass_mechanism:
            print(f"{'none, E[μ_t]':13s} cos(mean clipped input, g) mean {np.mean(expected):+.3f}"
                  "  per round " + " ".join(f"{c:+.3f}" for c in expected), flush=True)


if __name__ == "__main__":
    main()
