"""Small Flax networks, and the flat-vector view of their parameters that mechanisms need."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.flatten_util import ravel_pytree

from privrl.choices import LOG_STDS
from privrl.nets.heads import StateFreeLogStd


class ActorCritic(nn.Module):
    """Paper 000's A3C network: shared ReLU layer θ(c), policy head θ(p), value head θ(v).

    No biases, so with 4 inputs, 16 hidden units and 2 actions d = 64 + 32 + 16 = 112.
    Kernels start Glorot-uniform, the default of the paper's TensorFlow 1.14 Dense layers.
    """

    hidden: int = 16
    num_actions: int = 2
    use_bias: bool = False
    # The policy layer's kernel starts at zero (its biases do anyway): every output starts at
    # 0 whatever the state (a Gaussian head's mean at its Box's centre; uniform logits).
    zero_policy: bool = False
    # False: no value head (no parameters for it; the value is 0 in every state): the policy
    # alone, for a report that carries only the policy's gradient (PGC-A3C's `critic` "none").
    value_head: bool = True

    @nn.compact
    def __call__(self, obs: Array) -> tuple[Array, Array]:
        dense = lambda n, name, init=None: nn.Dense(  # noqa: E731
            n, use_bias=self.use_bias, kernel_init=init or nn.initializers.glorot_uniform(),
            name=name
        )
        h = nn.relu(dense(self.hidden, "common")(obs))
        logits = dense(self.num_actions, "policy",
                       nn.initializers.zeros if self.zero_policy else None)(h)
        if not self.value_head:
            return logits, jnp.zeros(logits.shape[:-1], logits.dtype)
        value = dense(1, "value")(h)[..., 0]
        return logits, value


def _torch_linear_bias(fan_in: int) -> Callable[..., Array]:
    """PyTorch's default nn.Linear bias init, U(±1/√fan_in) (flax's bias_init sees no fan-in)."""
    bound = 1.0 / np.sqrt(fan_in)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(
        key, shape, dtype, -bound, bound)


INITS = ("glorot_normal", "torch_default")


class MLP(nn.Module):
    """ReLU MLP: hidden layers `hidden`, linear output `num_outputs`.

    weight_init "glorot_normal": Xavier-normal kernels, zero biases (paper 003's REINFORCE code);
    "torch_default": PyTorch's nn.Linear default, U(±1/√fan_in) for kernels and biases.
    `masks` (one per hidden layer, or None) multiply the hidden pre-activations: explicit
    dropout masks, so that a rollout can record the masks it sampled and the loss can reuse them.
    `zero_output`: the output layer's kernel and bias start at zero (every output 0 in every
    state: uniform logits, or a Gaussian's mean at its box's centre).
    """

    hidden: tuple[int, ...] = (128,)
    num_outputs: int = 2
    weight_init: str = "torch_default"
    zero_output: bool = False

    @nn.compact
    def __call__(self, x: Array, masks: tuple[Array, ...] | None = None) -> Array:
        sizes = (*self.hidden, self.num_outputs)
        fan_in = x.shape[-1]
        for i, n in enumerate(sizes):
            if self.zero_output and i == len(self.hidden):
                layer = nn.Dense(n, kernel_init=nn.initializers.zeros,
                                 bias_init=nn.initializers.zeros)
            elif self.weight_init == "glorot_normal":
                layer = nn.Dense(n, kernel_init=nn.initializers.glorot_normal(),
                                 bias_init=nn.initializers.zeros)
            else:
                layer = nn.Dense(
                    n, kernel_init=nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform"),
                    bias_init=_torch_linear_bias(fan_in))
            x = layer(x)
            if i < len(self.hidden):
                if masks is not None:
                    x = x * masks[i]
                x = nn.relu(x)
            fan_in = n
        return x


class FlatModel:
    """A Flax module seen as a function of one flat parameter vector θ ∈ R^d."""

    def __init__(self, module: nn.Module, example_input: Array) -> None:
        self.module = module
        # The parameter structure only: eval_shape runs no computation (an eager module.init
        # would compile dozens of tiny ops, about a second on this CPU).
        # The key, the ravel and its unravel are traced too: eager, each jnp op (the seed, a
        # reshape per leaf, the concatenation) compiled a program of its own.
        shapes = jax.eval_shape(lambda x: module.init(jax.random.key(0), x)["params"],
                                example_input)
        found: dict[str, Any] = {}

        def ravel(tree: Any) -> Array:
            flat, found["unravel"] = ravel_pytree(tree)
            return flat

        self.dim = int(jax.eval_shape(ravel, shapes).size)
        self._unravel = found["unravel"]
        self._example = example_input

    def init(self, key: Array) -> Array:
        """A fresh flat θ drawn with the module's initializers."""
        if _hashable(self.module):
            return _init_flat(self.module, key, self._example)
        return _init_flat.__wrapped__(self.module, key, self._example)

    def unravel(self, theta: Array) -> Any:
        return self._unravel(theta)

    def apply(self, theta: Array, x: Array, *args: Any) -> Any:
        return self.module.apply({"params": self._unravel(theta)}, x, *args)

    def bind(self, theta: Array) -> Callable[[Array], Any]:
        params = self._unravel(theta)
        return lambda x: self.module.apply({"params": params}, x)


def _hashable(module: nn.Module) -> bool:
    """Whether `module` can be a static argument of `jax.jit` (a user's module may hold an
    array or a list among its fields)."""
    try:
        hash(module)
    except TypeError:
        return False
    return True


@partial(jax.jit, static_argnums=0)
def _init_flat(module: nn.Module, key: Array, example: Array) -> Array:
    """`FlatModel.init` as one program per module and input shape: op by op, each initializer's
    draws and the ravel compiled a program per primitive and shape."""
    flat, _ = ravel_pytree(module.init(key, example)["params"])
    return flat


def actor_critic(
    hidden: int = 16, num_actions: int = 2, obs_dim: int = 4, use_bias: bool = False,
    log_std: str = "state", start_log_std: tuple[float, ...] | None = None,
    zero_policy: bool = False, value_head: bool = True,
) -> FlatModel:
    """Paper 000's network with `num_actions` policy outputs. log_std "parameter": a Gaussian
    head's network whose num_actions = 2d outputs end in a learned, state-free log-std
    (`StateFreeLogStd`); "state": every output is the network's. `start_log_std` (with
    "parameter"): the Gaussian starts with these log-stds and its means at 0 for every state
    (the policy layer's kernel zero), e.g. `Gaussian.uniform_log_std()`'s, close to a
    uniformly random policy; None: the network's own start (log σ = 0, means from the
    Glorot-initialized layer). `zero_policy`: the policy layer's kernel starts at zero (a
    categorical head's logits all 0: the uniformly random policy). `value_head` False: the
    network has no value head (d smaller by hidden (+ 1 with biases); its value is 0)."""
    if start_log_std is not None and log_std != "parameter":
        raise ValueError("start_log_std needs the state-free log-std (log_std='parameter')")
    module: nn.Module = ActorCritic(hidden, num_actions, use_bias, zero_policy, value_head)
    if log_std == "parameter":
        zero = start_log_std is not None
        module = StateFreeLogStd(ActorCritic(hidden, num_actions // 2, use_bias, zero,
                                             value_head),
                                 num_actions // 2, start_log_std if zero else 0.0)
    return FlatModel(module, np.zeros((obs_dim,), np.float32))


def mlp(hidden: tuple[int, ...], num_outputs: int, obs_dim: int,
        init: str = "torch_default", log_std: str = "state",
        start_log_std: tuple[float, ...] | None = None, zero_output: bool = False) -> FlatModel:
    """The MLP with `num_outputs` outputs (log_std and start_log_std: as `actor_critic`'s;
    zero_output: as `MLP`'s, with start_log_std a Gaussian close to the uniform policy)."""
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    if start_log_std is not None and log_std != "parameter":
        raise ValueError("start_log_std needs the state-free log-std (log_std='parameter')")
    module: nn.Module = MLP(tuple(hidden), num_outputs, init, zero_output)
    if log_std == "parameter":
        module = StateFreeLogStd(MLP(tuple(hidden), num_outputs // 2, init, zero_output),
                                 num_outputs // 2,
                                 start_log_std if start_log_std is not None else 0.0)
    return FlatModel(module, np.zeros((obs_dim,), np.float32))


# --- a saved policy's model: described in JSON, rebuilt from the description alone ----------
ARCHITECTURES = ("actor-critic", "mlp", "module")
MAX_WIDTH, MAX_LAYERS, MAX_INPUT = 1 << 16, 32, 1 << 20


def describe_model(model: FlatModel, num_actions: int) -> dict[str, Any]:
    """The JSON description a saved policy records: architecture, sizes, activation; a user's
    module is named (for the reader), never rebuilt from the name."""
    m, obs_dim = model.module, int(model._example.shape[-1])
    common = {"obs_dim": obs_dim, "num_actions": int(num_actions), "dim": model.dim}
    if isinstance(m, StateFreeLogStd) and isinstance(m.inner, ActorCritic | MLP):
        inner = describe_model(FlatModel(m.inner, model._example), num_actions)
        return {**inner, "dim": model.dim, "log_std": "parameter"}
    if isinstance(m, ActorCritic):
        return {"architecture": "actor-critic", "hidden": [m.hidden], "activation": "relu",
                "use_bias": m.use_bias, **({} if m.value_head else {"value_head": False}),
                **common}
    if isinstance(m, MLP):
        return {"architecture": "mlp", "hidden": list(m.hidden), "activation": "relu",
                "use_bias": True, **common}
    return {"architecture": "module",
            "module": f"{type(m).__module__}.{type(m).__qualname__}", **common}


def check_description(d: Any) -> dict[str, Any]:
    """A model description's fields, each of the type and range `describe_model` writes;
    ValueError otherwise (a tampered file must not build a huge or odd network)."""
    def count(v: Any, hi: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= hi

    if not isinstance(d, dict) or d.get("architecture") not in ARCHITECTURES:
        raise ValueError(f"unknown model architecture in {d!r:.80}")
    if not (count(d.get("obs_dim"), MAX_INPUT) and count(d.get("num_actions"), MAX_WIDTH)
            and count(d.get("dim"), 1 << 28)):
        raise ValueError("model sizes (obs_dim, num_actions, dim) missing or out of range")
    if d["architecture"] == "module":
        if not isinstance(d.get("module"), str):
            raise ValueError("a user module's description needs its name")
        return d
    hidden = d.get("hidden")
    if (not isinstance(hidden, list) or not 1 <= len(hidden) <= MAX_LAYERS
            or not all(count(h, MAX_WIDTH) for h in hidden)):
        raise ValueError(f"hidden sizes {hidden!r:.80} out of range")
    if d["architecture"] == "actor-critic" and len(hidden) != 1:
        raise ValueError("an actor-critic network has one hidden layer")
    if d.get("activation") != "relu" or not isinstance(d.get("use_bias"), bool):
        raise ValueError("activation must be relu and use_bias a boolean")
    if d["architecture"] == "mlp" and not d["use_bias"]:
        raise ValueError("privrl's MLP has biases")
    if not isinstance(d.get("value_head", True), bool) or (
            d["architecture"] == "mlp" and "value_head" in d):
        raise ValueError("value_head must be a boolean, and only an actor-critic has one")
    if d.get("log_std", "state") not in LOG_STDS or (
            d.get("log_std") == "parameter" and d["num_actions"] % 2):
        raise ValueError(f"log_std {d.get('log_std')!r:.20} is not one of {LOG_STDS} (with "
                         "an even number of outputs)")
    return d


def model_from_description(d: dict[str, Any]) -> FlatModel:
    """The network a (checked) description names, built from its sizes."""
    log_std = d.get("log_std", "state")
    if d["architecture"] == "actor-critic":
        return actor_critic(d["hidden"][0], d["num_actions"], d["obs_dim"], d["use_bias"],
                            log_std, value_head=d.get("value_head", True))
    return mlp(tuple(d["hidden"]), d["num_actions"], d["obs_dim"], log_std=log_std)
