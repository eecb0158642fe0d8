"""The local runner for paper 002's Text2Action learners (FedRL and its baselines).

One fold at a time (the authors' `act_5_fold_indices`: fold k is the test set, the other four
the training texts, of which `valid_fraction` is held out for model selection). Per fold: word
vectors are trained on the training texts only, the learner is built, runs are vmapped in one
jitted program, training goes in epochs (a `lax.scan` of vector steps), after each epoch every
run tags the validation texts greedily, the best epoch's parameters are kept per run and
training stops once no run improved for `patience` epochs. The kept parameters then tag the
test texts (each test variant of the learner).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import jax
import numpy as np

from privrl.envs import text2action as t2a
from privrl.federation.vertical import with_secret_roots
from privrl.output import RunRecord, csv_writer, work_so_far
from privrl.output import save as save_run
from privrl.policy import NETWORKS_NOTE, SavedPolicy, networks_policy
from privrl.privacy.noise import secret_keys, summary_note
from privrl.progress import as_progress, emit, record_epsilon
from privrl.selection import Selection
from privrl.systems.fedrl_text.algorithm import Shapes, TextConfig, make_learner

LogFn = Callable[[str], None]


@dataclass
class FoldData:
    fold: int
    train: t2a.Texts
    valid: t2a.Texts
    test: t2a.Texts
    shapes: Shapes
    info: dict[str, Any]
    pos_vocab: t2a.Vocab  # the corpus's POS tags (the same for every fold)
    word_vocab: t2a.Vocab  # the fold's training words: the ids of its word vectors

    def pack(self, texts: list[tuple[list[str], list[str]]], count: int | None = None
             ) -> t2a.Texts:
        """Raw texts, (words, POS tags) each, packed as this fold's own texts are (its word
        ids and vectors, cut at its width; `count`: padded with empty texts to that many).
        They carry no labels (all non-action): the tags a network chooses on them mean
        something, rewards and scores on them do not."""
        raw = t2a.Corpus("texts", "", [list(w) for w, _ in texts], [list(p) for _, p in texts],
                         [np.full(len(w), t2a.NON_ACTION, np.int32) for w, _ in texts],
                         [{} for _ in texts], [])
        return t2a.fold_texts(raw, list(range(len(texts))), self.pos_vocab, self.word_vocab,
                              self.shapes.width, self.test.vectors, count)


def _n_valid(cfg: TextConfig, rest: int) -> int:
    return max(1, round(cfg.valid_fraction * rest))


def split_sizes(cfg: TextConfig, corpus: t2a.Corpus) -> tuple[int, int, int]:
    """The largest (train, validation, test) sizes over the folds: every fold is padded to
    them, so that one compiled program serves all folds."""
    total = len(corpus.words)
    sizes = [(total - len(f) - _n_valid(cfg, total - len(f)), _n_valid(cfg, total - len(f)),
              len(f)) for f in corpus.folds]
    return tuple(max(s[i] for s in sizes) for i in range(3))  # type: ignore[return-value]


def fold_data(cfg: TextConfig, corpus: t2a.Corpus, fold: int) -> FoldData:
    """Split fold `fold` (test) from the rest (train + validation), train its word vectors on
    the training texts only and pack the three parts."""
    test_idx = list(corpus.folds[fold])
    rest = [i for k, f in enumerate(corpus.folds) if k != fold for i in f]
    rng = np.random.default_rng([cfg.seed, fold])
    rest = [rest[j] for j in rng.permutation(len(rest))]
    n_valid = _n_valid(cfg, len(rest))
    valid_idx, train_idx = sorted(rest[:n_valid]), sorted(rest[n_valid:])
    pos_vocab = t2a.Vocab.build(corpus.pos)
    word_vocab, table = t2a.train_word_vectors(t2a.sentences_of(corpus, train_idx),
                                               cfg.word_dim, seed=cfg.seed + fold,
                                               epochs=cfg.w2v_epochs)
    width = t2a.width_for(corpus, cfg.max_words)
    shapes = Shapes(width, len(pos_vocab), t2a.vocabulary_size(corpus))
    vectors = np.zeros((shapes.num_words, cfg.word_dim), np.float32)
    vectors[: len(table)] = table
    parts = [t2a.fold_texts(corpus, idx, pos_vocab, word_vocab, width, vectors, count)
             for idx, count in zip((train_idx, valid_idx, test_idx), split_sizes(cfg, corpus),
                                   strict=True)]
    test_words = [t2a.normalize(w) for i in test_idx for w in corpus.words[i]]
    oov = sum(w not in word_vocab.index for w in test_words) / max(len(test_words), 1)
    cut = sum(max(len(corpus.words[i]) - width, 0) for i in range(len(corpus.words)))
    info = {"fold": fold, "train_texts": len(train_idx), "valid_texts": len(valid_idx),
            "test_texts": len(test_idx), "width": width, "pos_vocab": len(pos_vocab),
            "word_vocab": len(word_vocab), "test_oov_rate": oov,
            "words_cut_beyond_width": cut, "test_index": test_idx, "valid_index": valid_idx}
    return FoldData(fold, *parts, shapes, info, pos_vocab, word_vocab)


@dataclass
class FoldOutput:
    name: str
    fold: int
    info: dict[str, Any]
    valid_f1: np.ndarray  # (runs, epochs)
    train_return: np.ndarray  # (runs, epochs): mean return of training episodes (with ε)
    best_epoch: np.ndarray  # (runs,)
    test: dict[str, list[dict[str, Any]]]  # variant -> per run scores (F1, AvgRwd, counts)
    privacy: dict[str, Any]
    wall_seconds: float
    compile_seconds: float
    throughput: dict[str, float] = field(default_factory=dict)
    policy: SavedPolicy | None = None  # each run's kept networks on this fold


def steps_per_epoch(cfg: TextConfig, train: t2a.Texts) -> int:
    """Vector steps per epoch: given, or one pass over the training words."""
    if cfg.steps_per_epoch is not None:
        return cfg.steps_per_epoch
    return math.ceil(int(np.sum(np.asarray(train.length))) / cfg.num_envs)


def _scores(texts: t2a.Texts, tags: Any, totals: Any) -> list[dict[str, Any]]:
    return [t2a.scores(texts, np.asarray(tags)[r], float(np.asarray(totals)[r]))
            for r in range(np.asarray(totals).shape[0])]


class Program:
    """A learner and its jitted, run-vmapped functions: built once per corpus and mode, so
    that every fold reuses the compiled code (same shapes, the fold's data as arguments)."""

    def __init__(self, cfg: TextConfig, shapes: Shapes, length: int) -> None:
        # a replay memory larger than every transition of the run never fills: cap it
        cap = min(cfg.buffer_size, cfg.epochs * length * cfg.num_envs)
        self.config = replace(cfg, buffer_size=max(cap, cfg.batch_size))
        self.length = length
        self.algo = algo = make_learner(self.config, shapes)
        self.init = jax.jit(jax.vmap(algo.init, in_axes=(0, None)))
        self.chunk = jax.jit(jax.vmap(lambda s, t: algo.train_chunk(s, t, length),
                                      in_axes=(0, None)))
        noise = {v: getattr(algo, "noise_of", lambda _: None)(v) for v in algo.variants}
        if all(n is not None for n in noise.values()):  # one program for every variant
            shared = jax.jit(jax.vmap(lambda p, k, t, n: algo.evaluate_noise(p, t, k, n),
                                      in_axes=(0, 0, None, None)))
            self.evals = {v: partial(_with_noise, shared, noise[v]) for v in algo.variants}
        else:
            self.evals = {v: jax.jit(jax.vmap(lambda p, k, t, v=v: algo.evaluate(p, t, k, v),
                                              in_axes=(0, 0, None))) for v in algo.variants}


def _with_noise(shared: Callable[..., Any], noise: Any, params: Any, keys: Any, texts: Any
                ) -> Any:
    return shared(params, keys, texts, noise)


def run_fold(cfg: TextConfig, data: FoldData, progress: Callable[..., Any] | None = None,
             program: Program | None = None,
             kept: Callable[[Callable[[], FoldOutput], bool], None] | None = None,
             log: LogFn | None = None, done: int = 0, total: int | None = None
             ) -> FoldOutput:
    """One fold; `kept(build, trained)` as it starts and after each epoch: `build()` makes
    the fold's output so far (no test scores, the releases of the epoch in progress counted),
    should the run fail from there (`output.keeping_work`). After each epoch: `progress`
    (privrl.progress.emit: `done` epochs before this fold's, of `total`) and `log`'s line
    (the validation F1)."""
    start = time.perf_counter()
    length = steps_per_epoch(cfg, data.train)
    if program is None or program.length != length:
        program = Program(cfg, data.shapes, length)
    cfg, algo, chunk, evals = program.config, program.algo, program.chunk, program.evals
    runs = cfg.runs
    train = data.train
    select = evals[algo.variants[0]]
    key = jax.random.key(cfg.seed * 1000 + data.fold)
    k_init, k_eval, k_test = jax.random.split(key, 3)
    state = program.init(jax.random.split(k_init, runs), train)
    secret = cfg.noise == "secret" and hasattr(state, "beta")
    if secret:  # each party's root: OS CSPRNG, in memory only, an argument of the programs
        state = with_secret_roots(state, runs)

    def eval_keys(k: jax.Array) -> jax.Array:
        """Evaluation keys drive only the released noise (greedy tagging): secret ones come
        from the OS CSPRNG (one process holds both parties here: a simulation)."""
        return secret_keys(runs) if secret else jax.random.split(k, runs)

    sel = Selection(algo.params(state), runs, cfg.patience)
    va: list[np.ndarray] = []
    tr: list[np.ndarray] = []

    def output(best: Any, best_epoch: np.ndarray, test: dict[str, Any], charged: int,
               test_texts: int) -> FoldOutput:
        """The fold's output from its first len(va) epochs; privacy counts `charged` epochs'
        releases and `test_texts` noisy-test texts."""
        privacy = algo.privacy_record(charged * length, charged, data.valid.count, test_texts)
        privacy["algorithm"] = algo.name
        throughput: dict[str, float] = {}
        if sel.times:
            t = float(np.median(sel.times))
            throughput = {"median_epoch_seconds": t, "updates_per_s": length * runs / t,
                          "env_steps_per_s": length * runs * (
                              cfg.batch_size if cfg.mode.startswith("fcn") else cfg.num_envs)
                          / t}
        info = {**data.info, "steps_per_epoch": length, "replay_capacity": cfg.buffer_size}
        policy = networks_policy(
            algo.name, f"text2action:{cfg.corpus}",
            "Text2Action texts, word by word (α: part-of-speech ids and the tags so far; β: "
            "the words through the fold's word vectors, which β's network holds)",
            [(*net, theta) for net, theta in zip(algo.policy_networks(),
                                                  jax.tree_util.tree_leaves(best),
                                                  strict=True)],
            note=NETWORKS_NOTE)
        n = len(va)
        empty = np.zeros((runs, 0))
        return FoldOutput(algo.name, data.fold, info, np.stack(va, 1) if n else empty,
                          np.stack(tr[:n], 1) if n else empty,
                          best_epoch, test, privacy, time.perf_counter() - start,
                          sel.compile_seconds, throughput, policy)

    if kept is not None:
        kept(lambda: output(sel.best, sel.best_epoch, {}, 1, 0), False)
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.perf_counter()
        state = sel.train(epoch, chunk, state, train)
        dt = time.perf_counter() - t0
        st = state.stats
        tr.append(np.asarray(st.return_sum) / np.maximum(np.asarray(st.episodes), 1))
        tags, totals = select(algo.params(state), eval_keys(jax.random.fold_in(k_eval, epoch)),
                              data.valid)
        val = np.array([s["f1"] for s in _scores(data.valid, tags, totals)])
        va.append(val)
        stop = sel.record(epoch, val, algo.params(state))
        if log is not None:
            log(f"fold {data.fold} epoch {epoch}/{cfg.epochs}: validation F1 "
                + " ".join(f"{v:.3f}" for v in val) + f" ({dt:.0f} s)")
        emit(progress, done + epoch, total, mean_return=float(np.mean(tr[-1])),
             description=f"fold {data.fold}",  # ε spent: the fold's record of its epochs
             epsilon=record_epsilon(algo.privacy_record(epoch * length, epoch,
                                                        data.valid.count, 0)))
        last = stop or epoch == cfg.epochs
        if kept is not None:  # should what follows fail: this fold so far, no test scores,
            # the releases of the step in progress counted as made
            kept(lambda best=sel.best, at=sel.best_epoch, charged=epoch + (not last),
                 texts=data.test.count if last else 0: output(best, at, {}, charged, texts),
                 True)
        if stop:
            break
    test = {}
    for v, fn in evals.items():
        tags, totals = fn(sel.best, eval_keys(k_test), data.test)
        test[v] = _scores(data.test, tags, totals)
    return output(sel.best, sel.best_epoch, test, len(va), data.test.count)


def folds_policy(folds: list[FoldOutput]) -> SavedPolicy | None:
    """One policy.npz for a cross-validation: every fold's runs as trials, fold by fold (the
    networks' sizes are the corpus's, the same in every fold)."""
    if any(f.policy is None for f in folds):
        return None
    first = folds[0].policy.description
    theta = np.concatenate([f.policy.theta for f in folds])
    runs = [{"fold": f.fold, "run": r} for f in folds for r in range(f.policy.theta.shape[0])]
    return SavedPolicy(theta, {**first, "trial_is": runs, "trials": int(theta.shape[0])})


# One program per reward spec and shapes for every fold and tagging (the texts are its argument).
_play = jax.jit(t2a.play, static_argnums=0)


def baselines(corpus: t2a.Corpus, data: FoldData, spec: t2a.RewardSpec) -> dict[str, Any]:
    """Select-nothing and select-every-verb (POS VB*) taggings of the fold's test texts."""
    idx = data.info["test_index"]
    rows = data.test.count
    verbs = np.zeros((rows, data.shapes.width), np.int32)
    verbs[: len(idx)] = t2a.verb_tags(corpus, idx, data.shapes.width)
    out = {}
    for name, plan in (("select-nothing", np.full_like(verbs, t2a.NEGLECTED)),
                       ("select-every-verb", verbs)):
        tags, total = _play(spec, data.test, plan)
        out[name] = t2a.scores(data.test, np.asarray(tags), float(total))
    return out


def summarize(cfg: TextConfig, folds: list[FoldOutput], reference: list[dict[str, Any]]
              ) -> dict[str, Any]:
    """Cross-validation: per run, the mean over folds of the fold's F1 / AvgRwd (as the
    authors' avg_f1), then the mean over runs."""
    scored = [f for f in folds if f.test]  # a failed run's last fold has no test scores
    test = {}
    for v in scored[0].test if scored else ():
        per_run = {m: np.mean([[s[m] for s in f.test[v]] for f in scored], 0)
                   for m in ("f1", "precision", "recall", "avg_reward")}
        test[v] = {"f1": float(np.mean(per_run["f1"])),
                   "precision": float(np.mean(per_run["precision"])),
                   "recall": float(np.mean(per_run["recall"])),
                   "avg_reward": float(np.mean(per_run["avg_reward"])),
                   "per_run_f1": per_run["f1"].tolist(),
                   "per_fold_f1": [float(np.mean([s["f1"] for s in f.test[v]]))
                                   for f in scored]}
    ref = {name: {m: float(np.mean([r[name][m] for r in reference]))
                  for m in ("f1", "avg_reward")} for name in reference[0]} if reference else {}
    return {
        "algorithm": folds[0].name, "corpus": cfg.corpus, "paper_name": t2a.CORPORA[cfg.corpus],
        "runs": cfg.runs, "folds": [f.fold for f in folds], "test": test,
        "reference_taggings": ref,
        "epochs_run": [int(f.valid_f1.shape[1]) for f in folds],
        "best_epoch": [f.best_epoch.tolist() for f in folds],
        "fold_info": [{k: v for k, v in f.info.items() if not k.endswith("_index")}
                      for f in folds],
        "privacy": folds[0].privacy["headline"],
        **({"noise": summary_note(folds[0].privacy["noise_keys"]["mode"])}
           if "noise_keys" in folds[0].privacy else {}),
        "wall_seconds": float(sum(f.wall_seconds for f in folds)),
        "compile_seconds": float(sum(f.compile_seconds for f in folds)),
        "throughput": folds[-1].throughput,
    }


def run_cv(cfg: TextConfig, corpus: t2a.Corpus, folds: tuple[int, ...],
           progress: Callable[..., Any] | bool | None = None, log: LogFn | None = None
           ) -> tuple[list[FoldOutput], list[dict[str, Any]]]:
    """Every fold of `folds` in turn: each fold's output and its reference taggings.
    `progress`: a callback `(done, total)` over every fold's epochs, or True for the CLI's
    display on stderr; `log`: each epoch's line (its validation F1)."""
    outs, refs = [], []
    program = None
    total = len(folds) * cfg.epochs
    with as_progress(progress, unit="epochs") as shown:
        for i, k in enumerate(folds):
            data = fold_data(cfg, corpus, k)
            refs.append(baselines(corpus, data, cfg.reward_spec()))
            if program is None or program.length != steps_per_epoch(cfg, data.train):
                program = Program(cfg, data.shapes, steps_per_epoch(cfg, data.train))
            outs.append(run_fold(cfg, data, shown, program, kept=partial(
                _kept, list(outs), list(refs)), log=log, done=i * cfg.epochs, total=total))
            work_so_far(lambda done=list(outs), seen=list(refs): [(done, seen)])
        emit(shown, total, total)  # early stopping ends a fold before its last epoch
    return outs, refs


def _kept(done: list[FoldOutput], refs: list[dict[str, Any]],
          build: Callable[[], FoldOutput], trained: bool) -> None:
    """`run_fold`'s `kept`: the folds done and this one so far, should the run fail from here
    (before any training, with no fold done: nothing to keep)."""
    if trained or done:
        work_so_far(lambda: [([*done, build()], refs)])


def metrics_rows(folds: list[FoldOutput]) -> Iterator[str]:
    """metrics.csv rows: fold, run, epoch, training return, validation F1."""
    for fo in folds:
        for r in range(fo.valid_f1.shape[0]):
            for e in range(fo.valid_f1.shape[1]):
                yield (f"{fo.fold},{r},{e + 1},{fo.train_return[r, e]:.3f},"
                       f"{fo.valid_f1[r, e]:.4f}")


def record(cfg: TextConfig, folds: list[FoldOutput], refs: list[dict[str, Any]]
           ) -> RunRecord:
    """What a cross-validation leaves behind: summary (with each fold's test scores), each
    fold's privacy record and the per-epoch table; no plots."""
    summary = summarize(cfg, folds, refs)
    summary["per_fold_test"] = {f"fold{fo.fold}": fo.test for fo in folds}
    return RunRecord(
        folds[0].name, asdict(cfg), cfg.seed, summary,
        {f"fold{fo.fold}": fo.privacy for fo in folds},
        metrics=csv_writer("fold,run,epoch,train_avg_return,valid_f1",
                           lambda: metrics_rows(folds)),
        run_info={"folds": [dict(f.info) for f in folds]}, policy=folds_policy(folds))


def save(cfg: TextConfig, folds: list[FoldOutput], refs: list[dict[str, Any]], path: Path,
         command: list[str] | None = None) -> dict[str, Any]:
    """config.json, metrics.csv (per fold, run and epoch), privacy.json, summary.json,
    policy.npz."""
    return save_run(record(cfg, folds, refs), path, command)
