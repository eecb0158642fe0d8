"""A Grid-World run's saved networks played again (issue 39): what `privrl.load_policy` and
`privrl evaluate` give for FedRL and its baselines (dqn-/fcn-alpha, dqn-/fcn-full).

policy.npz holds each trial's networks end to end (privrl.policy.networks_policy); the run's
config.json holds its config, from which the learner is rebuilt here (its fields checked as the
CLI's are; nothing named in a file is imported) together with the run's own maps: the
generated ones from their seed, or the data set file the config names, split as the run split
them. The policy is the learner's own greedy play (`greedy`, the function its test evaluation
called) in its noise-free variant: FedRL's "test-clean" (both parties' Q outputs exchanged
without noise, so no privacy is claimed for them), a baseline's "greedy". A run's
summary.json reports that variant on the test maps; `evaluate` reproduces it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from privrl.config import ConfigError
from privrl.envs import gridworld as gw
from privrl.policy import run_config
from privrl.runfile import checked
from privrl.systems.fedrl.algorithm import FedRL, FedRLConfig, Splits, load_splits
from privrl.systems.fedrl.baselines import MODELS, BaselineConfig, make_baseline


def learner(run_dir: Path, description: dict[str, Any], theta: np.ndarray, path: Path
            ) -> tuple[Any, list[Any]]:
    """The run's learner rebuilt from its config.json, and each trial's params (as its
    `evaluate` takes them) cut from θ (trials, 1, d). A config that is not one a run writes,
    or networks that are not the learner's, is one RunFileError naming the file."""
    def build(name: str, fields: dict[str, Any]) -> Any:
        if name == "fedrl":
            return FedRL(FedRLConfig(**fields))
        if name in MODELS:
            return make_baseline(BaselineConfig(**fields))
        raise ValueError(f"{name!r} is not a Grid-World learner")

    algo = run_config(run_dir, description, "a Grid-World policy plays on the run's own maps, "
                      "which its config names", build)
    with checked(path):
        want = [(n, held, model.dim) for n, held, model in algo.policy_networks()]
        have = [(n["name"], n["held_by"], n["dim"]) for n in description["networks"]]
        if have != want:
            raise ValueError(f"the networks {have} are not {description['system']}'s {want} "
                             "(config.json)")
        cuts = [np.asarray(theta[:, 0, n["offset"]:n["offset"] + n["dim"]])
                for n in description["networks"]]
    params = [tuple(c[t] for c in cuts) if len(cuts) > 1 else cuts[0][t]
              for t in range(theta.shape[0])]
    return algo, params


def run_splits(algo: Any) -> Splits:
    """The run's maps, split as it split them (ConfigError("run_dir") if its maps file is
    gone or no longer splits)."""
    try:
        return load_splits(algo.config)
    except ConfigError as e:
        raise ConfigError("run_dir", f"the run's maps: {e}") from None


class GridPolicy:
    """One trial's networks playing together: `act((obs_alpha, obs_beta))`."""

    def __init__(self, run_dir: str | os.PathLike, description: dict[str, Any],
                 theta: np.ndarray, path: Path, trial: int = 0) -> None:
        if not isinstance(trial, int | np.integer) or not 0 <= trial < theta.shape[0]:
            raise ValueError(f"trial must be an integer in [0, {theta.shape[0]}), got {trial!r}")
        self.algo, params = learner(Path(run_dir), description, theta, path)
        self.description, self.trial, self.learner = description, int(trial), 0
        self.params = params[trial]
        self.env: str = description["env"]
        self.spec: gw.GridSpec = self.algo.spec
        self.num_actions = gw.NUM_JOINT_ACTIONS
        policy = self.algo.greedy(self.params, self.algo.noise_free)
        self._greedy = jax.jit(lambda oa, ob: policy(jax.random.key(0), oa, ob))

    def act(self, obs: Any, key: Any = None) -> np.ndarray:
        """The joint action (int32, 4·a_α + a_β: privrl.envs.gridworld.joint_action) for
        `obs` = (α's window history (H, va, va), β's (H, vb, vb)), what the environment hands
        the two parties at a step (GridState.obs_alpha, obs_beta), or for batches of them
        (B, ...): 0-d for one, (B,) for a batch. Greedy only: `key` must be None."""
        if key is not None:
            raise ValueError(f"{self.description['system']}'s networks play greedily (the run's "
                             "noise-free test evaluation); act takes no key")
        oa, ob = (np.asarray(o, np.float32) for o in obs)
        s = self.spec
        one = (s.history, s.alpha_view, s.alpha_view), (s.history, s.beta_view, s.beta_view)
        single = (oa.shape, ob.shape) == one
        batch = (oa.shape[1:], ob.shape[1:]) == one and oa.shape[0] == ob.shape[0]
        if not (single or batch):
            raise ValueError(f"observations of shapes {oa.shape} and {ob.shape}; this policy "
                             f"takes {one[0]} and {one[1]}, or batches of them")
        a = np.asarray(self._greedy(oa[None], ob[None]) if single else self._greedy(oa, ob),
                       np.int32)
        return a[0] if single else a


def load(run_dir: str | os.PathLike, description: dict[str, Any], theta: np.ndarray,
         path: Path, trial: int = 0) -> GridPolicy:
    """What privrl.load_policy gives for a Grid-World run (privrl.policy.register_player)."""
    return GridPolicy(run_dir, description, theta, path, trial)


def evaluate(run_dir: Path, description: dict[str, Any], theta: np.ndarray, path: Path,
                  trials: list[int], episodes: int | None, seed: int
                  ) -> tuple[str, int, np.ndarray, dict[str, Any]]:
    """Each trial's greedy noise-free play, one episode per test map of the run: all of them
    (`episodes` None: what summary.json reports) or `episodes` of them drawn with `seed`.
    Returns (what was played, the episode cap Tm, returns (trials, episodes), {"success":
    (trials, episodes) bool})."""
    algo, params = learner(run_dir, description, theta, path)
    splits = run_splits(algo)
    maps = splits.test
    if episodes is not None:
        if episodes > maps.count:
            raise ConfigError("episodes", f"the run has {maps.count} test maps (one episode "
                              f"each), got {episodes}")
        maps = maps.take(np.sort(np.random.default_rng(seed).choice(
            maps.count, episodes, replace=False)))
    play = jax.jit(lambda p: algo.evaluate(p, maps, jax.random.key(seed), algo.noise_free))
    results = [play(params[t]) for t in trials]
    success = np.stack([np.asarray(r.success) for r in results])
    returns = np.stack([np.asarray(r.total_reward, np.float64) for r in results])
    what = (f"{description['env']}: {maps.count} test map(s) of the run "
            f"({splits.info['source']}), {algo.noise_free} play")
    return what, algo.spec.horizon, returns, {"success": success}
