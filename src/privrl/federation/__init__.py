"""Aggregator- and peer-side code. It sees only `Report`s and never imports environment or
rollout code: the buffered aggregator (paper 000), the star average and the push-sum gossip
over directed graphs (paper 004)."""

from privrl.federation.aggregator import AggregatorState, BufferedAggregator, InvalidReportError
from privrl.federation.pushsum import (
    PushSumState,
    push_sum_add,
    push_sum_apply,
    push_sum_init,
    push_sum_mix,
    push_sum_z,
)
from privrl.federation.service import (
    AggregatorService,
    AggregatorSpec,
    Submission,
    Verdict,
    replay,
)
from privrl.federation.star import average_reports, mean_from_sum
from privrl.federation.topology import (
    TOPOLOGIES,
    Topology,
    TopologyError,
    make_topology,
)

__all__ = [
    "TOPOLOGIES",
    "AggregatorService",
    "AggregatorSpec",
    "AggregatorState",
    "BufferedAggregator",
    "InvalidReportError",
    "PushSumState",
    "Submission",
    "Topology",
    "TopologyError",
    "Verdict",
    "average_reports",
    "make_topology",
    "mean_from_sum",
    "push_sum_add",
    "push_sum_apply",
    "push_sum_init",
    "push_sum_mix",
    "push_sum_z",
    "replay",
]
