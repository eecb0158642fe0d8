"""Which PGC-A3C runs each runtime carries: the library's one statement of it.

`check_runtime` is called by the API entry points (`run_pgc_a3c_ray`, `run_pgc_a3c_flower`)
and by `privrl run pgc-a3c`, so that the API and the CLI refuse the same runs in the same
words. Each agent's budget is enforced on every runtime (the aggregator's or the shuffler's
ledger on Ray, each agent's own on Flower: privrl.runtime.node).
"""

from __future__ import annotations

from privrl.config import ConfigError, fail
from privrl.runtime.rules import NAMES, one_trial
from privrl.systems.pgc_a3c.algorithm import ADAPTIVE_LEVERS, PGCA3CConfig

__all__ = ["DISTRIBUTED_OPTIMIZERS", "check_runtime"]

# The optimizers a distributed aggregator (an AggregatorSpec, its checkpointable description)
# can rebuild.
DISTRIBUTED_OPTIMIZERS = ("sgd", "adam")


def check_runtime(config: PGCA3CConfig, runtime: str) -> None:
    """ConfigError naming the field if `runtime` ("local", "ray", "flower") cannot run
    `config`: Ray and Flower run one trial with an sgd or adam aggregator; Flower has no
    shuffler."""
    if runtime not in NAMES:
        raise ConfigError("runtime", f"must be one of {', '.join(NAMES)}, got {runtime!r}")
    one_trial(config.trials, runtime)
    if runtime == "local":
        return
    if config.server_optimizer not in DISTRIBUTED_OPTIMIZERS:
        fail("server_optimizer", f"the {NAMES[runtime]} runtime's aggregator runs "
                                 f"{' or '.join(DISTRIBUTED_OPTIMIZERS)}, got "
                                 f"{config.server_optimizer} (run it with the local runtime)")
    for lever in ADAPTIVE_LEVERS:  # the aggregator's clip state, step and public evaluation
        if getattr(config, lever) not in (False, None):
            fail(lever, f"the {NAMES[runtime]} runtime's aggregator has no adaptive levers "
                        "yet (run it with the local runtime)")
    if config.episodes_per_report != 1:
        fail("episodes_per_report", f"the {NAMES[runtime]} runtime's agents play one episode "
                                    "per report (run it with the local runtime)")
    if runtime == "flower" and config.shuffle:
        fail("shuffle", "the Flower runtime has no shuffler (yet)")
