"""Per-example clipped gradients per second for paper 003's DQN network: privrl vs Opacus.

The work measured is one DP-SGD step's privatized gradient for the DQN network (MLP
4-128-128-2, d = 17,410) at each --batch (32, 128 and 512 by default; paper 003 uses 128):
per-example gradients of the Huber TD loss, each clipped to L2 norm C, summed, Gaussian noise
added. Rates are per-example clipped gradients per second (batch / the time of one step).

* privrl, ghost clipping: `GaussianSumMechanism.privatize_dense` (what DP-DQN runs): per-example
  norms and the clipped sum from one backward pass, no per-example gradients in memory.
* privrl, vmap: `jax.vmap(jax.grad)` per-example gradients, clipped and summed by
  `GaussianSumMechanism.privatize` (the textbook JAX way, for reference).
* privrl, seeds vmapped: ghost clipping for --seeds models and batches in one call, as privrl's
  runners vmap seeds and trials.
* Opacus 1.6: `GradSampleModule` + `DPOptimizer` (hooks materialize per-example gradients), one
  `backward()` + `pre_step()` (clip, sum, noise) per step, with one torch thread and with torch's
  default thread count; the speedup is over the faster.

privrl's steps draw fresh noise every call (the key split inside the jitted step, as a
training loop does), and every call is waited for (a loop's next step needs this step's
gradient; JAX would otherwise overlap independent calls). Before timing, the script checks
that Opacus and privrl give the same clipped sum (noise 0) on the same weights and batch. All
rows of all batches are timed in ONE process, in interleaved blocks of about --block-seconds
each (the order reversed every other repeat), so a change of the machine's load moves every
row alike; each row is the median of --repeats blocks, and its ratio's range is over the
repeats (each block against the best Opacus row's block of the same repeat). A second rate
divides by the process's CPU time (all threads) instead of the wall time: the work per
example, less moved by a loaded machine than the wall time (which is the headline on a quiet
one), compared with Opacus on one thread.

Needs the benchmark-only extra: pip install -e '.[bench]'  (torch 2.13.0 + opacus 1.6.0)

    python benchmarks/bench_opacus.py [--repeats 7] [--block-seconds 0.25] [--batch 32 128 512]
"""

from __future__ import annotations

import argparse
import os
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


def calls_per_block(step: Callable[[], object], seconds: float) -> int:
    """How many calls of `step` (already warm) fill about `seconds`: every row's blocks last
    about as long, so a change of load moves each row's blocks alike."""
    jax.block_until_ready(step())
    t = time.perf_counter()
    n = 0
    while time.perf_counter() - t < seconds / 4 or n < 3:
        jax.block_until_ready(step())
        n += 1
    return max(3, round(n * seconds / (time.perf_counter() - t)))


def time_block(step: Callable[[], object], calls: int) -> tuple[float, float]:
    """Wall and CPU (all threads) seconds per call of one timed block. Every call is waited
    for, as a training loop's next step waits for this step's gradient (JAX would otherwise
    overlap independent calls)."""
    t, c = time.perf_counter(), time.process_time()
    for _ in range(calls):
        jax.block_until_ready(step())
    return (time.perf_counter() - t) / calls, (time.process_time() - c) / calls


def keyed(release: Callable[..., jax.Array], *args: object) -> Callable[[], jax.Array]:
    """A step `release(key, *args)` with a fresh key each call, split inside the jitted program
    as a training loop splits it (no host-side key handling in the timing)."""
    @jax.jit
    def step(key: jax.Array, *a: object) -> tuple[jax.Array, jax.Array]:
        k_noise, k_next = jax.random.split(key)
        return release(k_noise, *a), k_next

    state = {"key": jax.random.key(1)}

    def call() -> jax.Array:
        out, state["key"] = step(state["key"], *args)
        return out
    return call


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

    ghost = keyed(lambda k, p: mech.privatize_dense(k, p, obs, losses).value, params)

    def per_example(th: jax.Array, o: jax.Array, a: jax.Array, y: jax.Array) -> jax.Array:
        return huber(model.apply(th, o)[a] - y)

    vmapped = keyed(lambda k, th: mech.privatize(k, jax.vmap(
        jax.grad(per_example), (None, 0, 0, 0))(th, obs, actions, targets)).value, theta)
    return ghost, vmapped, np.asarray(theta), params


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

    return keyed(lambda k, th: jax.vmap(one)(th, jax.random.split(k, seeds)), thetas)


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


def rows_for(batch: int, seeds: int, threads: list[int]
             ) -> list[tuple[str, int, Callable[[], object], int | None]]:
    """(name, examples per call, step, torch threads) for one batch size, its clipped sums
    checked against Opacus's first."""
    ghost, vmapped, _, params = privrl_steps(batch)
    diff = check_same_clipped_sum(batch, params)
    print(f"batch {batch}: max |Opacus − privrl| clipped sum = {diff:.2e}", flush=True)
    if diff > 1e-3:
        raise SystemExit("Opacus and privrl disagree; not timing")
    rows: list[tuple[str, int, Callable[[], object], int | None]] = [
        ("privrl ghost clipping (jit)", batch, ghost, None),
        ("privrl vmap(grad) + clip (jit)", batch, vmapped, None),
        (f"privrl ghost clipping, {seeds} seeds vmapped in one call", batch * seeds,
         privrl_seeds_step(batch, seeds), None)]
    import opacus
    for n in threads:
        rows.append((f"Opacus {opacus.__version__}, {n} torch thread{'s' * (n > 1)}", batch,
                     opacus_step(batch, params, n)[0], n))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--block-seconds", type=float, default=0.25,
                    help="each timed block's length (calls per row calibrated to it)")
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args()
    import opacus
    import torch

    default_threads = torch.get_num_threads()  # before any set_num_threads
    threads = sorted({1, default_threads})
    load = os.getloadavg()[0]
    table = [(batch, *row) for batch in args.batch
             for row in rows_for(batch, args.seeds, threads)]
    calls = []
    for _, _, _, step, n in table:  # compile, warm up, size the blocks
        if n is not None:
            torch.set_num_threads(n)
        calls.append(calls_per_block(step, args.block_seconds))
    times: list[list[float]] = [[] for _ in table]
    cpu: list[list[float]] = [[] for _ in table]
    for r in range(args.repeats):  # interleaved, the order reversed every other repeat
        order = range(len(table)) if r % 2 == 0 else reversed(range(len(table)))
        for i in order:
            n = table[i][4]
            if n is not None:
                torch.set_num_threads(n)
            wall, used = time_block(table[i][3], calls[i])
            times[i].append(wall)
            cpu[i].append(used)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {load:.1f} → {os.getloadavg()[0]:.1f}; jax {jax.__version__}, "
          f"torch {torch.__version__}, opacus {opacus.__version__}; d = 17,410; median of "
          f"{args.repeats} interleaved blocks of about {args.block_seconds} s")
    print("| batch | implementation | clipped per-example gradients / s | vs best Opacus "
          "(median, range over repeats) | per CPU-s (all threads) | vs Opacus 1 thread, "
          "per CPU-s |")
    print("|---:|---|---:|---:|---:|---:|")
    for batch in args.batch:
        idx = [i for i, row in enumerate(table) if row[0] == batch]
        rate = {i: np.array([table[i][2] / t for t in times[i]]) for i in idx}
        per_cpu = {i: float(np.median([table[i][2] / c for c in cpu[i]])) for i in idx}
        opac = [i for i in idx if table[i][4] is not None]
        best = max(opac, key=lambda i: float(np.median(rate[i])))
        single = next(i for i in opac if table[i][4] == 1)
        for i in idx:  # per repeat: the row against the best Opacus row of the same repeat
            ratio = rate[i] / rate[best]
            print(f"| {batch} | {table[i][1]} | {float(np.median(rate[i])):,.0f} | "
                  f"{float(np.median(rate[i])) / float(np.median(rate[best])):.1f}× "
                  f"({ratio.min():.1f}–{ratio.max():.1f}×) | {per_cpu[i]:,.0f} | "
                  f"{per_cpu[i] / per_cpu[single]:.1f}× |")


if __name__ == "__main__":
    main()
