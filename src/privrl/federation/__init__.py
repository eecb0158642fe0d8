"""Aggregator-side code. It sees only `Report`s and never imports environment or rollout code."""

from privrl.federation.aggregator import AggregatorState, BufferedAggregator, InvalidReportError

__all__ = ["AggregatorState", "BufferedAggregator", "InvalidReportError"]
