"""Aggregator- and peer-side code. It sees only `Report`s and never imports environment or
rollout code: the buffered aggregator (paper 000), the star average and the push-sum gossip
over directed graphs (paper 004).

The names below load on first use (privrl.lazy, as privrl.privacy's and privrl.envs' do):
importing the package, which importing any of its modules does (a Flower app reference such as
`privrl.federation.flower:server_app`, which `flwr run` looks up before submitting the bundle),
imports no JAX."""

from __future__ import annotations

from privrl.lazy import lazy_names

# name -> the module of privrl.federation that defines it
_WHERE = {
    **dict.fromkeys(("AggregatorState", "BufferedAggregator", "InvalidReportError"),
                    "aggregator"),
    **dict.fromkeys(("PushSumState", "push_sum_add", "push_sum_apply", "push_sum_init",
                     "push_sum_mix", "push_sum_z"), "pushsum"),
    **dict.fromkeys(("AggregatorService", "AggregatorSpec", "Submission", "Verdict", "replay"),
                    "service"),
    **dict.fromkeys(("average_reports", "mean_from_sum"), "star"),
    **dict.fromkeys(("TOPOLOGIES", "Topology", "TopologyError", "make_topology"), "topology"),
}
__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
