"""Which FedPG runs each runtime carries: the library's one statement of it.

`check_runtime` is called by the API entry points (`run_fedpg_dec_ray`, the Flower runner's
`plan_run`) and by `privrl run fedpg-cen / fedpg-dec`, so that the API and the CLI refuse the
same runs in the same words. What a runtime needs beyond the config (SuperNodes, a SecAgg+
threshold, a gymnax task) is checked where it is known (`privrl.systems.fedpg.flower.
plan_run`). The privacy budget (`epsilon_budget`) is enforced on every runtime: by the local
runner's ledger, by each Ray node's and by each Flower agent's (privrl.runtime.node).
"""

from __future__ import annotations

from privrl.config import ConfigError, fail
from privrl.runtime.rules import NAMES, one_trial
from privrl.systems.fedpg.config import FedPGConfig

__all__ = ["LOCAL_MECHANISMS", "SECURE_SUM", "check_runtime"]

# The mechanisms whose Reports travel one per agent on Flower, and the secure sum's
LOCAL_MECHANISMS = ("none", "gaussian", "laplace", "privunit", "privunitg")
SECURE_SUM = "distributed-gaussian"


def check_runtime(config: FedPGConfig, runtime: str) -> None:
    """ConfigError naming the field (or `runtime`) if `runtime` ("local", "ray", "flower")
    cannot run `config`: Ray runs one FedPG-Dec trial (its nodes gossip peer to peer); Flower
    runs one plain FedPG-Cen trial (no adaptive clip, Byzantine agents, robust rule or
    shuffler) with each agent's Report (LOCAL_MECHANISMS) or a secure sum calibrated from ε."""
    if runtime not in NAMES:
        raise ConfigError("runtime", f"must be one of {', '.join(NAMES)}, got {runtime!r}")
    one_trial(config.trials, runtime)
    if not config.roster and (runtime != "flower" or config.mechanism != SECURE_SUM):
        fail("roster", "the fleet roster belongs to the Flower runtime's secure sum "
                       f"({SECURE_SUM}); there is nothing to turn off here")
    if runtime == "ray" and config.algorithm != "dec":
        fail("runtime", "the Ray runtime runs FedPG-Dec (nodes exchanging push-sum shares); "
                        "run FedPG-Cen with the local or flower runtime")
    if runtime != "flower":
        return
    if config.algorithm != "cen":
        fail("runtime", "FedPG-Dec cannot run on Flower: its nodes exchange push-sum shares "
                        "peer to peer, and Flower carries messages only between the ServerApp "
                        "and each SuperNode (use local or ray)")
    for field, on in (("adaptive_clip", config.adaptive_clip), ("byzantine", config.byzantine),
                      ("robust", config.robust != "none"), ("shuffle", config.shuffle)):
        if on:
            fail(field, "the Flower runtime runs plain FedPG-Cen (no adaptive clip, Byzantine "
                        "agents, robust rule or shuffler)")
    if config.public_eval_every is not None:
        fail("public_eval_every", "the best candidate on the public simulator is the local "
                                  "runner's (run it with the local runtime)")
    if config.mechanism not in (*LOCAL_MECHANISMS, SECURE_SUM):
        fail("mechanism", f"the Flower runtime runs {', '.join(LOCAL_MECHANISMS)} (each "
                          f"agent's Report) or {SECURE_SUM} (a secure sum), not "
                          f"{config.mechanism}; run it with the local runtime")
    if config.mechanism == SECURE_SUM and config.epsilon is None:
        fail("epsilon", "the Flower runtime's secure sum is calibrated from ε (a secure sum of "
                        "discrete noise shares)")
