"""Aggregator-side code. It sees only `Report`s and never imports environment or rollout code."""

from privrl.federation.aggregator import AggregatorState, BufferedAggregator, InvalidReportError
from privrl.federation.service import (
    AggregatorService,
    AggregatorSpec,
    Submission,
    Verdict,
    replay,
)

__all__ = ["AggregatorService", "AggregatorSpec", "AggregatorState", "BufferedAggregator",
           "InvalidReportError", "Submission", "Verdict", "replay"]
