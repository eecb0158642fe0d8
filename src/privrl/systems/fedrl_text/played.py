"""A Text2Action run's saved networks played again (issue 39): what `privrl evaluate RUN_DIR
--data DIR` gives for FedRL-Text2Action and its baselines (dqn-/fcn-alpha, dqn-/fcn-full).

policy.npz holds every fold's runs' networks (trial_is: which fold and run each trial is;
privrl.policy.networks_policy); the run's config.json holds its config (its fields checked as
the CLI's are; nothing named in a file is imported). A trial tags its fold's test texts, which
only the corpus holds: the caller names the corpus directory, and the fold is split and packed
as the run did it (`fold_data`, word vectors retrained on the fold's training texts: the
networks' word ids are theirs). The tagging is the learner's own greedy `evaluate` in its
noise-free variant: FedRL's "test-clean" (both parties' Q outputs exchanged without noise, so
no privacy is claimed for them), a baseline's "greedy"; scored by `t2a.scores`, as the run's
summary.json reports it.

`privrl.load_policy(run_dir, trial=i, data=DIR)` gives a TextPolicy: trial i's networks
tagging raw texts, (words, POS tags) each, packed as the run packed its fold's texts (the fold's
vocabulary and word vectors rebuilt from the corpus exactly as `evaluate` rebuilds them), with
the same noise-free greedy tagging.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from privrl.compute.programs import per_process
from privrl.config import ConfigError
from privrl.envs import text2action as t2a
from privrl.policy import run_config
from privrl.runfile import checked
from privrl.systems.fedrl_text.algorithm import Shapes, TextConfig, make_learner
from privrl.systems.fedrl_text.config import MODES
from privrl.systems.fedrl_text.local import fold_data

# What `privrl evaluate --data` is for such a run (privrl.evaluation asks for it).
DATA = "the corpus directory the run was trained on (--data DIR, holding <corpus>.json.gz)"


class TextPolicy:
    """One trial's networks tagging raw texts together: `act((words, pos_tags))`."""

    def __init__(self, run_dir: str | os.PathLike, description: dict[str, Any],
                 theta: np.ndarray, path: Path, trial: int, data: Path) -> None:
        if (isinstance(trial, bool) or not isinstance(trial, int | np.integer)
                or not 0 <= trial < theta.shape[0]):
            raise ValueError(f"trial must be an integer in [0, {theta.shape[0]}), got {trial!r}")
        cfg, corpus, where, algo = _learner(Path(run_dir), description, path, [int(trial)], data)
        self.description, self.trial, self.learner = description, int(trial), 0
        (self.fold, self.run), = where
        self.env: str = description["env"]
        self.fold_data = fold_data(cfg, corpus, self.fold)
        self.width = self.fold_data.shapes.width
        self.variant = algo.variants[-1]
        self.params = _params(description, theta, self.trial)
        self._tag = _tagging(cfg, algo.features, 0)

    def act(self, text: Any, key: Any = None) -> Any:
        """The tag of each word of `text` = (words, POS tags), two equally long lists of str
        (POS tags as the corpus's: Penn Treebank), or of each text of a list of them: int32
        (len(words),) for one text, a list of such for a list. Tags are the task's state tags
        (privrl.envs.text2action): 2 SELECTED (an action name), 1 NEGLECTED, 0 UNTAGGED for a
        word past the run's width (the networks read at most `width` words; the run's own
        scoring counts such words as not selected). Words and POS tags the fold never saw
        in training read as unknown (id 0), as in the run. Greedy only: `key` must be None."""
        if key is not None:
            raise ValueError(f"{self.description['system']}'s networks tag greedily (the "
                             f"run's {self.variant} evaluation); act takes no key")
        texts, one = _raw_texts(text)
        if not texts:
            return []
        count = 1 << (len(texts) - 1).bit_length()  # padded: one compilation per power of 2
        tags = np.asarray(self._tag(self.params, self.fold_data.pack(texts, count))[0],
                          np.int32)
        out = [np.pad(tags[k, :min(len(w), self.width)], (0, max(len(w) - self.width, 0)))
               for k, (w, _) in enumerate(texts)]
        return out[0] if one else out


def _raw_texts(text: Any) -> tuple[list[tuple[list[str], list[str]]], bool]:
    """(the texts, whether `text` was one text): ValueError in one line for anything that is
    not a text (words, POS tags) or a list of them."""
    def is_text(t: Any) -> bool:
        return (isinstance(t, list | tuple) and len(t) == 2
                and all(isinstance(s, list | tuple) and all(isinstance(x, str) for x in s)
                        for s in t))

    one = is_text(text)
    texts = [text] if one else text
    if not one and not (isinstance(texts, list | tuple) and all(is_text(t) for t in texts)):
        raise ValueError(f"act takes a text (words, pos_tags), two lists of str, or a list "
                         f"of such texts; got {type(text).__name__} {text!r:.60}")
    for k, (words, pos) in enumerate(texts):
        if len(words) != len(pos):
            raise ValueError(f"text {k} has {len(words)} words and {len(pos)} POS tags; act "
                             "takes one POS tag per word")
    return [(list(w), list(p)) for w, p in texts], one


def load(run_dir: str | os.PathLike, description: dict[str, Any], theta: np.ndarray,
         path: Path, trial: int, data: Path) -> TextPolicy:
    """What privrl.load_policy gives for a Text2Action run (privrl.policy.register_player;
    privrl.policy.data_argument has checked `data`, which `DATA` makes required)."""
    return TextPolicy(run_dir, description, theta, path, trial, data)


def _config(run_dir: Path, description: dict[str, Any]) -> TextConfig:
    def build(name: str, fields: dict[str, Any]) -> TextConfig:
        if name not in MODES:
            raise ValueError(f"{name!r} is not a Text2Action learner")
        return TextConfig(**fields).resolved()

    return run_config(run_dir, description, "a Text2Action policy tags the corpus as the "
                      "run's config splits it", build)


def _folds(description: dict[str, Any], path: Path, trials: list[int], folds: int
           ) -> list[tuple[int, int]]:
    """(fold, run) of each trial in `trials` (the file's `trial_is`), folds in [0, folds)."""
    with checked(path):
        which = description["trial_is"]
        if not isinstance(which, list) or len(which) != description["trials"]:
            raise ValueError("trial_is must give each trial's fold and run")
        out = []
        for t in trials:
            w = which[t]
            if not (isinstance(w, dict) and set(w) == {"fold", "run"}
                    and all(isinstance(w[k], int) and not isinstance(w[k], bool) for k in w)
                    and 0 <= w["fold"] < folds and w["run"] >= 0):
                raise ValueError(f"trial_is[{t}] = {w!r:.80} is not a fold and run")
            out.append((w["fold"], w["run"]))
    return out


def _learner(run_dir: Path, description: dict[str, Any], path: Path, trials: list[int],
             data: Path) -> tuple[TextConfig, t2a.Corpus, list[tuple[int, int]], Any]:
    """(the run's config, its corpus read from `data`, each trial's (fold, run), the
    learner) for `trials`; a corpus that does not build the file's networks is ConfigError
    ("data"). Everything is checked before any word vector is trained."""
    cfg = _config(run_dir, description)
    corpus = t2a.load_corpus(data, cfg.corpus)  # ConfigError("data") for a bad corpus
    where = _folds(description, path, trials, len(corpus.folds))
    shapes = Shapes(t2a.width_for(corpus, cfg.max_words), len(t2a.Vocab.build(corpus.pos)),
                    t2a.vocabulary_size(corpus))
    algo = make_learner(cfg, shapes)
    want = [(n, held, model.dim) for n, held, model in algo.policy_networks()]
    with checked(path):
        have = [(n["name"], n["held_by"], n["dim"]) for n in description["networks"]]
    if have != want:
        raise ConfigError("data", f"{t2a.corpus_file(data, cfg.corpus)} does not fit the run's "
                          f"networks {have} (this corpus and its config.json build {want}): "
                          "not the corpus the run was trained on")
    return cfg, corpus, where, algo


@per_process
def _tagging(cfg: TextConfig, shapes: Shapes, seed: int) -> Callable[..., Any]:
    """The learner's noise-free greedy tagging `(params, texts) -> (tags, total reward)`,
    jitted once per config, shapes and seed in a process (`per_process`): a policy's `act` and
    `evaluate` of one run share its compiled programs."""
    algo = make_learner(cfg, shapes)
    variant = algo.variants[-1]  # the noise-free one: test-clean (FedRL), greedy (baselines)
    return jax.jit(lambda p, texts: algo.evaluate(p, texts, jax.random.key(seed), variant))


def _params(description: dict[str, Any], theta: np.ndarray, trial: int) -> Any:
    """Trial `trial`'s networks cut from θ (trials, 1, d), as the learner's `evaluate` takes
    them (a tuple of several)."""
    cuts = [theta[trial, 0, n["offset"]:n["offset"] + n["dim"]] for n in description["networks"]]
    return tuple(cuts) if len(cuts) > 1 else cuts[0]


def evaluate(run_dir: Path, description: dict[str, Any], theta: np.ndarray, path: Path,
             trials: list[int], episodes: int | None, seed: int, data: Path
             ) -> tuple[str, int, np.ndarray, dict[str, Any]]:
    """Each trial's noise-free greedy tagging of its fold's test texts (every one of them:
    `episodes` is refused). Returns (what was played, the width cap, each trial's average
    reward per step (trials, 1), {"scores": each trial's t2a.scores with its fold, run and
    number of texts}). Everything is checked before any word vector is trained."""
    if episodes is not None:
        raise ConfigError("episodes", f"{description['system']}'s networks tag every test text "
                          "of their fold (the run's test evaluation); leave it out")
    cfg, corpus, where, algo = _learner(run_dir, description, path, trials, data)
    variant = algo.variants[-1]
    returns, scores, packed = np.zeros((len(trials), 1)), [], {}
    # one program for every fold: the folds' texts are padded to the same shapes (its argument)
    play = _tagging(cfg, algo.features, seed)
    for i, (t, (fold, run)) in enumerate(zip(trials, where, strict=True)):
        if fold not in packed:  # each fold's texts once, for all its runs
            packed[fold] = fold_data(cfg, corpus, fold)
        fd = packed[fold]
        tags, total = play(_params(description, theta, t), fd.test)
        sc = t2a.scores(fd.test, np.asarray(tags), float(total))
        returns[i, 0] = sc["avg_reward"]
        scores.append({"fold": fold, "run": run, "texts": fd.info["test_texts"], **sc})
    what = (f"{description['env']}: each trial's fold's test texts ({data}), {variant} "
            "tagging; return = average reward per step")
    return what, algo.width, returns, {"scores": scores}
