"""FedRL on Text2Action (paper 002, section 5.2, Table 2) and its baselines.

Two parties tag the same texts word by word: α sees the part-of-speech ids (a POS embedding it
trains with its Text-CNN) and holds the rewards; β sees the words through fixed word vectors
(word2vec trained on the fold's training texts) and never gets a reward. They learn through
the unchanged two-party protocol of Grid-World FedRL (privrl.federation.vertical: Channel,
AlphaParty, BetaParty, train_exchange): β releases its Q outputs with Gaussian noise, α picks
the action from the shared MLP over [Q̂α | Q̂β] (4 → 4 ReLU → 2) and computes the TD targets.

Baselines (the paper's Table 2): DQN-alpha (α alone: POS + tags), DQN-full (one Text-CNN on POS,
word vectors and tags: no privacy), FCN-alpha / FCN-full (the same networks trained with
cross-entropy on the expert's tag at each word, the expert's tags before it in the state).

All learners share `init(key, texts)`, `train_chunk(state, texts)`, `params(state)` and
`evaluate(params, texts, key, variant) -> (final tags, total reward)`: the runner
(privrl.systems.fedrl_text.local) vmaps them over runs. Every setting and its source:
docs/text2action.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array

from privrl.envs import text2action as t2a
from privrl.federation.vertical import (
    AlphaParty,
    AlphaState,
    BetaParty,
    BetaState,
    Channel,
    PartySpec,
    train_exchange,
)
from privrl.nets.text import TextModel, federated_text_head, text_cnn
from privrl.privacy.clipping import clip_l2
from privrl.privacy.mechanisms import Mechanism, UnboundedGaussianParams
from privrl.privacy.qoutput import (
    UnboundedQNoise,
    baseline_privacy,
    q_mechanism,
    q_release_privacy,
)
from privrl.replay import (
    FCNState,
    dqn_update,
    empty_memory,
    epsilon_greedy,
    store,
    supervised_update,
    zeroed,
)
from privrl.systems.fedrl_text.config import TextConfig

COLUMNS = {"alpha": ("pos",), "beta": ("word",), "full": ("pos", "word")}


def text_config(preset: str = "paper", **overrides: Any) -> TextConfig:
    return TextConfig.from_preset(preset, **overrides).resolved()


@dataclass(frozen=True)
class Shapes:
    """The sizes the networks are built from: fixed per corpus, so that one compiled program
    serves every fold (a fold's word vectors travel in Texts.vectors and are put into θ)."""

    width: int  # padded text length
    num_pos: int  # POS vocabulary size (row 0 = padding)
    num_words: int  # rows of every fold's word-vector table


class Stats(NamedTuple):
    episodes: Array
    return_sum: Array
    steps: Array


def zero_stats() -> Stats:
    return Stats(jnp.int32(0), jnp.float32(0.0), jnp.int32(0))


class _Learner:
    """What every learner shares: its nets' construction, the episode loop's environment part
    and greedy evaluation."""

    variants: tuple[str, ...] = ("greedy",)

    def __init__(self, config: TextConfig, features: Shapes) -> None:
        self.config = cfg = config.resolved()
        self.name = cfg.mode
        self.features = features
        self.spec = cfg.reward_spec()
        self.width = features.width

    def net(self, party: str) -> TextModel:
        cfg, f = self.config, self.features
        return text_cnn(COLUMNS[party], f.width, f.num_pos, f.num_words, word_dim=cfg.word_dim,
                        pos_dim=cfg.pos_dim, tag_dim=cfg.tag_dim, filters=cfg.filters,
                        hidden=cfg.hidden)

    def observe(self, texts: t2a.Texts, env: t2a.Episode, party: str) -> Array:
        return jax.vmap(lambda e: t2a.observe(texts, e, COLUMNS[party]))(env)

    def reset(self, texts: t2a.Texts, key: Array, n: int) -> t2a.Episode:
        idx = jax.random.randint(key, (n,), 0, jnp.sum(texts.length > 0))  # padding: at the end
        return jax.vmap(lambda i: t2a.start(i, self.width))(idx)

    def advance(self, texts: t2a.Texts, env: t2a.Episode, action: Array, stats: Stats,
                ep_return: Array, key: Array
                ) -> tuple[t2a.Episode, t2a.Episode, Array, Array, Array, Stats]:
        """Step E episodes; finished ones restart on random training texts. Returns (stepped
        state before restarts, next state, reward, done, episode returns, stats)."""
        stepped, r, done = jax.vmap(lambda e, a: t2a.step(self.spec, texts, e, a))(env, action)
        ret = ep_return + r
        r = r / self.config.reward_scale  # what the learner sees (1 = the paper's reward)
        stats = Stats(stats.episodes + jnp.sum(done),
                      stats.return_sum + jnp.sum(jnp.where(done, ret, 0.0)),
                      stats.steps + action.shape[0])
        fresh = self.reset(texts, key, action.shape[0])
        nxt = jax.tree_util.tree_map(
            lambda f, o: jnp.where(done.reshape((-1,) + (1,) * (o.ndim - 1)), f, o),
            fresh, stepped)
        return stepped, nxt, r, done, jnp.where(done, 0.0, ret), stats

    def greedy(self, texts: t2a.Texts, key: Array,
               q_fn: Any) -> tuple[Array, Array]:
        """Play every text greedily: q_fn(key, text index) -> (tags -> Q). Returns the final
        tags (T, W) and the total reward over all texts."""
        width = self.width

        def one(i: Array, k: Array) -> tuple[Array, Array]:
            q_of = q_fn(k, i)

            def body(c: tuple[t2a.Episode, Array, Array], t: Array) -> tuple[Any, None]:
                ep, total, kk = c
                kk, k_step = jax.random.split(kk)
                live = t < texts.length[i]
                a = jnp.argmax(q_of(k_step, ep.tags), -1).astype(jnp.int32)
                nxt, r, _ = t2a.step(self.spec, texts, ep, a)
                ep = jax.tree_util.tree_map(lambda n, o: jnp.where(live, n, o), nxt, ep)
                return (ep, total + jnp.where(live, r, 0.0), kk), None

            (ep, total, _), _ = jax.lax.scan(body, (t2a.start(i, width), jnp.float32(0.0), k),
                                             jnp.arange(width))
            return ep.tags, total

        n = texts.length.shape[0]
        tags, totals = jax.vmap(one)(jnp.arange(n), jax.random.split(key, n))
        return tags, jnp.sum(totals)

    def copy_targets(self) -> Array:
        """The target rule as data in the learner's state (True: copy, False: frozen), so that
        runs of either rule share one compiled training program."""
        return jnp.asarray(self.config.targets == "copy")

    def sync_targets(self, steps: Array, copy: Array) -> Array:
        """Whether the update numbered `steps` ends with a target copy (never when frozen:
        `copy` is the state's `copy_targets`)."""
        return ((steps + 1) % self.config.target_period == 0) & copy

    def releases(self, *args: Any) -> dict[str, int]:
        return {}

    def privacy_record(self, *args: Any) -> dict[str, Any]:
        what = ("α's POS features and rewards only (a single party: nothing is exchanged)"
                if self.name.endswith("alpha") else "both parties' features pooled in one place")
        return baseline_privacy(self.name, what)


# --- FedRL ---------------------------------------------------------------------------------

class FedRLState(NamedTuple):
    alpha: AlphaState
    beta: BetaState
    env: t2a.Episode
    ep_return: Array
    steps: Array
    key: Array
    stats: Stats
    copy_targets: Array  # the target rule (_Learner.copy_targets)


def release(mech: Mechanism, key: Array, q: Array, clip: float | None) -> Array:
    """Q outputs (…, 2) through the mechanism, clipped to L2 norm `clip` first in bounded mode
    (the same function as a party's `released`, on Q computed by the split forward pass)."""
    if clip is not None:
        q = jax.vmap(lambda v: clip_l2(v, clip))(q.reshape(-1, q.shape[-1])).reshape(q.shape)
    return each_vector(lambda k, v: mech.privatize(k, v).value, key, q)


def each_vector(fn: Any, key: Array, q: Array) -> Array:
    """`fn(key_i, v_i)` for each last-axis vector v_i of `q`, each with its own split key."""
    flat = q.reshape(-1, q.shape[-1])
    return jax.vmap(fn)(jax.random.split(key, flat.shape[0]), flat).reshape(q.shape)


class FedRLText(_Learner):
    """FedRL on Text2Action through the vertical protocol (one text per env, word by word)."""

    variants = ("test-noise", "test-clean")

    def __init__(self, config: TextConfig, features: Shapes,
                 channel: Channel | None = None) -> None:
        super().__init__(config, features)
        cfg = self.config
        self.channel = channel if channel is not None else Channel(keep_values=False)
        self.mechanism = q_mechanism(cfg)
        self.clean = UnboundedQNoise(0.0)
        # the paper's MLP "4×2" (authors' initializers) unless the config widens it
        head = federated_text_head(cfg.head_hidden, activation=cfg.head_activation)
        self.nets = {p: self.net(p) for p in ("alpha", "beta")}

        def party(name: str) -> PartySpec:
            return PartySpec(self.nets[name], head, self.mechanism, cfg.bounded,
                             cfg.buffer_size, cfg.learning_rate, cfg.gamma)

        self.alpha = AlphaParty(party("alpha"), self.channel)
        self.beta = BetaParty(party("beta"), self.channel)

    def init(self, key: Array, texts: t2a.Texts) -> FedRLState:
        k_a, k_b, k_env, key = jax.random.split(key, 4)
        env = self.reset(texts, k_env, self.config.num_envs)
        sa, theta_g = self.alpha.init(k_a, self.observe(texts, env, "alpha")[0])
        sb = self.beta.init(k_b, self.observe(texts, env, "beta")[0], theta_g)
        theta_b = self.nets["beta"].with_vectors(sb.theta, texts.vectors)
        sb = sb._replace(theta=theta_b, target=theta_b)
        return FedRLState(sa, sb, env, jnp.zeros(self.config.num_envs), jnp.int32(0), key,
                          zero_stats(), self.copy_targets())

    def train_step(self, s: FedRLState, texts: t2a.Texts) -> FedRLState:
        cfg, ch, alpha, beta = self.config, self.channel, self.alpha, self.beta
        key, k_env = jax.random.split(s.key)
        obs_a = ch.send("env", "alpha", "obs", self.observe(texts, s.env, "alpha"))
        obs_b = ch.send("env", "beta", "obs", self.observe(texts, s.env, "beta"))
        sb, c_beta = beta.release_q(s.beta, obs_b)
        sa, action = alpha.act(s.alpha, obs_a, c_beta, cfg.epsilon(s.steps))
        stepped, env, r, done, ep_return, stats = self.advance(
            texts, s.env, action.astype(jnp.int32), s.stats, s.ep_return, k_env)
        reward = ch.send("env", "alpha", "reward", r)
        terminal = ch.send("env", "alpha", "terminal", done.astype(jnp.float32))
        next_a = ch.send("env", "alpha", "obs", self.observe(texts, stepped, "alpha"))
        next_b = ch.send("env", "beta", "obs", self.observe(texts, stepped, "beta"))
        sa = alpha.store(sa, obs_a, action, reward, next_a, terminal)
        sb = beta.store(sb, obs_b, next_b)
        sa, sb = train_exchange(alpha, beta, sa, sb, cfg.batch_size)
        sync = self.sync_targets(s.steps, s.copy_targets)
        sa = sa._replace(target=jnp.where(sync, sa.theta, sa.target),
                         target_g=jnp.where(sync, sa.theta_g, sa.target_g))
        sb = sb._replace(target=jnp.where(sync, sb.theta, sb.target))
        return FedRLState(sa, sb, env, ep_return, s.steps + 1, key, stats, s.copy_targets)

    def train_chunk(self, s: FedRLState, texts: t2a.Texts, length: int) -> FedRLState:
        s = s._replace(stats=zeroed(s.stats))
        return jax.lax.scan(lambda st, _: (self.train_step(st, texts), None), s, None,
                            length=length)[0]

    @staticmethod
    def params(s: FedRLState) -> tuple[Array, Array, Array]:
        return s.alpha.theta, s.beta.theta, s.alpha.theta_g

    def policy_networks(self) -> list[tuple[str, list[str], Any]]:
        """`params`' networks in order: (name, the parties holding it, FlatModel); β's
        carries the fold's word vectors; θ_g is α's copy (β holds the same)."""
        return [("q_alpha", ["alpha"], self.nets["alpha"]),
                ("q_beta", ["beta"], self.nets["beta"]),
                ("federated_head", ["alpha", "beta"], self.alpha.spec.head)]

    def evaluate(self, params: tuple[Array, Array, Array], texts: t2a.Texts, key: Array,
                 variant: str = "test-noise") -> tuple[Array, Array]:
        """Greedy tagging of every text. test-noise (FedRL-1): both parties' outputs go through
        the training mechanism; test-clean (FedRL-2): outputs are sent without noise."""
        mech, clip = self._variant(variant), self.config.bounded
        return self._tag(params, texts, key, lambda k, q: release(mech, k, q, clip))

    def _variant(self, variant: str) -> Mechanism:
        return self.mechanism if variant == "test-noise" else self.clean

    def noise_of(self, variant: str) -> UnboundedGaussianParams | None:
        """`variant`'s noise as data where both variants release through one function (the
        paper's unbounded noise; test-clean is σ = 0), so that one program evaluates both
        (`evaluate_noise`); None in bounded mode (a clipped Gaussian, an un-noised clip)."""
        if self.config.bounded is not None:
            return None
        return self._variant(variant).release_params(2)  # Q vectors: one value per action

    def evaluate_noise(self, params: tuple[Array, Array, Array], texts: t2a.Texts, key: Array,
                       noise: UnboundedGaussianParams) -> tuple[Array, Array]:
        """`evaluate` of the variant whose `noise_of` is `noise` (traced): the same floats."""
        def noised(k: Array, q: Array) -> Array:
            return each_vector(lambda kk, v: self.clean.release(noise, kk, v), k, q)

        return self._tag(params, texts, key, noised)

    def _tag(self, params: tuple[Array, Array, Array], texts: t2a.Texts, key: Array,
             released: Any) -> tuple[Array, Array]:
        """Greedy tagging, both parties' Q outputs sent through `released(key, q)`."""
        theta_a, theta_b, theta_g = params
        ch, na, nb = self.channel, self.nets["alpha"], self.nets["beta"]

        def q_fn(k: Array, i: Array) -> Any:
            ep = t2a.start(i, self.width)
            qa = na.stepper(theta_a, t2a.observe(texts, ep, COLUMNS["alpha"]))
            qb = nb.stepper(theta_b, t2a.observe(texts, ep, COLUMNS["beta"]))

            def q(kk: Array, tags: Array) -> Array:
                k1, k2 = jax.random.split(kk)
                c_beta = ch.send("beta", "alpha", "C_beta", released(k1, qb(tags)))
                return self.alpha.federated_q(theta_g, released(k2, qa(tags)), c_beta)
            return q

        return self.greedy(texts, key, q_fn)

    def releases(self, steps: int, evaluations: int, valid_texts: int, test_texts: int
                 ) -> dict[str, int]:
        """Q-output vectors each party released through its mechanism: training (β: one per
        env per step for acting + 2 per batch row per update; α: 1 per batch row per update),
        and both parties' outputs at every position of every text row of every validation
        pass and noisy test. Greedy evaluation is fixed-length (`width` positions per row,
        padding rows included, see `greedy`): outputs past a text's end are computed, noised
        and sent too (their effect on the tags is masked, their release is not), so they
        are counted; counting only the texts' words understated the releases."""
        cfg = self.config
        evals = (evaluations * valid_texts + test_texts) * self.width
        return {"beta": steps * cfg.num_envs + 2 * steps * cfg.batch_size + evals,
                "alpha": steps * cfg.batch_size + evals}

    def privacy_record(self, steps: int, evaluations: int, valid_texts: int,
                       test_texts: int) -> dict[str, Any]:
        """`valid_texts`, `test_texts`: the rows of the evaluated Texts (padding included)."""
        return q_release_privacy(self.config, self.mechanism,
                                 self.releases(steps, evaluations, valid_texts, test_texts))


# --- DQN-alpha / DQN-full ------------------------------------------------------------------

class TextDQNState(NamedTuple):
    """privrl.replay's DQNState and the target rule (_Learner.copy_targets)."""

    theta: Array
    target: Array
    opt: Any
    memory: Any
    env: t2a.Episode
    ep_return: Array
    steps: Array
    key: Array
    stats: Stats
    copy_targets: Array

class TextDQN(_Learner):
    """DQN on α's view (dqn-alpha) or on both views in one network (dqn-full)."""

    def __init__(self, config: TextConfig, features: Shapes) -> None:
        super().__init__(config, features)
        self.view = "full" if self.config.mode.endswith("full") else "alpha"
        self.model = self.net(self.view)
        self.optimizer = optax.adam(self.config.learning_rate)

    def init(self, key: Array, texts: t2a.Texts) -> TextDQNState:
        cfg = self.config
        k_q, k_env, key = jax.random.split(key, 3)
        theta = self.model.with_vectors(self.model.init(k_q), texts.vectors)
        env = self.reset(texts, k_env, cfg.num_envs)
        mem = empty_memory(self.observe(texts, env, self.view)[0], cfg.buffer_size)
        return TextDQNState(theta, theta, self.optimizer.init(theta), mem, env,
                            jnp.zeros(cfg.num_envs), jnp.int32(0), key, zero_stats(),
                            self.copy_targets())

    def train_step(self, s: TextDQNState, texts: t2a.Texts) -> TextDQNState:
        cfg, net = self.config, self.model
        key, k_eps, k_rand, k_env, k_ids = jax.random.split(s.key, 5)
        obs = self.observe(texts, s.env, self.view)
        action = epsilon_greedy(k_eps, k_rand, net.apply(s.theta, obs), cfg.epsilon(s.steps))
        stepped, env, r, done, ep_return, stats = self.advance(
            texts, s.env, action, s.stats, s.ep_return, k_env)
        mem = store(s.memory, obs, self.observe(texts, stepped, self.view), action, r,
                    done.astype(jnp.float32))
        ids = jax.random.randint(k_ids, (cfg.batch_size,), 0, mem.size)
        theta, opt = dqn_update(net, self.optimizer, s.theta, s.target, s.opt, mem, ids,
                                cfg.gamma)
        sync = self.sync_targets(s.steps, s.copy_targets)
        return TextDQNState(theta, jnp.where(sync, theta, s.target), opt, mem, env, ep_return,
                            s.steps + 1, key, stats, s.copy_targets)

    def train_chunk(self, s: Any, texts: t2a.Texts, length: int) -> Any:
        s = s._replace(stats=zeroed(s.stats))
        return jax.lax.scan(lambda st, _: (self.train_step(st, texts), None), s, None,
                            length=length)[0]

    @staticmethod
    def params(s: Any) -> Array:
        return s.theta

    def policy_networks(self) -> list[tuple[str, list[str], Any]]:
        """`params`' network: (name, who holds it, FlatModel); a -full model is a central
        learner's, over both parties' views (the word vectors in it)."""
        return [(self.name, ["central"] if self.view == "full" else ["alpha"], self.model)]

    def evaluate(self, theta: Array, texts: t2a.Texts, key: Array,
                 variant: str = "greedy") -> tuple[Array, Array]:
        cols, net = COLUMNS[self.view], self.model

        def q_fn(k: Array, i: Array) -> Any:
            qf = net.stepper(theta, t2a.observe(texts, t2a.start(i, self.width), cols))
            return lambda kk, tags: qf(tags)

        return self.greedy(texts, key, q_fn)


# --- FCN-alpha / FCN-full ------------------------------------------------------------------

class TextFCN(TextDQN):
    """The same Text-CNN trained by cross-entropy: at word t of a training text the state holds
    the expert's tags before t, the label is the expert's choice at t (t2a.expert_tags)."""

    def init(self, key: Array, texts: t2a.Texts) -> FCNState:
        k_q, key = jax.random.split(key)
        theta = self.model.with_vectors(self.model.init(k_q), texts.vectors)
        return FCNState(theta, self.optimizer.init(theta), jnp.int32(0), key, zero_stats())

    def train_step(self, s: FCNState, texts: t2a.Texts) -> FCNState:
        cfg, net, cols = self.config, self.model, COLUMNS[self.view]
        key, k_text, k_pos = jax.random.split(s.key, 3)
        b = cfg.batch_size
        # word positions uniformly over all training words: text by length, then a word
        lengths = texts.length.astype(jnp.float32)
        i = jax.random.choice(k_text, lengths.shape[0], (b,), p=lengths / jnp.sum(lengths))
        t = jnp.floor(jax.random.uniform(k_pos, (b,)) * texts.length[i]).astype(jnp.int32)

        def example(i: Array, t: Array) -> tuple[Array, Array]:
            expert = t2a.expert_tags(texts, i)
            tags = jnp.where(jnp.arange(self.width) < t, expert, t2a.UNTAGGED)
            obs = t2a.observe(texts, t2a.Episode(i, t, tags), cols)
            return obs, (expert[t] == t2a.SELECTED).astype(jnp.int32)

        obs, label = jax.vmap(example)(i, t)
        theta, opt = supervised_update(net, self.optimizer, s.theta, s.opt, obs, label)
        stats = s.stats._replace(steps=s.stats.steps + b)
        return FCNState(theta, opt, s.steps + 1, key, stats)


def make_learner(config: TextConfig, features: Shapes,
                 channel: Channel | None = None) -> _Learner:
    cfg = config.resolved()
    if cfg.mode == "fedrl":
        return FedRLText(cfg, features, channel)
    if cfg.mode.startswith("dqn"):
        return TextDQN(cfg, features)
    return TextFCN(cfg, features)
