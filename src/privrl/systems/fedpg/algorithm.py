"""FedPG-Cen and FedPG-Dec: federated variance-reduced policy gradient (paper 004), read top to
bottom. FedPG-Cen is FedPG-BR (Fan et al., NeurIPS 2021), its Byzantine filter optional
(`robust`; Byzantine agents: `byzantine`, `attack`, privrl.systems.fedpg.byzantine); FedPG-Dec
is the same local update over a time-varying directed graph with (correct) push-sum.

The system is split so that each part reads on its own:
- privrl.systems.fedpg.config: `FedPGConfig` (FedPG-BR's CartPole setting by default), its
  presets and validation, and what follows from a config alone (Dec's graph, Cen's lanes,
  which settings run as one program);
- privrl.systems.fedpg.source: where a round's episodes come from: the jitted gymnax rollout
  or a Gymnasium task's host rollout, and how each composes the round's pieces;
- privrl.systems.fedpg.scsg: the learner: its policy, the gradient estimate g(τ|θ), and the
  SCSG loop the server (Cen) and every node (Dec) run;
- privrl.systems.fedpg.cen: FedPG-Cen's round (Algorithm 1): agents' μ_tᵏ through the
  mechanism, the server's average μ_t, its SCSG loop;
- privrl.systems.fedpg.dec: FedPG-Dec's round (Algorithm 2): every node's SCSG round and
  released update, the push-sum step and gossip;
- here: `FedPG`, a resolved config on its task with its mechanism and its round, one round
  per variant with its episode source passed in (default: the task's own).

The task (privrl.envs.task) is FedPG-BR's CartPole-v1 by default, each agent with its own
gravity; any task brings its environment, rewards and per-agent private dynamics, and the
policy (default: FedPG-BR's MLP, or a user's flax module) is sized from its spaces. The local
runner (privrl.systems.fedpg.local) computes trials one at a time per host device, each round
one jitted program (on a Gymnasium task: the same round, piece by piece around the host
rollout); the Ray runner (privrl.systems.fedpg.ray) computes each Dec node's part in its actor.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import Array

from privrl.compute.programs import alone_or_program, settings_program
from privrl.config import ConfigError
from privrl.envs.task import Task, cartpole_task, resolve_task
from privrl.federation.pushsum import push_sum_init, push_sum_z
from privrl.privacy.central import CentralGaussian, kept_per_coordinate
from privrl.privacy.discrete_sum import DiscreteGaussianSum, secure_sum_bits
from privrl.privacy.distributed import AdaptiveClip, DistributedGaussianMechanism
from privrl.privacy.ldp_vector import unit_mechanism
from privrl.privacy.mechanisms import (
    GaussianMechanism,
    IdentityMechanism,
    LaplaceMechanism,
    Mechanism,
    privatize_setting,
    setting_params,
    stack_params,
)
from privrl.privacy.plan import PlanError, plan_discrete
from privrl.privacy.report import Guarantee, Report
from privrl.privacy.user import MechanismRequest, is_user_mechanism, user_mechanism
from privrl.systems.fedpg.cen import CenPlan, CenRound
from privrl.systems.fedpg.config import (
    ACCOUNTED_MECHANISMS,
    ALGORITHMS,
    DEFAULT_PARTICIPANTS,
    IMPORTANCE,
    MECHANISMS,
    ONE_PROGRAM_MECHANISMS,
    OPTIMIZERS,
    PRESETS,
    PURE_MECHANISMS,
    SETTING_FIELDS,
    FedPGConfig,
    build_topology,
    one_program_field,
    participant_slots,
)
from privrl.systems.fedpg.dec import DecRound, NodePlan, NodeUpdate
from privrl.systems.fedpg.scsg import Learner
from privrl.systems.fedpg.source import Episodes, EpisodeSource, HostSource, JittedSource
from privrl.systems.fedpg.state import FedPGState, RoundInfo, keep, node_noise_key

__all__ = [
    "ACCOUNTED_MECHANISMS", "ALGORITHMS", "DEFAULT_PARTICIPANTS", "IMPORTANCE", "MECHANISMS",
    "ONE_PROGRAM_MECHANISMS", "OPTIMIZERS", "PRESETS", "PURE_MECHANISMS",
    "SETTING_FIELDS", "CenPlan", "Episodes", "FedPG", "FedPGConfig", "FedPGState",
    "HostSource", "JittedSource", "NodePlan", "NodeUpdate", "RoundInfo", "build_topology",
    "discrete_sum_mechanism", "make_mechanism", "node_noise_key", "one_program_field",
    "participant_slots",
    "settings_algorithm",
]


class FedPG(Learner):
    """One resolved config on its task: `init(key)`, `round(state, mixing, live)`; its
    mechanism (`release`) and its round (`variant`: FedPG-Cen's or FedPG-Dec's)."""

    def __init__(self, config: FedPGConfig, task: Task | None = None,
                 model: nn.Module | None = None) -> None:
        """`task` (default: the one `config.env`/`config.private_params` name, else FedPG-BR's
        CartPole with per-agent `gravities`) and `model` (a flax module mapping one observation
        to the logits of the task's actions; default: FedPG-BR's MLP, `hidden` units, sized
        from the task's spaces)."""
        cfg, task = resolve_task(config.resolved(), task, partial(
            cartpole_task, "v1", config.gravities))
        super().__init__(cfg, task, model)
        self.mechanism = make_mechanism(cfg, self.dim)
        # central-gaussian: the noise the trusted server adds to its (robust) aggregate
        self.central = central_noise(cfg)
        self.topology = build_topology(cfg) if cfg.algorithm == "dec" else None
        self.variant: CenRound | DecRound = (CenRound(self) if cfg.algorithm == "cen"
                                             else DecRound(self))
        # The settings this algorithm runs, each as its own FedPG (its config, mechanism and
        # graph): itself, or those of `for_settings`.
        self.settings: list[FedPG] = [self]
        # The settings' mechanisms, whose parameters the trials carry as data (`for_settings`);
        # None: `mechanism`, the config's, compiled in.
        self.setting_mechanisms: tuple[Mechanism, ...] | None = None
        self._public: Any = None  # `public_returns`' episodes (jitted on a gymnax task)

    def step_noise_multiplier(self) -> float | None:
        """distributed-gaussian's σ is its discrete mechanism's, calibrated for `dim`."""
        if self.config.mechanism == "distributed-gaussian":
            return discrete_sum_mechanism(self.config, self.dim).noise_multiplier
        return self.config.noise_multiplier

    @classmethod
    def for_settings(cls, configs: Sequence[FedPGConfig], task: Task | None = None,
                     model: nn.Module | None = None) -> FedPG:
        """One algorithm for several settings that differ only in SETTING_FIELDS (mechanism
        family and its parameters, Dec's graph): every trial carries its setting's mechanism
        as a parameter pytree (`FedPGState.setting`, from `setting_data`) and the runner
        passes each trial its setting's mixing matrix, so one jitted round runs them all.
        ConfigError names the field that keeps them apart."""
        algo = settings_program(cls, configs, task, model, one_program_field,
                                f"{', '.join(SETTING_FIELDS)} (mechanisms "
                                f"{', '.join(ONE_PROGRAM_MECHANISMS)}, without float-safe "
                                "noise; or all the sampled secure sum at one K and clip, "
                                "differing in σ and σ_b)", _mechanisms_as_data)
        return algo

    def setting_data(self, settings: Sequence[int]) -> Any:
        """Per-trial data: trial k runs setting settings[k] (an index into `self.settings`)."""
        assert self.setting_mechanisms is not None
        if isinstance(self.mechanism, DistributedGaussianMechanism):  # ONE_PROGRAM_SUMS
            return stack_params([self.setting_mechanisms[i].setting_params()  # type: ignore
                                 for i in settings])
        return stack_params([setting_params(self.setting_mechanisms[i], self.dim)
                             for i in settings])

    def sum_guarantee(self) -> Guarantee | None:
        """In a program of sampled-secure-sum settings, what its shares state: the guarantee
        of the setting with the largest ε per round, true of every trial's (each trial's own
        is its setting's, which its ledger charges); None otherwise (the mechanism's own)."""
        if self.setting_mechanisms is None or not isinstance(self.mechanism,
                                                             DistributedGaussianMechanism):
            return None
        return max((m.guarantee for m in self.setting_mechanisms), key=lambda g: g.epsilon)

    def init(self, key: Array) -> FedPGState:
        """All Dec nodes start from the same θ (FedPG-BR initializes one policy)."""
        cfg = self.config
        k_theta, k_run = jax.random.split(key)
        theta = jnp.tile(self.model.init(k_theta)[None], (cfg.learners, 1))
        opt_state = jax.vmap(self.optimizer.init)(theta)
        zero = jnp.zeros((), jnp.int32)
        clip = jnp.asarray(cfg.clip, jnp.float32) if cfg.adaptive_clip else None
        # FedPG-BR's filter: σ's scale before the server has played (the longest episode: the
        # widest threshold, so round 0 keeps rather than drops)
        length = (jnp.asarray(cfg.max_episode_steps, jnp.float32) if cfg.robust == "fedpg-br"
                  else None)
        return FedPGState(push_sum_init(theta), opt_state, k_run,
                          jnp.zeros((cfg.agents,), jnp.int32), zero, clip=clip, length=length)

    # --- one round -----------------------------------------------------------------------
    def round(self, state: FedPGState, mixing: Array, live: Array,
              source: EpisodeSource | None = None) -> tuple[FedPGState, RoundInfo]:
        """One round of one trial (`mixing`: Dec's graph this round), its episodes from
        `source` (default: the task's own); a trial with `live` False does nothing."""
        source = self.source if source is None else source
        round_key = jax.random.fold_in(state.key, state.rounds)
        new, info = self.variant.round(source, state, mixing, round_key, live)
        return source.piece(keep)(live, new, state), info

    def dec_node_update(self, z: Array, opt_state: Any, env_params: Any, key: Array,
                        live: Array, noise_key: Array | None = None, setting: Any = None
                        ) -> NodeUpdate:
        """FedPG-Dec: one node's part of a round (`DecRound.node_update`) with the task's
        episode source, from its own z_k, optimizer state, private environment and keys: the
        local runner computes it for each node in turn; the Ray runner calls it inside each
        node's actor (jitted, or on a Gymnasium task piece by piece)."""
        if not isinstance(self.variant, DecRound):
            raise TypeError("dec_node_update is FedPG-Dec's (algorithm='dec')")
        return self.variant.node_update(self.source, z, opt_state, env_params, key, live,
                                        noise_key, setting)

    def release(self, setting: Any, key: Array, x: Array) -> Report:
        """What an agent sends, through the mechanism: the config's, or in a program of
        settings the trial's own (`setting`, its SettingParams)."""
        if setting is None:
            return self.mechanism.privatize(key, x)
        assert self.setting_mechanisms is not None
        return privatize_setting(self.setting_mechanisms, ONE_PROGRAM_MECHANISMS, setting,
                                 key, x)

    def public_returns(self, thetas: Array, key: Array) -> Array:
        """Each θ's (n, d) returns (n, episodes) on the task's PUBLIC simulator: the
        environment's default parameters (`Task.params`, no agent's private draw),
        `public_eval_episodes` episodes from `key` (the same for every θ), actions sampled
        from the policy as the agents play them. What the server's best-candidate choice
        reads (--public-eval-every; post-processing)."""
        n, e = thetas.shape[0], self.config.public_eval_episodes
        params = jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(jnp.asarray(x), (n, *jnp.shape(x))), self.task.params)
        if self._public is None:
            self._public = (self.source.sample if self.task.host
                            else jax.jit(self.source.sample))
        ep = self._public(thetas, params, jnp.ones((n, e), bool), key)
        return jnp.sum(ep.rewards, axis=-1)

    def consensus_params(self, state: FedPGState) -> Array:
        """The learned policy: θ (Cen) or the mean of the nodes' z (Dec), shape (d,)."""
        return jnp.mean(push_sum_z(state.gossip), axis=0)


def settings_algorithm(configs: Sequence[FedPGConfig], task: Task | None = None,
                       model: nn.Module | None = None) -> FedPG:
    """The algorithm that runs `configs` together: `FedPG.for_settings`, or for one setting
    that could not join a program, its own `FedPG`. A setting that could join one computes
    through the program's path even alone, so that it gets the same floats alone, in any
    program and on every runtime."""
    return alone_or_program(FedPG, configs, task, model, one_program_field)


def _mechanisms_as_data(algo: FedPG, each: Sequence[FedPG]) -> None:
    """Settings `each` as per-trial data of `algo`: their mechanisms, whose parameters the
    trials carry (a trial's mixing matrix is the runner's)."""
    algo.setting_mechanisms = tuple(a.mechanism for a in each)


def central_noise(cfg: FedPGConfig) -> CentralGaussian | None:
    """central-gaussian: the server's noise on its aggregate, scaled to the rule's
    sensitivity (the agents' L1 clip to C/2 puts any two updates within C in L2)."""
    if cfg.mechanism != "central-gaussian":
        return None
    if cfg.noise_multiplier is None:
        raise ValueError("resolve the config first (FedPGConfig.resolved)")
    return CentralGaussian(cfg.noise_multiplier, cfg.clip, kept_per_coordinate(
        cfg.robust, cfg.agents, int(cfg.byzantine_alpha * cfg.agents)))


def _per_report(cfg: FedPGConfig) -> float:
    """A pure mechanism's ε per release, as the resolved config's plan set it."""
    if cfg.epsilon_per_report is None:
        raise ValueError("resolve the config first (FedPGConfig.resolved)")
    return cfg.epsilon_per_report


def discrete_sum_mechanism(cfg: FedPGConfig, dim: int, min_honest: int | None = None,
                           bits: int | None = None) -> DiscreteGaussianSum:
    """distributed-gaussian's mechanism, for a local run and a Flower deployment alike (one
    calibration, so both state the same ε for the same request): the distributed discrete
    Gaussian on updates of length `dim`, its noise calibrated to the config's ε at δ over its
    calibration rounds (or σ = noise_multiplier given), counting `min_honest` honest shares
    (default: the config's, else K), over a sum modulo 2^`bits` (default: what SecAgg+ carries
    with one agent per SuperNode, the local run's). ConfigError if no grid carries it."""
    m = (cfg.agents if cfg.min_honest is None else cfg.min_honest) if min_honest is None \
        else min_honest
    b = secure_sum_bits(cfg.agents) if bits is None else bits

    def make(z: float) -> DiscreteGaussianSum:
        return DiscreteGaussianSum(cfg.clip, dim, cfg.agents, m, z, b, delta=cfg.delta)

    rounds = cfg.calibration_rounds()
    try:
        plan = plan_discrete(cfg.privacy_request(), rounds, lambda z: make(z).epsilon(rounds))
        return make(plan.noise_multiplier)
    except PlanError as e:
        raise ConfigError(e.field, e.message) from None
    except ValueError as e:  # the grid cannot carry the noise asked for
        field = "epsilon" if cfg.noise_multiplier is None else "noise_multiplier"
        raise ConfigError(field, f"no discrete mechanism reaches it: {e}") from None


def make_mechanism(cfg: FedPGConfig, dim: int | None = None
                   ) -> Mechanism | DistributedGaussianMechanism | DiscreteGaussianSum:
    """The randomizer applied to what each agent sends (default: none, no guarantee); a user's
    own (privrl.privacy.user) is asked for ε per release and the plan's δ per release (0 under
    a pure budget; δ/(2R) under an (ε, δ) one), on inputs of length `dim`."""
    needs_dim = is_user_mechanism(cfg.mechanism) or cfg.mechanism == "distributed-gaussian"
    if needs_dim and dim is None:
        raise ValueError(f"{cfg.mechanism} needs the input length: FedPG(cfg).mechanism")
    if is_user_mechanism(cfg.mechanism):
        mech = user_mechanism(cfg.mechanism, MechanismRequest(
            _per_report(cfg), cfg.privacy_plan().delta_per_report, cfg.clip, dim))
        if not cfg.audit_plugin:
            return mech
        from privrl.audit.quick import audited

        return audited(mech, dim, cfg.clip)
    if cfg.mechanism == "distributed-gaussian":
        return discrete_sum_mechanism(cfg, dim)
    if cfg.mechanism == "distributed-gaussian-continuous":
        if cfg.noise_multiplier is None:
            raise ValueError("resolve the config first (FedPGConfig.resolved)")
        adaptive = (AdaptiveClip(cfg.clip_count_stddev, cfg.clip_quantile, cfg.clip_lr)
                    if cfg.adaptive_clip else None)
        return DistributedGaussianMechanism(cfg.noise_multiplier, cfg.clip, cfg.agents,
                                            cfg.min_honest, cfg.sampling_rate, cfg.delta,
                                            cfg.accountant, adaptive)
    if cfg.mechanism == "laplace":
        return LaplaceMechanism(_per_report(cfg), cfg.clip, secure=cfg.secure_noise)
    if cfg.mechanism == "central-gaussian":  # the agents clip (L1, to C/2); the server noises
        return IdentityMechanism(cfg.clip)
    if cfg.mechanism in ("privunit", "privunitg"):
        return unit_mechanism(cfg.mechanism, _per_report(cfg), cfg.clip)
    if cfg.mechanism == "gaussian":
        if cfg.noise_multiplier is None:
            raise ValueError("resolve the config first (FedPGConfig.resolved)")
        return GaussianMechanism(cfg.noise_multiplier, cfg.clip, cfg.delta,
                                 secure=cfg.secure_noise)
    return IdentityMechanism()

