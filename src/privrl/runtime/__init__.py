"""Runners: the local vectorized runner (default); a Ray runner is planned."""
