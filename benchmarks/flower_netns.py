"""PGC-A3C on Flower across real network boundaries, on one machine (issue 52): the SuperLink
in one Linux network namespace, each SuperNode with its agent executor in a namespace of its
own, joined by veth pairs to a bridge in the SuperLink's namespace; traffic only inside them.
It follows docs/flower.md's multi-machine recipe: TLS with a certificate for the SuperLink's
address (10.52.0.1) from a CA made for the run, SuperNode authentication with each node's
registered key, each agent pinning the bundle's hash.

    sudo .venv/bin/python benchmarks/flower_netns.py [--nodes 2] [--submissions 8]

Needs root and iproute2 (`ip netns`); otherwise it says why and exits 0 without running
(SKIP). The namespaces (privrl-link, privrl-node<i>) are removed at the end, also after a
failure. Its recorded output is in benchmarks/log/23-flpace.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINK_NS, NODE_NS = "privrl-link", "privrl-node"
LINK_IP, NET = "10.52.0.1", "10.52.0"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def why_not() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if sys.platform != "linux":
        return f"network namespaces are Linux's; this is {sys.platform}"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2) on PATH"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"privrl-probe-{os.getpid()}"
    out = ip("netns", "add", probe, check=False)
    if out.returncode != 0:
        return f"`ip netns add` failed: {out.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def setup(nodes: int) -> None:
    """The link namespace with a bridge at LINK_IP/24; node i's namespace with a veth into the
    bridge at NET.(i+2)/24; loopback up everywhere (each SuperNode's runtime API is on its
    namespace's own 127.0.0.1)."""
    ip("netns", "add", LINK_NS)
    ip("-n", LINK_NS, "link", "set", "lo", "up")
    ip("-n", LINK_NS, "link", "add", "br0", "type", "bridge")
    ip("-n", LINK_NS, "addr", "add", f"{LINK_IP}/24", "dev", "br0")
    ip("-n", LINK_NS, "link", "set", "br0", "up")
    for i in range(nodes):
        ns = f"{NODE_NS}{i}"
        ip("netns", "add", ns)
        ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "add", f"pv{i}a", "netns", LINK_NS, "type", "veth", "peer", "name", "eth0",
           "netns", ns)
        ip("-n", LINK_NS, "link", "set", f"pv{i}a", "master", "br0")
        ip("-n", LINK_NS, "link", "set", f"pv{i}a", "up")
        ip("-n", ns, "addr", "add", f"{NET}.{i + 2}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")


def teardown(nodes: int) -> None:
    for ns in [LINK_NS, *(f"{NODE_NS}{i}" for i in range(nodes))]:
        ip("netns", "del", ns, check=False)


def inside(nodes: int, submissions: int, out: Path) -> int:
    """In the link namespace: the run, each SuperNode and agent executor started in its
    node's namespace (`ip netns exec`)."""
    from privrl.runtime.flower import LocalDeployment, _slot
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
    from privrl.systems.pgc_a3c.flower import run_pgc_a3c_flower

    def where(name: str) -> list[str]:
        slot = _slot(name)
        return [] if slot is None else ["ip", "netns", "exec", f"{NODE_NS}{slot}"]

    def deployment(n: int, logs: Path) -> LocalDeployment:
        return LocalDeployment(n, logs, startup_s=180.0, host=LINK_IP, prefix=where)

    cfg = PGCA3CConfig(preset="tuned", trials=1, mechanism="laplace", epsilon=2.0,
                       submissions=submissions, parallel_agents=nodes, seed=1)
    start = time.perf_counter()
    run = run_pgc_a3c_flower(cfg, out, nodes, deployment=deployment)
    print(f"run: {time.perf_counter() - start:.1f} s, accepted {run.status['accepted']} of "
          f"{submissions}, refused {len(run.refused)}, dead SuperNodes {run.dead}, "
          f"error {run.error}")
    link = (out / "logs" / "superlink.log").read_text()
    print("SuperLink served TLS on", LINK_IP, ":", f"Uvicorn running on https://{LINK_IP}" in link)
    for i in range(nodes):
        said = (out / "logs" / f"supernode{i}.log").read_text()
        print(f"SuperNode {i} (namespace {NODE_NS}{i}, {NET}.{i + 2}) authenticated:",
              "SuperNode ID" in said)
    return 0 if run.error is None and run.status["accepted"] == submissions else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--submissions", type=int, default=8)
    parser.add_argument("--inside", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside is not None:
        return inside(args.nodes, args.submissions, args.inside)
    if (reason := why_not()) is not None:
        print(f"SKIP: {reason}")
        return 0
    teardown(args.nodes)  # a previous run's, if it was killed
    try:
        setup(args.nodes)
        print(ip("-n", f"{NODE_NS}0", "-brief", "addr").stdout.strip())
        # A node's namespace reaches the SuperLink's address and nothing of the host's.
        host = ip("-n", f"{NODE_NS}0", "route").stdout.strip()
        print(f"{NODE_NS}0 routes: {host}")
        with tempfile.TemporaryDirectory() as d:
            return subprocess.run(["ip", "netns", "exec", LINK_NS, sys.executable, __file__,
                                   "--nodes", str(args.nodes), "--submissions",
                                   str(args.submissions), "--inside", str(Path(d) / "run")],
                                  check=False).returncode
    finally:
        teardown(args.nodes)


if __name__ == "__main__":
    sys.exit(main())
