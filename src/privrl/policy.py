"""A run's trained policy: written into its run directory, loaded back without running code.

Every run writes `policy.npz`, a privrl run file (privrl.runfile: numeric arrays and a JSON
header, read with `allow_pickle=False`, bounded, no symbolic link followed). It holds each
trial's final flat parameters θ, shape (trials, learners, d) (learners: FedPG-Dec's nodes, one
elsewhere), and the model's description: its architecture and sizes, its activation, the
observation and action spaces and the environment it was trained on. `load_policy` rebuilds
the network from that description alone; a description, a shape or a dtype that does not
match is one RunFileError naming the file, and nothing from the file is ever imported or
executed (a user's own network is rebuilt from the module the caller passes, never from a
name in the file).

FedRL (Grid-World, Text2Action) and its baselines write the same file with `kind: networks`
(`networks_policy`): θ is each trial's networks end to end, and the description lists each
network's slice, the parties holding it and its module's settings. Those networks act
together on the system's own episodes (window histories, texts), not as one network on a
task's observation. A system that can play them together registers
its player (`register_player`; the kernel imports no system): Grid-World's FedRL and baselines
(privrl.systems.fedrl.played: `load_policy` gives a GridPolicy, whose `act` takes both parties'
observations; `privrl evaluate` plays the run's own test maps) and Text2Action's
(privrl.systems.fedrl_text.played: `privrl evaluate --data DIR` tags each fold's test texts of
the corpus; `load_policy(run_dir, trial, data=DIR)` gives a TextPolicy, whose `act` tags raw
texts with the trial's fold's vocabulary); `read_saved` reads any.

`Policy.act(obs, key=None)`: the greedy action (argmax of the logits or Q-values) without a
key; with one, a sample of the policy (categorical over the logits; ε-greedy for a Q-network,
at its final exploration rate). A continuous-action policy (head "gaussian", a Box action
space: privrl.nets.heads.Gaussian) acts with its squashed mean, or a clipped Gaussian sample,
as float32 vectors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.config import MAX_CONFIG_BYTES, ConfigError
from privrl.players import PLAYERS, register_player
from privrl.runfile import checked, opened, read, write

if TYPE_CHECKING:
    from privrl.envs.task import Task
    from privrl.nets.flat import FlatModel

__all__ = ["FILE", "HEADS", "KIND", "NETWORKS", "NETWORKS_NOTE", "PLAYERS", "Policy",
           "SavedPolicy", "data_argument", "load_policy", "networks_policy", "one_network",
           "player", "read_saved", "register_player", "run_config", "saved_policy"]

FILE = "policy.npz"
KIND = "policy"
# What the network returns for one observation, and how an action is read from it.
HEADS = ("logits", "logits,value", "q", "gaussian", "gaussian,value")
MAX_TRIALS = 1 << 16
NETWORKS = "networks"  # the description's `kind` for FedRL's networks (`networks_policy`)
MAX_NETWORKS = 8
CONFIG = "config.json"  # a run's config, from which a player rebuilds its learner
# What a file of FedRL's networks reveals: each party's own state, beyond any accounting.
NETWORKS_NOTE = ("each network is its holder's own state, written here by a simulation that "
                 "holds every party; privacy.json accounts for the releases on the channel, "
                 "not for these networks: share a party's network only as that party would")


@dataclass
class SavedPolicy:
    """What a run's policy.npz holds: each trial's final θ and the model's description."""

    theta: np.ndarray  # (trials, learners, d) float32
    description: dict[str, Any] = field(default_factory=dict)

    def write(self, path: Path) -> None:
        write(path, KIND, {"description": self.description,
                           "theta": np.asarray(self.theta, np.float32)})


def saved_policy(system: str, model: FlatModel, task: Task, head: str, theta: Any,
                 max_episode_steps: int | None, **sampling: Any) -> SavedPolicy:
    """A run's SavedPolicy: `theta` (trials, d) or (trials, learners, d) from `model` on
    `task`; `head` one of HEADS (on a Box task, "logits" are a Gaussian's (μ, log σ): recorded
    as "gaussian"); `sampling` how a sampled action is drawn beyond the head's default (a
    Q-network's `epsilon`)."""
    from privrl.nets.flat import describe_model

    if head not in HEADS:
        raise ValueError(f"head must be one of {HEADS}, got {head!r}")
    theta = np.asarray(theta, np.float32)
    if theta.ndim == 2:
        theta = theta[:, None]
    if task.head.continuous:
        head = head.replace("logits", "gaussian")
    if head.startswith("gaussian"):  # a Box: the network's 2d outputs are (mean, log-std)
        box = task.head
        space: dict[str, Any] = {"kind": "box", "low": list(box.low), "high": list(box.high)}
        outputs, greedy, sample = box.outputs, "mean", "gaussian, clipped to the box"
    else:
        space = {"kind": "discrete", "n": task.num_actions}
        outputs, greedy = task.num_actions, "argmax"
        sample = "epsilon-greedy" if head == "q" else "categorical"
    return SavedPolicy(theta, {
        "system": system,
        "env": task.name,
        "max_episode_steps": max_episode_steps,
        "observation_space": {"shape": [task.obs_dim]},
        "action_space": space,
        "model": describe_model(model, outputs),
        "head": head,
        "greedy": greedy,
        "sample": sample,
        **sampling,
        "trials": int(theta.shape[0]),
        "learners": int(theta.shape[1]),
    })


def networks_policy(system: str, env: str, acts_on: str,
                    networks: list[tuple[str, list[str], FlatModel, Any]],
                    **info: Any) -> SavedPolicy:
    """A SavedPolicy of networks that act together on `system`'s own episodes (`acts_on`
    says on what), not on a task's observation: `networks` (name, the parties holding it, its
    FlatModel, θ (trials, d)); θ of a trial is theirs end to end, in this order. `info`: more
    JSON fields (what each trial is, a note on what the file reveals)."""
    import jax

    thetas = [np.asarray(theta, np.float32) for *_, theta in networks]
    listed, offset = [], 0
    for (name, held_by, model, _), theta in zip(networks, thetas, strict=True):
        m = model.module
        settings = {f: getattr(m, f) for f in m.__dataclass_fields__
                    if f not in ("parent", "name") and isinstance(
                        getattr(m, f), int | float | str | bool | tuple)}
        listed.append({
            "name": name, "held_by": list(held_by), "offset": offset, "dim": int(theta.shape[1]),
            "module": f"{type(m).__module__}.{type(m).__qualname__}", "settings": settings,
            "input_shapes": [list(x.shape) for x in jax.tree_util.tree_leaves(model._example)]})
        offset += int(theta.shape[1])
    theta = np.concatenate(thetas, axis=1)[:, None]
    return SavedPolicy(theta, {"system": system, "env": env, "kind": NETWORKS,
                               "acts_on": acts_on, "networks": listed, **info,
                               "trials": int(theta.shape[0]), "learners": 1})


class Policy:
    """One trained policy (one trial's, one learner's θ): `act(obs, key=None)`."""

    def __init__(self, description: dict[str, Any], theta: np.ndarray, model: FlatModel,
                 trial: int = 0, learner: int = 0) -> None:
        import jax
        import jax.numpy as jnp

        self.description, self.trial, self.learner = description, trial, learner
        self.theta = jnp.asarray(theta)
        self.model = model
        self.obs_dim = int(description["observation_space"]["shape"][0])
        self.action_head = action_head(description)
        self.num_actions: int | None = getattr(self.action_head, "n", None)  # None: a Box
        self.env: str = description["env"]
        self.max_episode_steps: int | None = description.get("max_episode_steps")
        head, eps = description["head"], float(description.get("epsilon", 0.0))

        def scores(theta: Any, obs: Any) -> Any:
            out = model.apply(theta, obs)
            return out[0] if head.endswith(",value") else out

        def greedy(theta: Any, obs: Any) -> Any:
            out = jax.vmap(lambda o: scores(theta, o))(obs)
            if head.startswith("gaussian"):
                return self.action_head.greedy(out)
            return jnp.argmax(out, -1).astype(jnp.int32)

        def sample(theta: Any, key: Any, obs: Any) -> Any:
            out = jax.vmap(lambda o: scores(theta, o))(obs)
            if head.startswith("gaussian"):
                return self.action_head.sample(key, out)[0]
            if head != "q":
                return jax.random.categorical(key, out).astype(jnp.int32)
            k_explore, k_random = jax.random.split(key)
            explore = jax.random.uniform(k_explore, out.shape[:1]) < eps
            random = jax.random.randint(k_random, out.shape[:1], 0, out.shape[-1])
            return jnp.where(explore, random, jnp.argmax(out, -1)).astype(jnp.int32)

        self._greedy, self._sample = jax.jit(greedy), jax.jit(sample)

    def act(self, obs: Any, key: Any = None) -> np.ndarray:
        """The action for one observation (obs_dim,) or each of a batch (B, obs_dim): greedy
        (argmax) when `key` is None, else sampled with that JAX key (or integer seed).
        Returns int32 numpy (0-d for one observation: `int(policy.act(obs))` for a Gymnasium
        step); a continuous policy, float32 action vectors (d,) or (B, d)."""
        import jax

        x = np.asarray(obs, np.float32)
        one = x.ndim == 1
        if x.shape[-1:] != (self.obs_dim,) or x.ndim not in (1, 2):
            raise ValueError(f"observations of shape {x.shape}; this policy takes "
                             f"({self.obs_dim},) or (batch, {self.obs_dim})")
        batch = x[None] if one else x
        if key is None:
            a = self._greedy(self.theta, batch)
        else:  # a JAX key, or an integer seed
            key = jax.random.key(key) if isinstance(key, int | np.integer) else key
            a = self._sample(self.theta, key, batch)
        a = np.asarray(a)
        return a[0] if one else a

    def with_theta(self, sample: bool = False) -> Any:
        """(θ, key, obs (P, obs_dim)) -> actions (P,): this policy's network with any θ of
        its shape (the trials of one run share one compiled rollout)."""
        if sample:
            return self._sample
        return lambda theta, key, obs: self._greedy(theta, obs)


def load_policy(run_dir: str | os.PathLike, trial: int = 0, learner: int = 0,
                model: Any = None, data: str | os.PathLike | None = None) -> Any:
    """The trained policy of trial `trial` (and FedPG-Dec learner `learner`) of a run directory
    (a run of networks acting together: its system's player, `register_player`; Grid-World's:
    privrl.systems.fedrl.played.GridPolicy; Text2Action's: privrl.systems.fedrl_text.played.
    TextPolicy, whose `act` tags raw texts).

    `model`: your flax module, for a run trained with one (the file names it but never loads
    it); its parameter count must match (ConfigError on `model` otherwise). `data`: the corpus
    directory a Text2Action run was trained on (its networks read that fold's vocabulary),
    required for such a run and refused for any other (ConfigError on `data`). RunFileError
    (one line naming the file) for a missing, tampered or truncated policy file; ValueError
    for a trial or learner the run does not have.
    """
    description, theta, path = read_saved(run_dir)
    played = player(description)
    more = data_argument(played, description, data)
    if played is not None:
        if model is not None:
            raise ConfigError("model", f"{path} holds privrl's own networks of "
                              f"{description['system']}; a model is only for a run trained "
                              "with your own")
        if learner != 0:
            raise ValueError(f"learner must be an integer in [0, 1), got {learner!r}")
        return played.load(run_dir, description, theta, path, trial, **more)
    one_network(description, path)
    flat = _model_of(description, model, path)
    for name, value, n in (("trial", trial, theta.shape[0]), ("learner", learner,
                                                                theta.shape[1])):
        if not isinstance(value, int | np.integer) or not 0 <= value < n:
            raise ValueError(f"{name} must be an integer in [0, {n}), got {value!r}")
    return Policy(description, theta[trial, learner], flat, int(trial), int(learner))


def read_saved(run_dir: str | os.PathLike) -> tuple[dict[str, Any], np.ndarray, Path]:
    """A run directory's policy.npz checked, nothing built: (description, θ (trials,
    learners, d), the file's path). RunFileError (one line naming the file) otherwise."""
    path = Path(run_dir) / FILE
    state = read(path, KIND)
    with checked(path):
        if not isinstance(state, dict) or set(state) != {"description", "theta"}:
            raise ValueError("expected a description and theta")
        description, theta = state["description"], state["theta"]
        networks = isinstance(description, dict) and description.get("kind") == NETWORKS
        description = (_checked_networks if networks else _checked_description)(description)
        if not isinstance(theta, np.ndarray) or theta.dtype != np.float32 or theta.ndim != 3:
            raise ValueError("theta must be a float32 array (trials, learners, d)")
        dim = (sum(n["dim"] for n in description["networks"]) if networks
               else description["model"]["dim"])
        want = (description["trials"], description["learners"], dim)
        if theta.shape != want:
            raise ValueError(f"theta has shape {theta.shape}, the description says {want}")
    return description, theta, path


def data_argument(played: Any, description: dict[str, Any],
                  data: str | os.PathLike | None) -> dict[str, Path]:
    """`data` as a player takes it ({"data": the directory}, or {} for a player, or a
    single network, that takes none): ConfigError("data") in one line if it is not a
    directory, if the policy's player takes none (its module's `DATA` says what it takes),
    or if it takes one and `data` is None."""
    if data is not None and not Path(data).is_dir():
        raise ConfigError("data", f"{data} is not a directory")
    takes = getattr(played, "DATA", None)
    if data is not None and takes is None:
        raise ConfigError("data", f"{description['system']}'s policy plays without a data "
                          "directory (only a Text2Action run's takes its corpus); leave it out")
    if data is None and takes is not None:
        raise ConfigError("data", f"{description['system']}'s networks need {takes}; give it")
    return {} if data is None else {"data": Path(data)}


def run_config(run_dir: Path, description: dict[str, Any], why: str,
               build: Callable[[str, dict[str, Any]], Any]) -> Any:
    """A player's learner (or config) rebuilt from the run's config.json by `build(algorithm,
    fields)`, which checks the fields as the CLI does (nothing named in the file is imported):
    ConfigError("run_dir") if the file is missing (`why` says what it is needed for); a file
    that is not one a run writes, of another algorithm than the policy's, or fields `build`
    refuses, one RunFileError naming it."""
    cfg_path = run_dir / CONFIG
    if cfg_path.is_symlink() or not cfg_path.is_file():
        raise ConfigError("run_dir", f"{cfg_path} is missing: {why}")
    if cfg_path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError("run_dir", f"{cfg_path} is larger than a run's config")
    with opened(cfg_path, MAX_CONFIG_BYTES) as (f, _), checked(cfg_path):  # no link followed
        doc = json.loads(f.read().decode("utf-8"), parse_constant=_no_constant)
        name, fields = doc["algorithm"], doc["config"]
        if name != description["system"] or not isinstance(fields, dict):
            raise ValueError(f"the algorithm is {name!r}, the policy's {description['system']!r}")
        return build(name, fields)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a run's config.json writes none)")


def player(description: dict[str, Any]) -> Any:
    """The module that plays a file's networks (`register_player`), or None (one network, or
    networks nothing plays)."""
    if description.get("kind") != NETWORKS:
        return None
    for prefix, played in PLAYERS.items():
        if description["env"].startswith(prefix):
            return played()
    return None


def one_network(description: dict[str, Any], path: Path) -> None:
    """ConfigError("run_dir") in one line, saying why, for a file of networks that act
    together on a system's own episodes (`networks_policy`) and that no system plays
    (`player`: none registered for its environment)."""
    if description.get("kind") != NETWORKS or player(description) is not None:
        return
    held = "; ".join(f"{n['name']} (held by {' and '.join(n['held_by'])})"
                     for n in description["networks"])
    raise ConfigError("run_dir", f"{path} holds {description['system']}'s networks {held}, "
                      f"which act together on {description['acts_on']}, not as one network "
                      "on a task's observations, and no system's player of them is "
                      "registered (privrl.load_policy and privrl evaluate load every system "
                      "that has one); read the file with privrl.policy.read_saved")


def _checked_networks(d: Any) -> dict[str, Any]:
    """A `networks_policy` description's fields, each of the type and range one writes
    (ValueError otherwise): the networks' slices tile θ from 0."""
    def count(v: Any, lo: int, hi: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi

    for key in ("system", "env", "acts_on"):
        if not isinstance(d.get(key), str):
            raise ValueError(f"description field {key!r} is missing or not a str")
    if not count(d.get("trials"), 1, MAX_TRIALS) or d.get("learners") != 1:
        raise ValueError("trials out of range or learners not 1")
    nets = d.get("networks")
    if not isinstance(nets, list) or not 1 <= len(nets) <= MAX_NETWORKS:
        raise ValueError("the networks are missing or too many")
    offset = 0
    for n in nets:
        if not (isinstance(n, dict) and isinstance(n.get("name"), str)
                and isinstance(n.get("module"), str) and isinstance(n.get("held_by"), list)
                and n["held_by"] and all(isinstance(h, str) for h in n["held_by"])
                and n.get("offset") == offset and count(n.get("dim"), 1, 1 << 28)):
            raise ValueError(f"network {n!r:.80} is malformed")
        offset += n["dim"]
    return d


def _model_of(description: dict[str, Any], model: Any, path: Path) -> FlatModel:
    """The network the description names (built here from its sizes), or the caller's
    `model` for a user's module: checked against the description's sizes either way."""
    import jax.numpy as jnp

    from privrl.nets.flat import FlatModel, model_from_description

    desc = description["model"]
    if desc["architecture"] != "module":
        with checked(path):
            flat = model_from_description(desc)
            if flat.dim != desc["dim"]:
                raise ValueError(f"the network has {flat.dim} parameters, the description "
                                 f"says {desc['dim']}")
        return flat
    if model is None:
        raise ConfigError("model", f"{path} holds your own network ({desc['module']}), which "
                          "is never imported from the file; pass it (Python: load_policy("
                          "run_dir, model=YourModule()); privrl evaluate: --model "
                          "module:YourModule)")
    try:
        flat = FlatModel(model, jnp.zeros((desc["obs_dim"],), jnp.float32))
    except Exception as e:
        raise ConfigError("model", f"{type(model).__name__} fails on one observation of "
                          f"shape ({desc['obs_dim']},): {type(e).__name__}: {e}") from None
    if flat.dim != desc["dim"]:
        raise ConfigError("model", f"{type(model).__name__} has {flat.dim} parameters; the "
                          f"policy in {path} has {desc['dim']}")
    return flat


def _checked_description(d: Any) -> dict[str, Any]:
    """The description's fields, each of the type and range a privrl run writes (anything
    else: ValueError, turned into RunFileError by the caller)."""
    from privrl.nets.flat import check_description

    if not isinstance(d, dict):
        raise ValueError("the description is not a mapping")
    for key, kind in (("system", str), ("env", str), ("head", str), ("trials", int),
                      ("learners", int), ("model", dict), ("observation_space", dict),
                      ("action_space", dict)):
        if not isinstance(d.get(key), kind) or isinstance(d.get(key), bool):
            raise ValueError(f"description field {key!r} is missing or not a {kind.__name__}")
    if d["head"] not in HEADS:
        raise ValueError(f"unknown head {d['head']!r}")
    for key in ("trials", "learners"):
        if not 1 <= d[key] <= MAX_TRIALS:
            raise ValueError(f"{key} {d[key]} is out of range")
    steps = d.get("max_episode_steps")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool)
                              or not 1 <= steps <= 10**7):
        raise ValueError(f"max_episode_steps {steps!r} is out of range")
    eps = d.get("epsilon", 0.0)
    if not isinstance(eps, int | float) or isinstance(eps, bool) or not 0.0 <= eps <= 1.0:
        raise ValueError(f"epsilon {eps!r} is not a probability")
    model = check_description(d["model"])
    obs, act = d["observation_space"], d["action_space"]
    if obs.get("shape") != [model["obs_dim"]]:
        raise ValueError(f"observation shape {obs.get('shape')!r} does not match the model")
    if d["head"].startswith("gaussian"):
        low, high = act.get("low"), act.get("high")
        ok = (act.get("kind") == "box" and isinstance(low, list) and isinstance(high, list)
              and 1 <= len(low) == len(high) and 2 * len(low) == model["num_actions"]
              and all(isinstance(v, int | float) and not isinstance(v, bool)
                      and np.isfinite(v) for v in low + high)
              and all(lo < hi for lo, hi in zip(low, high, strict=True)))
    else:
        ok = act.get("kind") == "discrete" and act.get("n") == model["num_actions"]
    if not ok:
        raise ValueError(f"action space {act!r:.120} does not match the model")
    return d


def action_head(description: dict[str, Any]) -> Any:
    """The policy head (privrl.nets.heads) a checked description's action space takes."""
    from privrl.nets.heads import Categorical, Gaussian

    act = description["action_space"]
    if act["kind"] == "box":
        return Gaussian(tuple(float(v) for v in act["low"]), tuple(float(v) for v in act["high"]))
    return Categorical(int(act["n"]))
