"""The real WHS (win2k) corpus through the data path: loading, the five folds, word vectors,
packing, the reward and F1 (skipped without data).

Learning on the real corpora is a reproduction (`privrl reproduce fedrl-text2action --data DIR`,
RESULTS' FedRL on Text2Action section), not a test: a short training on real texts was the suite's
costliest test. That FedRL learns is tested on a synthetic corpus (test_text2action.py)."""

from pathlib import Path

import numpy as np
import pytest

from privrl.envs import text2action as t2a
from privrl.systems.fedrl_text.algorithm import text_config
from privrl.systems.fedrl_text.local import baselines, fold_data

DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "frl-text2action"  # ../shared


@pytest.mark.skipif(not (DATA / "win2k.json.gz").is_file(), reason="Text2Action data not here")
def test_the_real_corpus_loads_folds_and_scores_the_baselines():
    corpus = t2a.load_corpus(DATA, "win2k")
    n = len(corpus.words)
    # the five folds partition the texts
    assert len(corpus.folds) == 5 and sorted(i for f in corpus.folds for i in f) == list(range(n))
    cfg = text_config("cpu", mode="fedrl", corpus="win2k", max_words=64, w2v_epochs=1)
    data = fold_data(cfg, corpus, 0)
    test_idx = data.info["test_index"]
    assert sorted(test_idx) == sorted(corpus.folds[0])
    # word vectors come from the training texts only: each test text's words unseen in training
    # map to id 0 (unknown), and some do
    assert data.test.word.shape == (data.test.count, 64)
    assert np.any((data.test.word == 0) & (np.arange(64) < data.test.length[:, None]))
    ref = baselines(corpus, data, cfg.reward_spec())
    nothing, verbs = ref["select-nothing"], ref["select-every-verb"]
    # select-nothing finds no action; select-every-verb is a strong tagging on WHS (F1 0.786
    # over the whole corpus, benchmarks/log/06): it must find most actions, not all
    assert nothing["f1"] == 0 and nothing["right"] == 0
    assert 0.7 < verbs["f1"] < 0.9 and 0 < verbs["right"] < verbs["truth"]
    assert verbs["avg_reward"] > nothing["avg_reward"]
