"""Text2Action (paper 002, Table 2): loading, tokenization, reward, F1, the FedRL protocol."""

import functools
import gzip
import json
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.envs import text2action as t2a
from privrl.federation.vertical import Channel, ProtocolError
from privrl.systems.fedrl_text.algorithm import FedRLText, Shapes, make_learner, text_config
from privrl.systems.fedrl_text.local import fold_data

# Five tiny texts. Labels: act_type 1 essential, 2 optional, 3 exclusive (related_acts).
TEXTS = [
    (["Click", "start", "then", "open", "the", "panel"], ["VB", "NN", "RB", "VB", "DT", "NN"],
     [(0, 1, []), (3, 1, [])]),
    (["Cut", "or", "slice", "the", "onions", "and", "fry"], ["VB", "CC", "VB", "DT", "NNS",
                                                             "CC", "VB"],
     [(0, 3, [2]), (2, 3, [0]), (6, 1, [])]),
    (["Wash", "rice", "optionally", "soak", "it"], ["VB", "NN", "RB", "VB", "PRP"],
     [(0, 1, []), (3, 2, [])]),
    (["Boil", "water"], ["VB", "NN"], [(0, 1, [])]),
    (["The", "oven", "is", "hot", "so", "bake", "bread"], ["DT", "NN", "VBZ", "JJ", "RB", "VB",
                                                          "NN"], [(5, 1, [])]),
]


def write_corpus(path, texts=TEXTS, drop=None):
    raw = {"texts": [], "pos_tags": [], "act_5_fold_indices": [[i] for i in range(len(texts))],
           "arg_5_fold_indices": []}
    for words, tags, acts in texts:
        raw["texts"].append({
            "words": words, "sents": [words], "word2sent": {str(i): 0 for i in range(len(words))},
            "acts": [{"act_idx": i, "obj_idxs": [[], []], "act_type": k, "related_acts": r}
                     for i, k, r in acts], "sent_acts": []})
        raw["pos_tags"].append([[[w, p] for w, p in zip(words, tags, strict=True)]])
    if drop is not None:
        drop(raw)
    path.mkdir(parents=True, exist_ok=True)
    with gzip.open(path / "win2k.json.gz", "wt") as f:
        json.dump(raw, f)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return t2a.load_corpus(write_corpus(tmp_path_factory.mktemp("data")), "win2k")


def test_loading_and_tokenization(corpus):
    assert len(corpus.words) == 5 and corpus.folds == [[0], [1], [2], [3], [4]]
    assert corpus.labels[1].tolist() == [t2a.EXCLUSIVE, 1, t2a.EXCLUSIVE, 1, 1, 1, t2a.ESSENTIAL]
    assert corpus.labels[2].tolist() == [t2a.ESSENTIAL, 1, 1, t2a.OPTIONAL, 1]
    assert corpus.related[1] == {0: [2], 2: [0]}
    vocab = t2a.Vocab.build([[t2a.normalize(w) for w in ws] for ws in corpus.words[:2]])
    # lowercased: "Click"/"click" one entry; unknown words (and padding) map to 0
    assert vocab.ids(["click", "bake"]).tolist() == [vocab.index["click"], 0]
    pos = t2a.Vocab.build(corpus.pos)
    vectors = np.zeros((len(vocab), 3), np.float32)
    packed = t2a.fold_texts(corpus, [0, 1, 4], pos, vocab, 6, vectors, count=4)
    assert packed.label.shape == (4, 6) and packed.length.tolist() == [6, 6, 6, 0]  # cut at 6
    # read on the host (indexing the device arrays compiles a program per index)
    word, related = np.asarray(packed.word), np.asarray(packed.related)
    # "The" = "the" (text 0); "oven" and "hot" never seen in texts 0-1: unknown (0)
    assert word[2].tolist()[:4] == [vocab.index["the"], 0, 0, 0]
    assert related[1, 0, 0] == 2 and related[0, 0, 0] == -1
    assert np.asarray(packed.pos)[0, 0] == pos.index["VB"]


def test_word_vectors_come_from_training_texts_only(corpus):
    cfg = text_config(mode="dqn-alpha", word_dim=8, valid_fraction=0.25)
    data = fold_data(cfg, corpus, 4)  # test: text 4 ("oven", "bake", ...)
    train_words = {t2a.normalize(w) for i in range(5) if i not in (4, *data.info["valid_index"])
                   for w in corpus.words[i]}
    assert data.info["word_vocab"] == len(train_words) + 1
    test_ids = np.asarray(data.test.word[0, :7])
    assert test_ids[1] == 0 and test_ids[5] == 0  # "oven", "bake": out of vocabulary -> zero row
    assert np.all(np.asarray(data.test.vectors)[0] == 0)


@pytest.mark.parametrize("drop, message", [
    (lambda r: r.pop("texts"), "missing key 'texts' in the top level"),
    (lambda r: r.pop("act_5_fold_indices"), "missing key 'act_5_fold_indices'"),
    (lambda r: r["texts"][1].pop("acts"), "missing key 'acts' in texts[1]"),
    (lambda r: r["texts"][2]["acts"][0].pop("act_type"),
     "missing key 'act_type' in texts[2].acts[0]"),
    (lambda r: r["pos_tags"][0][0].pop(), "pos_tags[0] must give one"),
])
def test_malformed_data_names_the_file_and_key(tmp_path, drop, message):
    path = write_corpus(tmp_path / "bad", drop=drop)
    with pytest.raises(ConfigError, match=r"win2k\.json\.gz") as e:
        t2a.load_corpus(path, "win2k")
    assert message in str(e.value) and e.value.field == "data"


def test_missing_or_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="is not a directory"):
        t2a.load_corpus(tmp_path / "nowhere", "win2k")
    with pytest.raises(ConfigError, match=r"cooking\.json\.gz: file not found"):
        t2a.load_corpus(write_corpus(tmp_path / "d"), "cooking")
    (tmp_path / "d" / "wikihow.json.gz").write_text("not gzip")
    with pytest.raises(ConfigError, match=r"wikihow\.json\.gz: not a gzipped JSON file"):
        t2a.load_corpus(tmp_path / "d", "wikihow")
    with pytest.raises(ConfigError, match="unknown corpus"):
        t2a.load_corpus(tmp_path / "d", "recipes")


def test_f1_on_a_hand_made_example():
    # words: 0 essential, 1 non-action, 2/3 exclusive pair, 4 optional, 5 essential,
    #        6 optional, 7/8 exclusive pair
    label = np.array([2, 1, 4, 4, 3, 2, 3, 4, 4])
    related = np.full((9, 1), -1)
    related[2, 0], related[3, 0], related[7, 0], related[8, 0] = 3, 2, 8, 7
    S, N = t2a.SELECTED, t2a.NEGLECTED
    tags = np.array([S, S, S, N, S, N, N, S, S])
    truth, right, selected = t2a.extraction_counts(label, related, tags, 9)
    # truth: essential 0, 5; pair 2/3 once; optional 4 (selected); pair 7/8 once -> 5
    # right: 0, 2 (its alternative 3 neglected), 4; 7 and 8 both selected: neither -> 3
    # selected: 0, 1, 2, 4, 7, 8 -> 6
    assert (truth, right, selected) == (5, 3, 6)
    s = t2a.f1_score(truth, right, selected)
    assert s["precision"] == pytest.approx(3 / 6) and s["recall"] == pytest.approx(3 / 5)
    assert s["f1"] == pytest.approx(2 * 0.5 * 0.6 / 1.1)
    assert t2a.f1_score(4, 0, 0) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def _texts(corpus, width=8):
    vocab = t2a.Vocab.build([[t2a.normalize(w) for w in ws] for ws in corpus.words])
    pos = t2a.Vocab.build(corpus.pos)
    vectors = np.random.default_rng(0).normal(size=(len(vocab), 4)).astype(np.float32)
    vectors[0] = 0.0
    return t2a.fold_texts(corpus, list(range(5)), pos, vocab, width, vectors)


# Jitted (one program per reward spec; eagerly, some 60 small ones per test).
_start = jax.jit(t2a.start, static_argnums=1)
_step = jax.jit(t2a.step, static_argnums=0)


def test_reward_values(corpus):
    spec = t2a.RewardSpec()
    texts = _texts(corpus)
    c = 5.0 * 50.0  # additional reward scale: 5 × base

    def r(text, actions):
        ep, out = _start(text, 8), []
        for a in actions:
            ep, rew, done = _step(spec, texts, ep, jnp.int32(a))
            out.append(float(rew))
        return out, bool(done)

    rho = lambda k: k / 500  # noqa: E731  selected words so far / num_words (500)
    # text 0: select "Click" (essential), neglect "start", select "start"...
    out, _ = r(0, [1, 0, 1])
    assert out[0] == pytest.approx(100 + c * rho(1) ** 2)  # ρ ≤ 0.05 and positive: bonus
    assert out[1] == pytest.approx(50 + c * rho(1) ** 2)  # non-action neglected
    # text 3 ("Boil water"): neglect the essential action, then the last word ends the text
    out, done = r(3, [0, 0])
    assert out[0] == pytest.approx(-100.0) and out[1] == pytest.approx(50 + 2.0) and done
    # text 1: exclusive pair 0/2: select 0 (+150), neglect 2 since 0 chosen (+150)
    out, _ = r(1, [1, 0, 0])
    assert out[0] == pytest.approx(150 + c * rho(1) ** 2)
    assert out[2] == pytest.approx(150 + c * rho(1) ** 2)
    # neglecting 0 is fine while the alternative 2 is still to come; then both neglected: -150
    out, _ = r(1, [0, 0, 0])
    assert out[0] == pytest.approx(150.0) and out[2] == pytest.approx(-150.0)
    # selecting both: the second is wrong (-150 - c ρ²) with ρ = 2/500
    out, _ = r(1, [1, 0, 1])
    assert out[2] == pytest.approx(-150 - c * rho(2) ** 2)
    # text 2: optional action "soak": neglected gives 0 (no additional reward), selected +50
    out, _ = r(2, [1, 0, 0, 0])
    assert out[3] == 0.0
    out, _ = r(2, [1, 0, 0, 1])
    assert out[3] == pytest.approx(50 + c * rho(2) ** 2)
    # a selected non-action: -50 - c ρ²
    out, _ = r(0, [0, 1])
    assert out[1] == pytest.approx(-50 - c * rho(1) ** 2)


def test_above_the_action_rate_the_additional_reward_is_a_penalty(corpus):
    spec = t2a.RewardSpec(num_words=20, action_rate=0.05)  # ρ = 2/20 = 0.1 > 0.05
    texts = _texts(corpus)
    ep = _start(0, 8)
    ep, _, _ = _step(spec, texts, ep, jnp.int32(1))
    ep, _, _ = _step(spec, texts, ep, jnp.int32(0))
    ep, _, _ = _step(spec, texts, ep, jnp.int32(0))
    ep, rew, _ = _step(spec, texts, ep, jnp.int32(1))  # "open" essential, 2 selected
    assert float(rew) == pytest.approx(100 - 250 * 0.1 ** 2)


def test_expert_tags_collect_the_full_reward(corpus):
    texts = _texts(corpus)
    expert = jax.jit(jax.vmap(t2a.expert_tags, in_axes=(None, 0)))(texts, np.arange(5))
    assert np.asarray(expert)[1].tolist()[:7] == [2, 1, 1, 1, 1, 1, 2]
    tags, _ = jax.jit(t2a.play, static_argnums=0)(t2a.RewardSpec(), texts, expert)
    s = t2a.scores(texts, np.asarray(tags), 0.0)
    assert s["f1"] == 1.0 and s["steps"] == int(np.sum(np.asarray(texts.length)))


# FedRL on the five tiny texts: the recorded runs' and the target-rule test's learner.
TINY_FEDRL = dict(mode="fedrl", num_envs=2, batch_size=4, buffer_size=32, filters=4, hidden=8,
                  pos_dim=4, tag_dim=2, word_dim=4, target_period=2)


@functools.cache
def _jitted(mode: str, targets: str, shapes: Shapes):
    """The learner of TINY_FEDRL's settings in `mode`, with its jitted init and train_chunk
    (length static): one per mode and rule, so that the tests of one share their programs."""
    algo = make_learner(text_config(**{**TINY_FEDRL, "mode": mode}, targets=targets), shapes)
    return algo, jax.jit(algo.init), jax.jit(algo.train_chunk, static_argnums=2)


@pytest.fixture(scope="module")
def recorded(corpus):
    """Four FedRL steps from `init` under each target rule, compiled by `Channel.recorded`: the
    log has every message's value. "copy" (the paper's rule; `algo`) and "frozen" (the authors'
    code) each start from their own learner's `init`, and both take the same compiled step: the
    rule is data in the state (`copy_targets`), which `test_fedrl_target_rule` checks the step
    honours. Returns (algo, channel, {rule: (initial state, state after 4 steps)}, texts,
    rewards)."""
    channel = Channel()
    texts = _texts(corpus)
    shapes = Shapes(8, int(texts.pos.max()) + 1, texts.vectors.shape[0])
    algo = FedRLText(text_config(**TINY_FEDRL), shapes, channel)
    frozen = FedRLText(text_config(**TINY_FEDRL, targets="frozen"), shapes, channel)
    step = channel.recorded(algo.train_step)
    runs = {}
    for rule, learner in (("copy", algo), ("frozen", frozen)):
        s0 = s = channel.recorded(learner.init)(jax.random.key(0), texts)
        for _ in range(4):
            s = step(s, texts)
        runs[rule] = (s0, s)
    rewards = [np.asarray(m.value) for m in channel.log if m.kind == "reward"]
    return algo, channel, runs, texts, rewards


def test_beta_never_receives_a_reward(recorded):
    algo, channel, runs, texts, rewards = recorded
    state = runs["copy"][1]
    assert rewards and all(m.receiver == "alpha" for m in channel.log if m.kind == "reward")
    to_beta = [m for m in channel.log if m.receiver == "beta"]
    assert {m.kind for m in to_beta} == {"obs", "theta_g", "batch_ids", "actions", "Y",
                                         "C_alpha"}
    for m in to_beta:
        v = np.asarray(m.value)
        for r in rewards:
            assert not (v.shape == r.shape and np.allclose(v, r)), m.kind
    # β's observations carry word ids and tags only, never a label or a reward
    obs_b = [np.asarray(m.value) for m in to_beta if m.kind == "obs"]
    assert all(o.shape[-1] == 2 for o in obs_b)
    with pytest.raises(ProtocolError, match="env may not send 'reward' to beta"):
        channel.send("env", "beta", "reward", rewards[0])
    # greedy evaluation goes through the same channel: β → α only (logged as jit traces it:
    # nothing to compile)
    before = len(channel.log)
    jax.jit(algo.evaluate).trace(algo.params(state), texts, jax.random.key(1))
    assert {(m.sender, m.receiver, m.kind) for m in channel.log[before:]} <= {
        ("beta", "alpha", "C_beta")}


def test_paper_mode_privacy_record_states_no_epsilon(recorded):
    algo = recorded[0]
    rec = algo.privacy_record(10, 2, 30, 40)
    assert rec["formal_guarantee"] is False and rec["epsilon"] == "none"
    assert "NO formal ε" in rec["statement"]
    # 10 updates, 2 validation passes over 30 text rows, a test of 40 rows, width 8: every
    # position of every row is released in evaluation (fixed-length greedy play)
    assert rec["releases"] == {"beta": 10 * 2 + 2 * 10 * 4 + (2 * 30 + 40) * 8,
                               "alpha": 10 * 4 + (2 * 30 + 40) * 8}


def test_secret_noise_keys_are_recorded_and_key_each_partys_releases(recorded):
    """Seeded records say SIMULATION ONLY; a party's secret root (in its own state) changes its
    released noise, not its Q; baselines, which release nothing, refuse secret keys."""
    from privrl.federation.vertical import with_secret_roots

    algo, _, runs, texts, _ = recorded
    state = runs["copy"][1]
    seeded = replace(algo.config, bounded=2.0)
    rec = FedRLText(seeded, algo.features).privacy_record(10, 2, 30, 40)
    assert rec["noise_keys"]["mode"] == "seeded" and "SIMULATION ONLY" in rec["statement"]
    # The headline's ε is the whole run's, of the party that released more (β here).
    assert rec["guarantee"]["epsilon"] == rec["parties"]["beta"]["epsilon"] > \
        rec["parties"]["alpha"]["epsilon"]
    assert rec["headline"].startswith(f"(ε = {rec['parties']['beta']['epsilon']:.4g}, δ = ")
    rec = FedRLText(replace(seeded, noise="secret"), algo.features).privacy_record(10, 2, 30, 40)
    assert rec["noise_keys"]["mode"] == "secret" and "SIMULATION" not in rec["statement"]
    obs = jax.jit(algo.observe, static_argnums=2)(texts, state.env, "beta")
    secret = with_secret_roots(state)
    release_q = jax.jit(algo.beta.release_q)  # one program (eagerly, some 50 small ones)
    c_seeded = np.asarray(release_q(state.beta, obs)[1])
    c_secret = np.asarray(release_q(secret.beta, obs)[1])
    raw = np.asarray(jax.jit(algo.beta.q)(state.beta.theta, obs))
    assert not np.allclose(c_seeded, c_secret)
    assert np.abs(c_secret - raw).max() > 0 and np.abs(c_seeded - raw).max() > 0
    with pytest.raises(ConfigError, match=r"^noise: dqn-alpha releases nothing"):
        text_config(mode="dqn-alpha", noise="secret")


@pytest.mark.parametrize("targets", ["copy", "frozen"])
def test_fedrl_target_rule(recorded, targets):
    """copy (the paper): FedRL's three target networks follow the learners every period;
    frozen (the authors' code): they never leave their initialization. The FedRL runs are the
    recorded fixture's (target period 2, four steps: its learners' own inits, one compiled
    step); the DQN baseline's run here."""
    algo, _, runs, texts, _ = recorded
    s0, s = runs[targets]
    pairs = {"alpha": (s.alpha.target, s.alpha.theta, s0.alpha.target),
             "beta": (s.beta.target, s.beta.theta, s0.beta.target),
             "theta_g": (s.alpha.target_g, s.alpha.theta_g, s0.alpha.target_g)}
    for name, (target, online, initial) in pairs.items():
        assert not np.array_equal(np.asarray(online), np.asarray(initial)), name  # it learned
        expected = online if targets == "copy" else initial  # step 4 is a copy step
        assert np.array_equal(np.asarray(target), np.asarray(expected)), name
    # the DQN baselines follow the same rule (frozen is a control there: the authors' code
    # copied their targets): the rule's own init, four steps of the chunk both rules share
    # (the rule is data in the state) and test_every_baseline_trains_and_tags runs
    d0 = _jitted("dqn-alpha", targets, algo.features)[1](jax.random.key(0), texts)
    d = _jitted("dqn-alpha", "copy", algo.features)[2](d0, texts, 4)
    expected = d.theta if targets == "copy" else d0.target
    assert np.array_equal(np.asarray(d.target), np.asarray(expected))


def test_leaky_head_keeps_a_gradient_where_relu_has_none():
    """With every hidden pre-activation negative a ReLU head is constant (no gradient reaches
    the parties: the collapse measured on Text2Action); the leaky head still passes one."""
    from privrl.nets.text import federated_text_head

    x = jnp.array([-300.0, -280.0, -310.0, -290.0])
    grads = {}
    for act in ("relu", "leaky_relu"):
        head = federated_text_head(4, activation=act)
        # positive weights: every unit off at x (jitted: one program each; eagerly, some 30
        # small ones)
        theta = jax.jit(lambda k, h=head: jnp.abs(h.init(k)))(jax.random.key(0))
        grads[act] = jax.jit(jax.grad(lambda v, t, h=head: h.apply(t, v).sum()))(x, theta)
    assert np.all(np.asarray(grads["relu"]) == 0)
    assert np.all(np.abs(np.asarray(grads["leaky_relu"])) > 0)


def test_improvement_presets_change_only_the_head():
    """wide-head is an improvement on top of the paper (cpu-wide-head on top of cpu): the paper
    presets keep the paper's 4-unit head, and nothing else differs."""
    from dataclasses import asdict

    for base, wide in (("paper", "wide-head"), ("cpu", "cpu-wide-head")):
        a, b = asdict(text_config(base)), asdict(text_config(wide))
        assert a["head_hidden"] == 4 and b["head_hidden"] == 64
        assert {k for k in a if a[k] != b[k]} == {"preset", "head_hidden"}


def test_bad_options_fail_before_compute():
    with pytest.raises(ConfigError, match=r"^mode: "):
        text_config(mode="ppo")
    with pytest.raises(ConfigError, match=r"^corpus: "):
        text_config(corpus="recipes")
    with pytest.raises(ConfigError, match=r"^preset: "):
        text_config("fastest")
    with pytest.raises(ConfigError, match=r"^valid_fraction: "):
        text_config(valid_fraction=1.0)
    with pytest.raises(ConfigError, match=r"^max_words: "):
        text_config(max_words=3)
    with pytest.raises(ConfigError, match=r"^targets: "):
        text_config(targets="soft")
    with pytest.raises(ConfigError, match=r"^head_activation: "):
        text_config(head_activation="tanh")
    with pytest.raises(ConfigError, match=r"^head_hidden: "):
        text_config(head_hidden=0)


@pytest.mark.parametrize("mode", ["dqn-alpha", "dqn-full", "fcn-alpha", "fcn-full"])
def test_every_baseline_trains_and_tags(corpus, mode):
    texts = _texts(corpus)
    # each a program (run eagerly, their ops were some 80 small ones); dqn-alpha's init and
    # chunk are test_fedrl_target_rule's
    algo, init, chunk = _jitted(mode, "copy", Shapes(8, int(texts.pos.max()) + 1,
                                                     texts.vectors.shape[0]))
    s = init(jax.random.key(0), texts)
    s2 = chunk(s, texts, 4)
    assert int(s2.steps) == 4 and not np.allclose(np.asarray(s2.theta), np.asarray(s.theta))
    tags, total = jax.jit(algo.evaluate)(algo.params(s2), texts, jax.random.key(1))
    n = np.asarray(texts.length)
    assert tags.shape == (5, 8) and np.isfinite(float(total))
    assert all(np.all(np.asarray(tags)[k, : n[k]] > 0) for k in range(5))  # every word tagged
    if mode.endswith("full"):  # the fixed word vectors are in θ and never move
        # cut from θ by one program (eagerly: one per parameter)
        vectors = jax.jit(lambda t: algo.model.unravel(t)["word_vectors"])(s2.theta)
        assert np.array_equal(np.asarray(vectors), np.asarray(texts.vectors))


@pytest.fixture
def no_compute(monkeypatch):
    from privrl.systems.fedrl_text import local as rt

    def forbidden(*args, **kwargs):
        raise AssertionError("computation started despite invalid options")

    monkeypatch.setattr(rt, "run_cv", forbidden)


@pytest.mark.parametrize("args, message", [
    (["run", "fedrl-text2action", "--data", "MISSING"], "--data: "),
    (["run", "fedrl-text2action", "--data", "DATA", "--corpus", "cooking"],
     "cooking.json.gz: file not found"),
    (["run", "fedrl-text2action", "--data", "DATA", "--corpus", "recipes"], "--corpus"),
    (["run", "fedrl-text2action", "--data", "DATA", "--mode", "ppo"], "--mode"),
    (["run", "fedrl-text2action", "--data", "DATA", "--folds", "0,7"], "--folds"),
    (["run", "fedrl-text2action", "--data", "DATA", "--bounded", "0"], "--bounded"),
    (["run", "fedrl-text2action", "--data", "DATA", "--accountant", "rdp"], "--accountant"),
    (["run", "fedrl-text2action", "--data", "DATA", "--mode", "fcn-full", "--noise", "secret"],
     "--noise: fcn-full releases nothing"),
    (["reproduce", "fedrl-text2action", "--data", "DATA", "--targets", "soft"], "--targets"),
    (["reproduce", "fedrl-text2action", "--data", "DATA", "--models", "dqn-beta"], "--models"),
    (["reproduce", "fedrl-text2action", "--data", "DATA", "--preset", "gpu"], "--preset"),
    (["reproduce", "fedrl-text2action", "--data", "DATA"], "cooking.json.gz: file not found"),
])
def test_cli_bad_input_exits_2_with_one_line(args, message, capsys, no_compute, tmp_path):
    from privrl import main as cli

    data = write_corpus(tmp_path / "data")
    args = [str(tmp_path / "nothing") if a == "MISSING" else str(data) if a == "DATA" else a
            for a in args]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_accountant_flag_reaches_privacy_json(tmp_path, monkeypatch):
    """--accountant rdp (bounded mode) reaches the config, and each party's ε in the record is
    dp-accounting's RdpAccountant over its releases."""
    import typer
    from dp_accounting import GaussianDpEvent
    from dp_accounting.rdp import RdpAccountant

    from privrl import main as cli
    from privrl.privacy.qoutput import q_mechanism, q_release_privacy
    from privrl.systems.fedrl_text import local as rt

    seen = {}

    def capture(cfg, *args, **kwargs):
        seen["cfg"] = cfg
        raise typer.Exit(0)

    monkeypatch.setattr(rt, "run_cv", capture)
    data = write_corpus(tmp_path / "data")
    assert cli.main(["run", "fedrl-text2action", "--data", str(data), "--bounded", "2",
                     "--accountant", "rdp", "--no-progress"]) == 0
    cfg = seen["cfg"]
    assert cfg.accountant == "rdp"
    rec = q_release_privacy(cfg, q_mechanism(cfg), {"alpha": 300, "beta": 700})
    for party, count in rec["releases"].items():
        acc = RdpAccountant()
        acc.compose(GaussianDpEvent(cfg.noise_sigma / (2 * 2.0)), count)
        assert rec["parties"][party]["accountant_choice"] == "rdp"
        assert rec["parties"][party]["epsilon"] == pytest.approx(acc.get_epsilon(cfg.delta))


def synthetic_texts(n=50, seed=0):
    """Texts whose action names are exactly the base-form verbs (VB); the other verbs (VBZ:
    "is", "seems") are never actions, so select-every-verb has precision ≈ 1/2 and a learner
    must tell the two tags apart from context-free POS features."""
    rng = np.random.default_rng(seed)
    acts, stative = ["click", "open", "cut", "fry", "bake", "wash"], ["is", "seems", "was"]
    nouns = ["panel", "rice", "water", "oven", "bread", "menu"]
    texts = []
    for _ in range(n):
        words, tags, labels = [], [], []
        for _ in range(rng.integers(4, 7)):
            if rng.random() < 0.5:  # "VB the NN": an action
                labels.append((len(words), 1, []))
                words += [str(rng.choice(acts)), "the", str(rng.choice(nouns))]
                tags += ["VB", "DT", "NN"]
            else:  # "the NN VBZ": no action
                words += ["the", str(rng.choice(nouns)), str(rng.choice(stative))]
                tags += ["DT", "NN", "VBZ"]
        texts.append((words, tags, labels))
    return texts


# Compiled without XLA's optimizations: measured 35 -> 18 s (compiling dominates this run).
@pytest.mark.learning(xla_optimize=False)
def test_short_fedrl_training_on_a_synthetic_corpus_beats_both_baselines(tmp_path):
    """Runs everywhere (no data needed): FedRL through the paper's protocol with its noise,
    cpu-preset networks narrowed to 16 filters per width and 32-dimensional word, POS and tag
    embeddings (the preset's 32 and 50 learn no better here and cost more to run), 400
    updates, the authors' frozen targets. Demanded: 10 F1 points over select-every-verb (0.575
    on this test fold; FedRL reaches 0.889 with seed 0, its best validation epoch being the
    second; 0.833 and 0.913 with seeds 1 and 2, where the preset's networks reach 0.913, 0.833
    and 0.894: benchmarks/log/38-fedrl.md). With the paper's copied targets FedRL stays below
    every-verb here (0.529 with seed 0 in 600 updates), the instability measured on the real
    corpora (benchmarks/log/06-*.md)."""
    from privrl.systems.fedrl_text.local import baselines, run_fold

    texts = synthetic_texts()

    def five_folds(raw):
        raw["act_5_fold_indices"] = [list(range(k, len(texts), 5)) for k in range(5)]

    corpus = t2a.load_corpus(write_corpus(tmp_path, texts, five_folds), "win2k")
    cfg = text_config("cpu", mode="fedrl", w2v_epochs=2, epochs=2, steps_per_epoch=200,
                      patience=2, targets="frozen", filters=16, word_dim=32, pos_dim=32,
                      tag_dim=32)
    fold = fold_data(cfg, corpus, 0)
    ref = baselines(corpus, fold, cfg.reward_spec())
    out = run_fold(cfg, fold)
    verbs = ref["select-every-verb"]
    for variant in ("test-noise", "test-clean"):
        got = out.test[variant][0]
        assert got["f1"] > verbs["f1"] + 0.10, (variant, got, verbs)
        assert got["avg_reward"] > max(ref["select-nothing"]["avg_reward"],
                                       verbs["avg_reward"]) + 2.0



def test_releases_made_equal_privacy_json(corpus, monkeypatch):
    """One fold, 1 run × 1 epoch of 2 steps on the five tiny texts, bounded mode: the Q
    vectors each party sent the other (rows of C_beta / C_alpha messages, counted as they run)
    are the releases privacy.json composes. β's exactly, once test-clean's un-noised C_beta
    (no guarantee claimed) are set apart; α's C_alpha are its training releases, and
    privacy.json counts its evaluation outputs (which stay with α) too, conservatively.
    Greedy evaluation is fixed-length: β sends an output at every position of every row;
    privacy.json once counted only the texts' words (an understated ε), which this caught."""
    from privrl.systems.fedrl_text.local import run_fold

    sent = {"alpha": 0, "beta": 0}
    send = Channel.send

    def counted(self, sender, receiver, kind, payload):
        if kind in ("C_alpha", "C_beta"):
            def add(v, who=sender):
                sent[who] += v.reshape(-1, v.shape[-1]).shape[0]
            jax.debug.callback(add, payload)
        return send(self, sender, receiver, kind, payload)

    monkeypatch.setattr(Channel, "send", counted)
    cfg = text_config(mode="fedrl", num_envs=2, batch_size=4, buffer_size=32, filters=4,
                      hidden=8, pos_dim=4, tag_dim=2, word_dim=4, bounded=2.0, epochs=1,
                      steps_per_epoch=2, w2v_epochs=1)
    data = fold_data(cfg, corpus, 0)
    out = run_fold(cfg, data)
    jax.effects_barrier()
    releases = out.privacy["releases"]
    assert out.privacy["formal_guarantee"] is True
    for party in ("alpha", "beta"):
        assert out.privacy["parties"][party]["events"][0]["count"] == releases[party]
    clean = data.test.count * data.shapes.width
    assert sent["beta"] - clean == releases["beta"]
    assert sent["alpha"] == 2 * cfg.batch_size <= releases["alpha"]


def test_run_writes_the_parties_networks_per_fold_and_run(corpus, tmp_path, capsys):
    """policy.npz holds every fold's runs' kept networks (α's tagger, β's with the fold's word
    vectors, the shared head), each named with the party holding it; played from the file,
    they tag the test texts as the run's test-clean did, and so do `privrl evaluate RUN
    --data DIR` for every trial and load_policy(RUN, trial, data=DIR)'s act on the raw texts;
    a missing, bad or foreign --data is one line, exit 2, nothing written."""
    import privrl
    from privrl import main as cli
    from privrl.policy import read_saved
    from privrl.systems.fedrl_text import local as rt

    cfg = text_config(mode="fedrl", runs=2, epochs=1, steps_per_epoch=2, num_envs=2,
                      batch_size=4, buffer_size=16, filters=4, hidden=8, pos_dim=4, tag_dim=2,
                      word_dim=4, w2v_epochs=1)
    seen: list = []

    spent: list = []

    def progress(done, total, **figures):  # the API's progress= (issue 53): every fold's
        seen.append((done, total, figures.get("description")))  # epochs, then the end
        spent.append(figures.get("epsilon"))

    progress.takes_figures = True  # type: ignore[attr-defined]
    folds, refs = rt.run_cv(cfg, corpus, (0, 1), progress=progress)
    assert seen == [(1, 2, "fold 0"), (2, 2, "fold 1"), (2, 2, None)]
    # ε spent after each fold's epoch is its record's: the paper's unbounded Q noise has no
    # formal ε, so none is shown (FedRL's bounded run checks a finite one: fedrl/test_cli.py)
    assert all(fold.privacy["guarantee"] is None for fold in folds)
    assert spent[:2] == [None, None], spent
    out = tmp_path / "run"
    rt.save(cfg, folds, refs, out)
    description, theta, _ = read_saved(out)
    assert description["kind"] == "networks" and theta.shape[:2] == (4, 1)
    assert description["trial_is"] == [{"fold": f, "run": r} for f in (0, 1) for r in (0, 1)]
    assert [(n["name"], n["held_by"]) for n in description["networks"]] == [
        ("q_alpha", ["alpha"]), ("q_beta", ["beta"]), ("federated_head", ["alpha", "beta"])]
    fd = fold_data(cfg, corpus, 1)  # the last trial: fold 1's run 1
    params = tuple(jnp.asarray(theta[3, 0, n["offset"]:n["offset"] + n["dim"]])
                   for n in description["networks"])
    clean = jax.jit(lambda p: make_learner(cfg, fd.shapes).evaluate(  # one program, used twice
        p, fd.test, jax.random.key(0), "test-clean"))
    tags, total = clean(params)
    assert t2a.scores(fd.test, np.asarray(tags), float(total)) == folds[1].test["test-clean"][1]
    data = write_corpus(tmp_path / "data")
    with pytest.raises(ConfigError, match="corpus directory") as e:
        privrl.load_policy(out)
    assert e.value.field == "data"
    policy = privrl.load_policy(out, trial=3, data=data)
    text = (corpus.words[1], corpus.pos[1])  # fold 1's test text, raw
    assert (policy.fold, policy.run) == (1, 1)
    packed = policy.fold_data.pack([text])  # the fold's word ids, rebuilt from the corpus
    assert np.asarray(packed.word[0]).tolist() == np.asarray(fd.test.word[0]).tolist()
    got = policy.act(text)
    assert got.tolist() == np.asarray(tags)[0, :len(text[0])].tolist()
    assert [g.tolist() for g in policy.act([text])] == [got.tolist()]
    want = folds[1].test["test-clean"][1]
    mine = t2a.scores(fd.test, np.pad(got, (0, fd.shapes.width - got.size))[None], 0.0)
    assert (mine["f1"], mine["selected"]) == (want["f1"], want["selected"])
    # random networks, whose tags follow the words (the trained ones select every word):
    # the raw text through act and the fold's packed text through evaluate, tagged alike
    rng = np.random.default_rng(2)
    policy.params = mixed = tuple(rng.normal(size=p.shape).astype(np.float32)
                                  for p in policy.params)
    ref, _ = clean(mixed)
    tagged = policy.act(text)
    assert set(tagged.tolist()) == {t2a.NEGLECTED, t2a.SELECTED}
    assert tagged.tolist() == np.asarray(ref)[0, :len(text[0])].tolist()
    longer = policy.act((text[0] + ["and", "fry"], text[1] + ["CC", "VB"]))  # past the width
    assert longer.tolist() == tagged.tolist() + [t2a.UNTAGGED] * 2
    for bad, match in ((text[0], "a text"), ((text[0], text[1][:-1]), "POS tags")):
        with pytest.raises(ValueError, match=match):
            policy.act(bad)
    with pytest.raises(ValueError, match="no key"):
        policy.act(text, key=0)
    other = write_corpus(tmp_path / "other", [*TEXTS[:4], TEXTS[0]])  # other words, sizes
    capsys.readouterr()
    for args, flag in (([], "--data"), (["--data", str(tmp_path / "none")], "--data"),
                       (["--data", str(tmp_path)], "--data"),  # no win2k.json.gz in it
                       (["--data", str(other)], "--data"),  # not the run's corpus
                       (["--data", str(data), "--episodes", "1"], "--episodes")):
        assert cli.main(["evaluate", str(out), *args]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0], (args, err)
    assert not list(out.glob("evaluate-*"))
    assert cli.main(["evaluate", str(out), "--data", str(data)]) == 0
    got = json.loads((out / "evaluate-1.json").read_text())["per_trial"]
    assert [(r["fold"], r["run"]) for r in got] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in got:  # each trial: its fold's run's test-clean F1 and AvgRwd, as the run had them
        want = folds[r["fold"]].test["test-clean"][r["run"]]
        assert (r["f1"], r["avg_reward"], r["selected"]) == (
            want["f1"], want["avg_reward"], want["selected"]), (r, want)
