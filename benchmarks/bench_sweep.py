"""Wall time, CPU time and peak memory of a full reproduction sweep (`privrl reproduce ...`).

Runs the real command in a child process and reports its wall time, CPU time (the child's
user + system) and peak resident memory (the child's ru_maxrss). `--system` picks the sweep
(default pgc-a3c); other arguments are passed to the command, e.g.

    python benchmarks/bench_sweep.py                       # the paper's sweep: 20 trials, 90k
    python benchmarks/bench_sweep.py --trials 4 --submissions 9000  # a quick check
    python benchmarks/bench_sweep.py --system dpsgd-rl --algorithms reinforce
"""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:  # on PYTHONPATH, not installed
        return "not installed"


def main() -> None:
    extra = sys.argv[1:]
    system = "pgc-a3c"
    if "--system" in extra:
        i = extra.index("--system")
        system = extra[i + 1]
        extra = extra[:i] + extra[i + 2:]
    out = Path(tempfile.mkdtemp(prefix="privrl-sweep-")) / "sweep"
    privrl = Path(sys.executable).with_name("privrl")
    # Without the console script (privrl on PYTHONPATH, not installed): the module.
    launcher = [str(privrl)] if privrl.exists() else [sys.executable, "-m", "privrl"]
    cmd = [*launcher, "reproduce", system, "--no-progress", "--out", str(out), *extra]
    print(f"# {' '.join(cmd)}")
    print(f"# {platform.machine()}, {os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"jax {metadata.version('jax')}, privrl {_version('privrl')}")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_mib = usage.ru_maxrss / 1024  # KiB on Linux
    print("| sweep | wall time | CPU time | peak RSS |")
    print("|---|---:|---:|---:|")
    print(f"| {system} {' '.join(extra) or 'paper defaults'} | {wall / 60:.1f} min "
          f"({wall:.0f} s) | {usage.ru_utime + usage.ru_stime:.0f} s | {peak_mib:,.0f} MiB |")
    print(f"# results in {out}")


if __name__ == "__main__":
    main()
