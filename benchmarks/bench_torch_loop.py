"""privrl's jitted PGC round against the same round written as a plain PyTorch + gymnasium loop.

The baseline is the PGC-A3C round (paper 000, sections 3-4, paper preset) as a user would write
it without privrl: a torch `nn.Module` (4 → 16 ReLU → policy 2 + value 1, no biases, d = 112),
gymnasium's `CartPole-v1` capped at 200 steps with each agent's gravity set through
`env.unwrapped.gravity`, and per round P = 9 agents run one after another from the same
snapshot of θ: play one episode (argmax of π with probability 1 − α, else a random action), build
the A3C loss (eq. 15-18), `loss.backward()`, flatten the gradient, L1-clip it to C/2 and add
Laplace(C/ε) noise; then the aggregator applies the 9 reports in turn with SGD (η = 0.5, |B| = 1).

privrl's round is timed as benchmarks/bench_round.py times it: one jitted chunk of rounds per
call through `ShardedTrials`, after a warm-up call that compiles it. Every row starts from a fresh
θ (the torch loop from the same θ0 as privrl's single-trial rows), runs one untimed warm-up call
(or block of rounds), then `--repeats` timed ones, training as it goes; each row reports the
repeat with the median time. Episodes/s depends on how long the episodes are (a learning policy
makes longer ones), so compare env steps/s, and read each row's mean episode length. Before
timing, the script checks that the torch loss gives the same gradient as privrl's
`PGCA3C.episode_loss` on the same episodes (one that falls, one cut by the step cap).

The torch loop is timed twice: with one torch thread (the fast setting for a model this small)
and with torch's default thread count (what a user gets; its extra threads mostly spin, which
costs a lot when other jobs share the cores). Speedups are over the faster of the two. The
"other load" column is the CPU time other processes used during the timed call, in cores (from
/proc/stat), to show contention from other jobs on the machine.

Needs PyTorch, which privrl itself never depends on: pip install -e '.[bench]'

    python benchmarks/bench_torch_loop.py [--repeats 5] [--torch-rounds 100] [--episodes 20000]
                                          [--devices 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np

from privrl.compute.devices import use_host_devices

# Paper 000, section 4 (the privrl paper preset's defaults).
P = 9  # agents per round
HIDDEN = 16
GRAVITIES = (9.7, 9.8, 9.9)
MAX_STEPS = 200
GAMMA, VALUE_COEF, ENTROPY_COEF = 0.99, 0.5, 0.01  # γ, λ, β
CLIP, EPSILON = 0.01, 5.0  # C, ε (Laplace mechanism)
LEARNING_RATE = 0.5  # η, aggregator SGD, |B| = 1
EXPLORE_START, EXPLORE_DECAY = 0.5, 1800.0  # α = max(0, 0.5 − n/1800)
SWEEP_TRIALS = 180  # the sweep's scale: 180 trials × 9 agents
LAYERS = ("common", "policy", "value")  # privrl's Dense layers = the torch module's Linears
T = TypeVar("T")


class Sample(NamedTuple):
    """One timed call: what it did and what it cost."""

    episodes: int
    steps: int
    wall: float  # seconds
    cpu: float  # this process's CPU seconds (all threads)
    other: float  # CPU seconds other processes used meanwhile (nan where /proc/stat is missing)
    rollout: float = float("nan")  # torch only: seconds of the wall spent playing episodes


def system_busy_seconds() -> float:
    """CPU seconds all processes have used since boot (Linux /proc/stat), else nan."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    idle = fields[3] + fields[4]  # idle + iowait; guest time is already counted in user
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def timed(fn: Callable[[], T]) -> tuple[T, float, float, float]:
    """(fn(), wall s, this process's CPU s, other processes' CPU s) for one call."""
    busy, t0, c0 = system_busy_seconds(), time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return out, wall, cpu, max(0.0, system_busy_seconds() - busy - cpu)


@dataclass
class Timing:
    """One row of the table: the timed call with the median wall time."""

    name: str
    agents: str
    devices: str
    rounds: int  # rounds per timed call
    median: Sample

    @property
    def episodes_per_s(self) -> float:
        return self.median.episodes / self.median.wall

    @property
    def steps_per_s(self) -> float:
        return self.median.steps / self.median.wall

    def torch_seconds_for(self, other: Sample) -> float:
        """A torch row's cost model: its time for `other`'s episodes and steps.

        Per env step: the rollout (reset, then policy forward + env.step per step); per episode:
        everything else (loss, backward, clip + noise, the SGD step).
        """
        m = self.median
        per_step = m.rollout / m.steps
        per_episode = (m.wall - m.rollout) / m.episodes
        return other.episodes * per_episode + other.steps * per_step


def median_timing(name: str, agents: str, devices: str, rounds: int,
                  samples: list[Sample]) -> Timing:
    """The row for `samples` (one per repeat): the sample with the median wall time."""
    ranked = sorted(samples, key=lambda s: s.wall)
    return Timing(name, agents, devices, rounds, ranked[len(ranked) // 2])


# --- the PyTorch baseline ----------------------------------------------------------------------
def make_torch_baseline(torch: Any, gym: Any) -> type:
    """The baseline's classes, built once torch is known to be importable."""
    nn = torch.nn
    functional = torch.nn.functional

    class ActorCritic(nn.Module):
        """Paper 000's network: shared ReLU layer, policy and value heads, no biases (d = 112)."""

        def __init__(self) -> None:
            super().__init__()
            self.common = nn.Linear(4, HIDDEN, bias=False)
            self.policy = nn.Linear(HIDDEN, 2, bias=False)
            self.value = nn.Linear(HIDDEN, 1, bias=False)
            for layer in (getattr(self, name) for name in LAYERS):
                nn.init.xavier_uniform_(layer.weight)  # Glorot uniform, as in privrl (and TF)

        def forward(self, obs: Any) -> tuple[Any, Any]:
            h = functional.relu(self.common(obs))
            return self.policy(h), self.value(h).squeeze(-1)

    class TorchPGC:
        """PGC-A3C with Laplace reports, one agent at a time, in plain PyTorch + gymnasium."""

        def __init__(self, seed: int = 0) -> None:
            torch.manual_seed(seed)
            self.rng = np.random.default_rng(seed)
            self.net = ActorCritic()  # the aggregator's θ
            self.snapshot = ActorCritic()  # the θ the agents of a round read
            self.optimizer = torch.optim.SGD(self.net.parameters(), lr=LEARNING_RATE)
            self.noise = torch.distributions.Laplace(0.0, CLIP / EPSILON)
            # One environment per agent slot (A3C's threads); each agent sets its own gravity.
            self.envs = [gym.make("CartPole-v1", max_episode_steps=MAX_STEPS) for _ in range(P)]
            for k, env in enumerate(self.envs):
                env.reset(seed=seed * P + k)
            self.submitted = 0  # n
            self.rollout_seconds = 0.0  # time spent playing episodes (for the cost model)

        def load_kernels(self, kernels: dict[str, np.ndarray]) -> None:
            """Start from privrl's θ: Dense kernels are (in, out), Linear weights (out, in)."""
            with torch.no_grad():
                for net in (self.net, self.snapshot):
                    for name in LAYERS:
                        getattr(net, name).weight.copy_(torch.tensor(kernels[name].T))

        def kernels(self) -> dict[str, np.ndarray]:
            """The agents' θ in privrl's layout (the inverse of `load_kernels`)."""
            return {name: getattr(self.snapshot, name).weight.detach().numpy().T.copy()
                    for name in LAYERS}

        def play(self, env: Any, alpha: float) -> tuple[Any, Any, Any, bool]:
            """One episode with the snapshot θ: (obs (T, 4), actions (T,), s_T, terminated)."""
            obs, _ = env.reset()
            observations, actions = [], []
            while True:
                with torch.no_grad():
                    logits, _ = self.snapshot(torch.as_tensor(obs))
                if self.rng.random() < alpha:
                    action = int(self.rng.integers(2))
                else:
                    action = int(logits.argmax())
                observations.append(obs)
                actions.append(action)
                obs, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
            return (torch.as_tensor(np.stack(observations)),
                    torch.as_tensor(actions), torch.as_tensor(obs), bool(terminated))

        def loss(self, obs: Any, actions: Any, final_obs: Any, terminated: bool) -> Any:
            """Eq. 15-18: −Σ [log π(a|s) A + β H] + λ Σ (G − V)², reward 1 per step."""
            logits, values = self.snapshot(obs)
            with torch.no_grad():
                g = 0.0 if terminated else float(self.snapshot(final_obs)[1])
            returns = []
            for _ in range(len(actions)):
                g = 1.0 + GAMMA * g
                returns.append(g)
            returns = torch.tensor(returns[::-1])
            log_probs = functional.log_softmax(logits, dim=-1)
            log_prob_a = log_probs.gather(1, actions[:, None]).squeeze(1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            advantage = (returns - values).detach()
            policy_loss = -(log_prob_a * advantage + ENTROPY_COEF * entropy).sum()
            return policy_loss + VALUE_COEF * ((returns - values) ** 2).sum()

        def gradient(self, obs: Any, actions: Any, final_obs: Any, terminated: bool) -> Any:
            self.snapshot.zero_grad()
            self.loss(obs, actions, final_obs, terminated).backward()
            return torch.cat([p.grad.reshape(-1) for p in self.snapshot.parameters()])

        def privatize(self, grad: Any) -> Any:
            """Laplace mechanism: L1-clip to C/2, add i.i.d. Laplace(C/ε) noise."""
            clipped = grad / max(1.0, float(grad.abs().sum()) / (CLIP / 2))
            return clipped + self.noise.sample(clipped.shape)

        def apply(self, report: Any) -> None:
            """The aggregator: one SGD step per report (|B| = 1)."""
            offset = 0
            for p in self.net.parameters():
                p.grad = report[offset:offset + p.numel()].view_as(p).clone()
                offset += p.numel()
            self.optimizer.step()

        def round(self) -> list[int]:
            """P agents play from the same snapshot; their reports are applied in turn."""
            alpha = max(0.0, EXPLORE_START - self.submitted / EXPLORE_DECAY)
            self.snapshot.load_state_dict(self.net.state_dict())
            reports, lengths = [], []
            for env in self.envs:
                env.unwrapped.gravity = float(self.rng.choice(GRAVITIES))  # the agent's ψ
                t0 = time.perf_counter()
                episode = self.play(env, alpha)
                self.rollout_seconds += time.perf_counter() - t0
                reports.append(self.privatize(self.gradient(*episode)))
                lengths.append(len(episode[1]))
            for report in reports:
                self.apply(report)
            self.submitted += P
            return lengths

    return TorchPGC


def time_torch(torch: Any, baseline: Any, threads: int, rounds: int, repeats: int) -> Timing:
    """`repeats` timed blocks of `rounds` rounds after one untimed block, on `threads` threads."""
    default_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    samples = []
    try:
        for i in range(repeats + 1):
            before = baseline.rollout_seconds
            lengths, wall, cpu, other = timed(
                lambda: [n for _ in range(rounds) for n in baseline.round()])
            if i > 0:  # the first block is the warm-up
                rollout = baseline.rollout_seconds - before
                samples.append(Sample(len(lengths), sum(lengths), wall, cpu, other, rollout))
    finally:
        torch.set_num_threads(default_threads)
    return median_timing("PyTorch loop (torch + gymnasium)", f"{P} (one at a time)",
                         f"1 process, {threads} torch thread{'s' * (threads > 1)}",
                         rounds, samples)


# --- privrl ------------------------------------------------------------------------------------
def make_privrl(trials: int, rounds: int, devices: int, seed: int) -> tuple[Any, Any, Any]:
    """(algo, runner, state) for `trials` paper-preset trials, `rounds` rounds per call."""
    import jax

    from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig
    from privrl.systems.pgc_a3c.local import ShardedTrials

    cfg = PGCA3CConfig(mechanism="laplace", epsilon=EPSILON, trials=trials, submissions=10**9)
    algo = PGCA3C(cfg)
    runner = ShardedTrials(algo, trials, rounds, devices)
    return algo, runner, runner.init(jax.random.key(seed))


def time_privrl(runner: Any, state: Any, trials: int, rounds: int, repeats: int) -> Timing:
    """As bench_round.py: one jitted chunk of `rounds` rounds per call, after a warm-up call."""
    state, scores = runner.run_chunk(state)  # compile + warm-up
    np.asarray(scores)
    samples = []
    for _ in range(repeats):
        def call(state: Any = state) -> tuple[Any, np.ndarray]:
            state, scores = runner.run_chunk(state)
            return state, np.asarray(scores)[:trials]  # blocks until the chunk is done

        (state, scores), wall, cpu, other = timed(call)
        done = scores[np.isfinite(scores)]  # NaN: no submission
        samples.append(Sample(int(done.size), int(done.sum()), wall, cpu, other))
    return median_timing("privrl (jitted round)", f"{trials * P} ({trials} × {P})",
                         str(runner.devices), rounds, samples)


def check_gradients(gym: Any, baseline: Any, algo: Any) -> float:
    """Max |Δ| between the torch gradient and privrl's on the same two episodes (relative)."""
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from privrl.envs.rollout import Trajectory

    theta, _ = ravel_pytree({name: {"kernel": jnp.asarray(k)}
                             for name, k in baseline.kernels().items()})
    assert theta.size == algo.dim == 112, theta.size
    worst = 0.0
    for cap in (MAX_STEPS, 5):  # an episode that falls, one cut by a 5-step cap (bootstrap)
        env = gym.make("CartPole-v1", max_episode_steps=cap)
        env.reset(seed=cap)
        env.unwrapped.gravity = GRAVITIES[0]
        obs, actions, final_obs, terminated = baseline.play(env, alpha=0.5)
        if terminated != (cap == MAX_STEPS):
            raise RuntimeError("the gradient check needs one episode that falls and one cut short")
        grad_torch = baseline.gradient(obs, actions, final_obs, terminated)
        n = len(actions)
        traj = Trajectory(obs=jnp.asarray(obs.numpy()), actions=jnp.asarray(actions.numpy()),
                          mask=jnp.ones(n), final_obs=jnp.asarray(final_obs.numpy()),
                          terminated=jnp.asarray(terminated), length=jnp.asarray(n),
                          rewards=jnp.ones(n))  # CartPole's +1 per step, as the torch loss
        grads = algo.model.unravel(jax.grad(algo.episode_loss)(theta, traj))
        grad_privrl = np.concatenate([np.asarray(grads[name]["kernel"]).T.reshape(-1)
                                      for name in LAYERS])
        diff = np.abs(grad_torch.numpy() - grad_privrl).max() / np.abs(grad_privrl).max()
        worst = max(worst, float(diff))
    return worst


# --- report ------------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def speedup(x: float) -> str:
    return f"{x:,.1f}×" if x >= 1 else f"{x:.2f}×"


def print_table(rows: list[Timing], baseline: Timing) -> None:
    print("| implementation | agents in parallel | devices | rounds/call | episodes/s "
          "| env steps/s | mean episode length | CPU/wall | other load (cores) "
          "| speedup (episodes/s) | speedup (env steps/s) | speedup (same episodes) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        m = r.median
        same = baseline.torch_seconds_for(m) / m.wall
        print(f"| {r.name} | {r.agents} | {r.devices} | {r.rounds} | {r.episodes_per_s:,.0f} "
              f"| {r.steps_per_s:,.0f} | {m.steps / m.episodes:.1f} | {m.cpu / m.wall:.2f} "
              f"| {m.other / m.wall:.2f} "
              f"| {speedup(r.episodes_per_s / baseline.episodes_per_s)} "
              f"| {speedup(r.steps_per_s / baseline.steps_per_s)} | {speedup(same)} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per row (median)")
    ap.add_argument("--torch-rounds", type=int, default=100,
                    help="rounds per timed repeat of the torch loop (9 episodes each)")
    ap.add_argument("--episodes", type=int, default=20_000,
                    help="approximate episodes per timed privrl call (as bench_round.py)")
    ap.add_argument("--devices", type=int, default=2,
                    help="host devices for privrl at the sweep's scale")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.repeats < 1 or args.torch_rounds < 1 or args.episodes < 1:
        ap.error("--repeats, --torch-rounds and --episodes must be >= 1")
    use_host_devices(args.devices)  # before anything imports jax

    try:
        import torch
    except ImportError:
        sys.exit("bench_torch_loop.py needs PyTorch (privrl does not depend on it); "
                 "install the bench extra: pip install -e '.[bench]'")
    import gymnasium as gym
    import jax

    load_before = os.getloadavg()
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"# machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} "
          f"{platform.release()}; load average {load_before[0]:.2f} before the run")
    print(f"# versions: python {sys.version.split()[0]}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads by default), gymnasium {gym.__version__}, "
          f"jax {jax.__version__} ({jax.local_device_count()} host devices)")
    print(f"# PGC-A3C paper preset, Laplace ε = {EPSILON:g}, C = {CLIP:g}, η = {LEARNING_RATE:g}, "
          f"|B| = 1, P = {P}; median of {args.repeats} timed repeats after one warm-up each")

    # The torch loop starts from the θ0 of privrl's single-trial rows (same initial policy, so
    # similar episode lengths early on); afterwards each side draws its own randomness.
    algo, runner, state = make_privrl(1, args.torch_rounds, 1, args.seed)
    theta0 = algo.model.unravel(np.asarray(state.agg.theta)[0])
    theta0 = {name: np.asarray(theta0[name]["kernel"]) for name in LAYERS}
    torch_pgc = make_torch_baseline(torch, gym)
    baseline = torch_pgc(seed=args.seed)
    baseline.load_kernels(theta0)
    diff = check_gradients(gym, baseline, algo)
    print(f"# gradient check: torch loss vs privrl episode_loss, max |Δ| / max |g| = {diff:.1e}")
    if diff > 1e-4:
        sys.exit("the torch baseline does not compute privrl's gradient; not timing it")

    rows = []
    for threads in sorted({1, torch.get_num_threads()}):
        baseline = torch_pgc(seed=args.seed)  # from θ0 again, for every timed setting
        baseline.load_kernels(theta0)
        rows.append(time_torch(torch, baseline, threads, args.torch_rounds, args.repeats))
    fastest_torch = max(rows, key=lambda r: r.steps_per_s)
    rows.append(time_privrl(runner, state, 1, args.torch_rounds, args.repeats))
    for trials, devices in [(1, 1), (SWEEP_TRIALS, args.devices)]:
        rounds = max(1, args.episodes // (trials * P))
        _, runner, state = make_privrl(trials, rounds, devices, args.seed)
        rows.append(time_privrl(runner, state, trials, rounds, args.repeats))
    print()
    print_table(rows, fastest_torch)
    print()
    print(f"# load average {os.getloadavg()[0]:.2f} after the run. Speedups are over the torch "
          f"row with {fastest_torch.devices.split(', ')[1]} (the faster one, in env steps/s).")
    m = fastest_torch.median
    per_step, per_episode = m.rollout / m.steps, (m.wall - m.rollout) / m.episodes
    print(f"# Speedup (same episodes): the torch loop's time for the row's own episodes over the "
          f"row's time, from the torch loop's measured costs: {1e6 * per_step:.1f} µs per env "
          f"step (rollout, with its reset) + {1e3 * per_episode:.3f} ms per episode (loss, "
          "backward, clip + noise, SGD step). It corrects for the rows' different episode lengths.")
    print("# CPU/wall: this process's CPU time over wall time (1 = one busy core). Other load: "
          "CPU time of other processes meanwhile, in cores (2 = the machine is full without us).")
    print(f"# The first privrl row runs the torch loop's workload ({args.torch_rounds} rounds per "
          "call from the same θ0, the same phase of α); the others use bench_round.py's ~"
          f"{args.episodes:,} episodes per call.")


if __name__ == "__main__":
    main()
