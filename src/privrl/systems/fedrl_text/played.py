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

`privrl.load_policy` refuses such a run in one line: acting needs the fold's packed texts
(word ids from the fold's own vocabulary), not an observation a caller holds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from privrl.config import ConfigError
from privrl.envs import text2action as t2a
from privrl.policy import run_config
from privrl.runfile import checked
from privrl.systems.fedrl_text.algorithm import MODES, Shapes, TextConfig, make_learner
from privrl.systems.fedrl_text.local import fold_data

# What `privrl evaluate --data` is for such a run (privrl.evaluation asks for it).
DATA = "the corpus directory the run was trained on (--data DIR, holding <corpus>.json.gz)"


def load(run_dir: str | os.PathLike, description: dict[str, Any], theta: np.ndarray,
         path: Path, trial: int = 0) -> Any:
    """privrl.load_policy for a Text2Action run: refused in one line, saying why."""
    raise ConfigError("run_dir", f"{path} holds {description['system']}'s Text2Action "
                      "networks, which tag a fold's texts packed with that fold's own word "
                      "vocabulary, not an observation you hold; play them with privrl "
                      "evaluate RUN_DIR --data DIR (privrl.evaluate_run(run_dir, data=DIR))")


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
    variant = algo.variants[-1]  # the noise-free one: test-clean (FedRL), greedy (baselines)
    cuts = [theta[:, 0, n["offset"]:n["offset"] + n["dim"]] for n in description["networks"]]
    returns, scores, packed = np.zeros((len(trials), 1)), [], {}
    for i, (t, (fold, run)) in enumerate(zip(trials, where, strict=True)):
        if fold not in packed:  # each fold's texts once, for all its runs
            fd = fold_data(cfg, corpus, fold)
            packed[fold] = fd, jax.jit(lambda p, fd=fd: algo.evaluate(
                p, fd.test, jax.random.key(seed), variant))
        fd, play = packed[fold]
        params = tuple(c[t] for c in cuts) if len(cuts) > 1 else cuts[0][t]
        tags, total = play(params)
        sc = t2a.scores(fd.test, np.asarray(tags), float(total))
        returns[i, 0] = sc["avg_reward"]
        scores.append({"fold": fold, "run": run, "texts": fd.info["test_texts"], **sc})
    what = (f"{description['env']}: each trial's fold's test texts ({data}), {variant} "
            "tagging; return = average reward per step")
    return what, shapes.width, returns, {"scores": scores}
