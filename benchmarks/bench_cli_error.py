"""Time to a bad command line's one-line error (issue 53, item 10): `privrl run pgc-a3c
--bogus`, a command typo, a bad value for each system (`--epsilon -1`, ...), a bad task or
observation box as text (`--private gravity=2:1`, a missing `--env` file, ...), an unknown
gymnax or Gymnasium id and a `--private` field a gymnax or Gymnasium environment lacks (all
before JAX: gymnax's fields read from its source).

The command line is parsed and its values checked before JAX, flax or a system is imported;
this measures the whole process (interpreter start to exit 2), median of `--repeats` runs, beside
two references taken in the same loop: a bare interpreter and `import jax` alone (what the
error path no longer pays), each as a ratio to both. On a loaded machine read the ratios, not
the seconds. Where the rest goes: `python -X importtime -m privrl run pgc-a3c --bogus`.

    python benchmarks/bench_cli_error.py [--repeats 7] [--compare SRC]

`--compare SRC`: also time the bad flag and PGC-A3C's bad value with another privrl's source
tree first on the import path (e.g. `git archive <commit> src | tar -x -C /tmp/old`, then
`--compare /tmp/old/src`).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

CASES = {
    "privrl run pgc-a3c --bogus": [sys.executable, "-m", "privrl", "run", "pgc-a3c", "--bogus"],
    "privrl run pgc-a3 (a command typo)": [sys.executable, "-m", "privrl", "run", "pgc-a3"],
    # a bad value, checked by the config (a light module: no JAX), one per system
    **{f"privrl run {command} {flag} -1 (a bad value)": [
        sys.executable, "-m", "privrl", "run", command, *extra, flag, "-1"]
       for command, flag, extra in (
           ("pgc-a3c", "--epsilon", ()), ("dp-qlearning", "--learning-rate", ()),
           ("dp-reinforce", "--epsilon", ()), ("fedpg-cen", "--learning-rate", ()),
           ("fedrl", "--learning-rate", ()),
           ("fedrl-text2action", "--learning-rate", ("--data", ".")))},
    # the task and the observation box, as text (privrl.envs.spec, privrl.privacy.box)
    **{f"privrl run {' '.join(args)}": [sys.executable, "-m", "privrl", "run", *args]
       for args in (("pgc-a3c", "--private", "gravity=2:1"),
                    ("dp-reinforce", "--env", "./no_such_env.py:make"),
                    ("fedpg-cen", "--env", "CartPole-v1"),
                    ("ldp-reinforce", "--mode", "box", "--box-low", "3,0,0,0"),
                    ("pgc-a3c", "--mechanism", "./no_such_mechanism.py:make"))},
    # an unknown registry id: gymnax's read from its source, Gymnasium's by Gymnasium (no JAX)
    "privrl run pgc-a3c --env gymnax:NoSuch-v0": [
        sys.executable, "-m", "privrl", "run", "pgc-a3c", "--env", "gymnax:NoSuch-v0"],
    "privrl run pgc-a3c --env gymnasium:CartPol-v1": [
        sys.executable, "-m", "privrl", "run", "pgc-a3c", "--env", "gymnasium:CartPol-v1"],
    "privrl run dp-reinforce --env gymnasium:CartPole-v1 --private gravty=9:10": [
        sys.executable, "-m", "privrl", "run", "dp-reinforce", "--env", "gymnasium:CartPole-v1",
        "--private", "gravty=9:10"],
    # a field gymnax's environment lacks (the default task): its fields read from its source
    "privrl run pgc-a3c --private nosuch=1:2": [
        sys.executable, "-m", "privrl", "run", "pgc-a3c", "--private", "nosuch=1:2"],
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import jax'": [sys.executable, "-c", "import jax"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--compare", help="another privrl's src directory")
    args = ap.parse_args()
    cases = {name: (cmd, None) for name, cmd in CASES.items()}
    if args.compare:
        env = {**os.environ, "PYTHONPATH": args.compare, "PYTHONDONTWRITEBYTECODE": "1"}
        for name in ("privrl run pgc-a3c --bogus",
                     "privrl run pgc-a3c --epsilon -1 (a bad value)"):
            cases[f"{name} ({args.compare})"] = (CASES[name], env)
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):  # interleaved: a change in load hits every case alike
        for name, (cmd, env) in cases.items():
            start, used = time.perf_counter(), _children_cpu()
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(_children_cpu() - used)
            if name.startswith("privrl"):
                assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, \
                    done.stderr
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
          f"{args.repeats} repeats")
    jax = statistics.median(times["python -c 'import jax'"])
    bare = statistics.median(times["python -c pass"])
    for name, ts in times.items():
        median = statistics.median(ts)
        print(f"{name:64s} median {median:6.2f} s  (min {min(ts):.2f}, max {max(ts):.2f}), "
              f"{statistics.median(cpu[name]):5.2f} CPU-s; "
              f"{median / bare:5.1f}× python -c pass, {median / jax:5.2f}× import jax")


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far: on a loaded
    machine, what a case cost, whatever the wait."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
