"""Aggregator- and peer-side code. It sees only `Report`s and never imports environment or
rollout code: the buffered aggregator (paper 000), the star average and the push-sum gossip
over directed graphs (paper 004).

The names below load on first use, as `privrl`'s do: importing the package, which importing
any of its modules does (a Flower app reference such as `privrl.federation.flower:server_app`,
which `flwr run` looks up before submitting the bundle), imports no JAX."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_API = {
    **dict.fromkeys(("AggregatorState", "BufferedAggregator", "InvalidReportError"),
                    "privrl.federation.aggregator"),
    **dict.fromkeys(("PushSumState", "push_sum_add", "push_sum_apply", "push_sum_init",
                     "push_sum_mix", "push_sum_z"), "privrl.federation.pushsum"),
    **dict.fromkeys(("AggregatorService", "AggregatorSpec", "Submission", "Verdict", "replay"),
                    "privrl.federation.service"),
    **dict.fromkeys(("average_reports", "mean_from_sum"), "privrl.federation.star"),
    **dict.fromkeys(("TOPOLOGIES", "Topology", "TopologyError", "make_topology"),
                    "privrl.federation.topology"),
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(import_module(_API[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'privrl.federation' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
