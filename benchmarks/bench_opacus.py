"""Per-example clipped gradients per second for paper 003's DQN network: privrl vs Opacus.

The work measured is one DP-SGD step's privatized gradient for the DQN network (MLP
4-128-128-2, d = 17,410) at batch 128: per-example gradients of the Huber TD loss, each clipped
to L2 norm C, summed, Gaussian noise added. Rates are per-example clipped gradients per second
(128 / the time of one step).

* privrl, ghost clipping: `GaussianSumMechanism.privatize_dense` (what DP-DQN runs): per-example
  norms and the clipped sum from one backward pass, no per-example gradients in memory.
* privrl, vmap: `jax.vmap(jax.grad)` per-example gradients, clipped and summed by
  `GaussianSumMechanism.privatize` (the textbook JAX way, for reference).
* Opacus 1.6: `GradSampleModule` + `DPOptimizer` (hooks materialize per-example gradients), one
  `backward()` + `pre_step()` (clip, sum, noise) per step, with one torch thread and with torch's
  default thread count; the speedup is over the faster.

Before timing, the script checks that Opacus and privrl give the same clipped sum (noise 0) on
the same weights and batch. Each row is the median of --repeats timed blocks of --steps steps,
after one untimed warm-up block (which compiles the jitted functions).

Needs the benchmark-only extra: pip install -e '.[bench]'  (torch 2.13.0 + opacus 1.6.0)

    python benchmarks/bench_opacus.py [--repeats 7] [--steps 200] [--batch 128]
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import numpy as np

from privrl.compute.devices import use_host_devices

use_host_devices(1)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from privrl.losses import huber  # noqa: E402
from privrl.nets.flat import mlp  # noqa: E402
from privrl.privacy.mechanisms import GaussianSumMechanism  # noqa: E402

HIDDEN = (128, 128)
CLIP, SIGMA = 1.0, 1.0


def median_rate(step: Callable[[], object], batch: int, steps: int, repeats: int) -> float:
    """Per-example clipped gradients per second: median over repeats of steps·batch / time."""
    for _ in range(steps):
        out = step()
    jax.block_until_ready(out)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            out = step()
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t)
    return steps * batch / float(np.median(times))


def make_batch(batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(batch, 4)).astype(np.float32)
    actions = rng.integers(0, 2, size=batch).astype(np.int32)
    targets = rng.normal(scale=5.0, size=batch).astype(np.float32)
    return obs, actions, targets


def privrl_steps(batch: int) -> tuple[Callable, Callable, np.ndarray, dict]:
    model = mlp(HIDDEN, 2, 4)
    theta = model.init(jax.random.key(0))
    params = model.unravel(theta)
    mech = GaussianSumMechanism(SIGMA, CLIP)
    obs, actions, targets = (jnp.asarray(a) for a in make_batch(batch))

    def losses(q: jax.Array) -> jax.Array:
        return huber(jnp.take_along_axis(q, actions[:, None], 1)[:, 0] - targets)

    ghost = jax.jit(lambda p, k: mech.privatize_dense(k, p, obs, losses).value)

    def per_example(th: jax.Array, o: jax.Array, a: jax.Array, y: jax.Array) -> jax.Array:
        return huber(model.apply(th, o)[a] - y)

    vmapped = jax.jit(lambda th, k: mech.privatize(k, jax.vmap(
        jax.grad(per_example), (None, 0, 0, 0))(th, obs, actions, targets)).value)
    keys = iter(jax.random.split(jax.random.key(1), 1_000_000))
    return (lambda: ghost(params, next(keys))), (lambda: vmapped(theta, next(keys))), \
        np.asarray(theta), params


def privrl_seeds_step(batch: int, seeds: int) -> Callable:
    """`seeds` independent models and batches in one call, as privrl's runners vmap seeds."""
    model = mlp(HIDDEN, 2, 4)
    thetas = jax.vmap(model.init)(jax.random.split(jax.random.key(0), seeds))
    mech = GaussianSumMechanism(SIGMA, CLIP)
    obs, actions, targets = (jnp.asarray(a) for a in make_batch(batch))

    def one(theta: jax.Array, key: jax.Array) -> jax.Array:
        def losses(q: jax.Array) -> jax.Array:
            return huber(jnp.take_along_axis(q, actions[:, None], 1)[:, 0] - targets)

        return mech.privatize_dense(key, model.unravel(theta), obs, losses).value

    step = jax.jit(jax.vmap(one))
    keys = iter(jax.random.split(jax.random.key(2), 100_000))
    return lambda: step(thetas, jax.random.split(next(keys), seeds))


def opacus_step(batch: int, params: dict, threads: int | None, noise: float = SIGMA
                ) -> tuple[Callable, Callable[[], np.ndarray]]:
    import torch
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    if threads is not None:
        torch.set_num_threads(threads)
    net = torch.nn.Sequential(torch.nn.Linear(4, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                              torch.nn.ReLU(), torch.nn.Linear(128, 2))
    with torch.no_grad():  # the same weights as privrl's
        for i, layer in enumerate(net[::2]):
            layer.weight.copy_(torch.from_numpy(np.array(params[f"Dense_{i}"]["kernel"]).T))
            layer.bias.copy_(torch.from_numpy(np.array(params[f"Dense_{i}"]["bias"])))
    model = GradSampleModule(net, loss_reduction="sum")
    opt = DPOptimizer(torch.optim.SGD(model.parameters(), lr=0.0), noise_multiplier=noise,
                      max_grad_norm=CLIP, expected_batch_size=batch, loss_reduction="sum")
    obs, actions, targets = (torch.from_numpy(a) for a in make_batch(batch))
    actions = actions.long()
    loss_fn = torch.nn.SmoothL1Loss(reduction="sum")

    def step() -> object:
        opt.zero_grad(set_to_none=True)
        q = model(obs).gather(1, actions[:, None])[:, 0]
        loss_fn(q, targets).backward()
        opt.pre_step()  # clip per example, sum, add noise
        return None

    def flat_grad() -> np.ndarray:
        # privrl's flat order: per layer, bias then kernel (in × out)
        parts = []
        for layer in net[::2]:
            parts += [layer.bias.grad.numpy().ravel(), layer.weight.grad.numpy().T.ravel()]
        return np.concatenate(parts)

    return step, flat_grad


def check_same_clipped_sum(batch: int, params: dict) -> float:
    """Max |difference| between Opacus's and privrl's clipped sums with no noise."""
    step, flat = opacus_step(batch, params, threads=1, noise=0.0)
    step()
    model = mlp(HIDDEN, 2, 4)
    obs, actions, targets = (jnp.asarray(a) for a in make_batch(batch))
    from privrl.privacy.dpsgd import clipped_grad_sum

    ours, _ = clipped_grad_sum(params, obs, lambda q: huber(
        jnp.take_along_axis(q, actions[:, None], 1)[:, 0] - targets), CLIP)
    del model
    return float(np.max(np.abs(np.asarray(ours) - flat())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args()
    import opacus
    import torch

    default_threads = torch.get_num_threads()  # before any set_num_threads
    ghost, vmapped, _, params = privrl_steps(args.batch)
    diff = check_same_clipped_sum(args.batch, params)
    print(f"check: max |Opacus − privrl| clipped sum = {diff:.2e}")
    if diff > 1e-3:
        raise SystemExit("Opacus and privrl disagree; not timing")
    rows = [("privrl ghost clipping (jit)", median_rate(ghost, args.batch, args.steps,
                                                        args.repeats)),
            ("privrl vmap(grad) + clip (jit)", median_rate(vmapped, args.batch, args.steps,
                                                           args.repeats)),
            (f"privrl ghost clipping, {args.seeds} seeds vmapped in one call",
             median_rate(privrl_seeds_step(args.batch, args.seeds), args.batch * args.seeds,
                         max(10, args.steps // args.seeds), args.repeats))]
    for threads in sorted({1, default_threads}):
        step, _ = opacus_step(args.batch, params, threads)
        rows.append((f"Opacus {opacus.__version__}, {threads} torch thread(s)",
                     median_rate(step, args.batch, max(20, args.steps // 4), args.repeats)))
    best_opacus = max(r for name, r in rows if name.startswith("Opacus"))
    print(f"machine: {platform.processor() or platform.machine()}, jax {jax.__version__}, "
          f"torch {torch.__version__}, opacus {opacus.__version__}; batch {args.batch}, "
          f"d = 17,410, median of {args.repeats}")
    print("| implementation | clipped per-example gradients / s | vs best Opacus |")
    print("|---|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / best_opacus:.1f}× |")


if __name__ == "__main__":
    main()
