"""Text2Action (Feng et al., IJCAI 2018; paper 002 section 5.2): tag the action names of a text.

An episode walks over the words of one text; at word t the agent selects (1) or neglects (0) it.
The state is the whole text (padded to `width` words) with the tags chosen so far: 0 for words
not reached yet, 1 neglected, 2 selected (the authors' encoding). Each party sees its own
feature column next to the tags: α the part-of-speech ids, β the word ids (its fixed word
vectors are part of its Q-network); the one-network baselines see both.

Host side: `load_corpus` reads and validates a corpus file of the data set (a `ConfigError`
names the file and the missing key), `Vocab` / `train_word_vectors` build the features of one
fold (word2vec on the fold's training texts only), `fold_texts` packs texts into padded arrays.
Device side: `reward`, `step`, `expert_tags` are pure JAX and vmap over texts. `extraction_counts`
and `scores` compute F1 and AvgRwd exactly as the authors' evaluation (docs/text2action.md).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.choices import TEXT2ACTION_CORPORA as CORPORA
from privrl.config import ConfigError, one_of

PAD, NON_ACTION, ESSENTIAL, OPTIONAL, EXCLUSIVE = 0, 1, 2, 3, 4  # word labels (act_type + 1)
UNTAGGED, NEGLECTED, SELECTED = 0, 1, 2  # state tags
NEGLECT, SELECT = 0, 1  # actions


@dataclass(frozen=True)
class RewardSpec:
    """The reward of the authors' Text2Action environment (values in docs/text2action.md).

    Basic reward, × `base`: non-action ±1 (neglect +, select −), essential action ±2 (select +),
    optional action +1 if selected else 0, exclusive action ±3 (+ for selecting it when no
    related action is selected yet, or neglecting it when one is, or when a later alternative
    is still to come). Additional reward (the prior proportion of action words), only where the
    basic reward is nonzero: with ρ = (words selected so far, this one included) / `num_words`,
    + `scale`·base·ρ² if ρ ≤ `action_rate` and the basic reward is positive, else −
    `scale`·base·ρ². The last word of a text earns `terminal_bonus` more.
    """

    base: float = 50.0
    assign: tuple[float, float, float] = (1.0, 2.0, 3.0)
    action_rate: float = 0.05
    scale: float = 5.0
    num_words: int = 500
    terminal_bonus: float = 2.0
    use_additional: bool = True


class Texts(NamedTuple):
    """Texts packed for the device: (T, W) padded with zeros; W = `width`."""

    pos: Array  # POS ids (0 = padding)
    word: Array  # word ids into the fold's vector table (0 = padding or out of vocabulary)
    label: Array  # PAD / NON_ACTION / ESSENTIAL / OPTIONAL / EXCLUSIVE
    related: Array  # (T, W, R) indices of a word's exclusive alternatives, -1 = none
    length: Array  # (T,) words of each text inside the episode (cut at `width`)
    vectors: Array  # (V, d) the fold's word vectors (row 0 = padding / unknown: zeros)

    @property
    def count(self) -> int:
        return int(self.length.shape[0])

    def take(self, idx: Any) -> Texts:
        return Texts(*(jnp.asarray(np.asarray(x)[idx]) for x in self[:-1]), self.vectors)


class Episode(NamedTuple):
    text: Array  # int32 index into Texts
    t: Array  # the current word
    tags: Array  # (W,) int32


# --- reading the data set ------------------------------------------------------------------

@dataclass
class Corpus:
    name: str
    path: str
    words: list[list[str]]
    pos: list[list[str]]
    labels: list[np.ndarray]  # per text, (len,) int32 labels
    related: list[dict[int, list[int]]]  # per text: exclusive action index -> its alternatives
    folds: list[list[int]]  # act_5_fold_indices


def corpus_file(data: str | Path, name: str) -> Path:
    if name not in CORPORA:
        one_of("corpus", name, CORPORA)
    data = Path(data)
    if not data.is_dir():
        raise ConfigError("data", f"{data} is not a directory (expected the folder holding "
                                    f"{', '.join(c + '.json.gz' for c in CORPORA)})")
    path = data / f"{name}.json.gz"
    if not path.is_file():
        raise ConfigError("data", f"{path}: file not found")
    return path


def _key(obj: Any, key: str, path: Path, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise ConfigError("data", f"{path}: missing key {key!r} in {where}")
    return obj[key]


def load_corpus(data: str | Path, name: str) -> Corpus:
    """Read and validate `<data>/<name>.json.gz` (format: ../shared/data/README.md)."""
    path = corpus_file(data, name)
    try:
        with gzip.open(path, "rt") as f:
            raw = json.load(f)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError("data", f"{path}: not a gzipped JSON file ({e})") from None
    texts = _key(raw, "texts", path, "the top level")
    pos_tags = _key(raw, "pos_tags", path, "the top level")
    folds = _key(raw, "act_5_fold_indices", path, "the top level")
    if not isinstance(texts, list) or not texts:
        raise ConfigError("data", f"{path}: 'texts' must be a non-empty list")
    if not isinstance(pos_tags, list) or len(pos_tags) != len(texts):
        raise ConfigError("data", f"{path}: 'pos_tags' must hold one entry per text")
    words, pos, labels, related = [], [], [], []
    for i, text in enumerate(texts):
        where = f"texts[{i}]"
        w = _key(text, "words", path, where)
        tags = [p for sent in pos_tags[i] for p in sent]
        if len(tags) != len(w) or any(not isinstance(p, list) or len(p) != 2 for p in tags):
            raise ConfigError("data", f"{path}: pos_tags[{i}] must give one [word, tag] pair "
                                        f"per word of texts[{i}] ({len(tags)} != {len(w)})")
        lab = np.full(len(w), NON_ACTION, np.int32)
        rel: dict[int, list[int]] = {}
        for j, act in enumerate(_key(text, "acts", path, where)):
            at = f"{where}.acts[{j}]"
            idx, kind = _key(act, "act_idx", path, at), _key(act, "act_type", path, at)
            if not (isinstance(idx, int) and 0 <= idx < len(w)) or kind not in (1, 2, 3):
                raise ConfigError("data", f"{path}: {at} has act_idx {idx!r} / act_type "
                                            f"{kind!r} (need an index into words and 1, 2, 3)")
            lab[idx] = kind + 1
            if kind == 3:
                rel[idx] = [int(r) for r in _key(act, "related_acts", path, at)]
        words.append([str(x) for x in w])
        pos.append([str(p[1]) for p in tags])
        labels.append(lab)
        related.append(rel)
    all_idx = sorted(int(i) for f in folds for i in f)
    if len(folds) != 5 or all_idx != list(range(len(texts))):
        raise ConfigError("data", f"{path}: 'act_5_fold_indices' must split the "
                                    f"{len(texts)} texts into 5 folds")
    return Corpus(name, str(path), words, pos, labels, related, [list(map(int, f))
                                                                  for f in folds])


# --- features of one fold ------------------------------------------------------------------

def normalize(word: str) -> str:
    """Words are lowercased before lookup (the corpora are small; 'Click' = 'click')."""
    return word.lower()


@dataclass
class Vocab:
    """Index 0 is padding / unknown; known entries are numbered from 1 in first-seen order."""

    index: dict[str, int]

    @classmethod
    def build(cls, sequences: list[list[str]]) -> Vocab:
        index: dict[str, int] = {}
        for seq in sequences:
            for s in seq:
                index.setdefault(s, len(index) + 1)
        return cls(index)

    def ids(self, seq: list[str]) -> np.ndarray:
        return np.array([self.index.get(s, 0) for s in seq], np.int32)

    def __len__(self) -> int:
        return len(self.index) + 1


def train_word_vectors(sentences: list[list[str]], dim: int = 50, seed: int = 0,
                       epochs: int = 20, window: int = 5) -> tuple[Vocab, np.ndarray]:
    """gensim word2vec (skip-gram, min_count 1, one worker: deterministic) on the given
    (training) sentences. Returns the vocabulary and a (len(vocab), dim) float32 table whose
    row 0 (padding and words never seen in training) is the zero vector."""
    from gensim.models import Word2Vec

    sents = [[normalize(w) for w in s] for s in sentences if s]
    model = Word2Vec(sents, vector_size=dim, window=window, min_count=1, sg=1, workers=1,
                     seed=seed, epochs=epochs)
    vocab = Vocab({w: i + 1 for i, w in enumerate(model.wv.index_to_key)})
    table = np.zeros((len(vocab), dim), np.float32)
    table[1:] = model.wv.vectors
    return vocab, table


def sentences_of(corpus: Corpus, texts: list[int]) -> list[list[str]]:
    """The texts as word sequences for word2vec (one text = one sentence: the data's word list,
    so no token is lost or split differently)."""
    return [corpus.words[i] for i in texts]


def fold_texts(corpus: Corpus, texts: list[int], pos_vocab: Vocab, word_vocab: Vocab,
               width: int, vectors: np.ndarray, count: int | None = None) -> Texts:
    """Pack the given texts into (T, width) arrays; longer texts are cut at `width` words.
    With `count`, T = count: empty texts (length 0) pad the end, so that every fold has the
    same shapes (they are never drawn and add nothing to any metric)."""
    t = max(len(texts), count or 0)
    r = max([len(v) for i in texts for v in corpus.related[i].values()] + [1])
    pos = np.zeros((t, width), np.int32)
    word = np.zeros((t, width), np.int32)
    label = np.zeros((t, width), np.int32)
    related = np.full((t, width, r), -1, np.int32)
    length = np.zeros(t, np.int32)
    for k, i in enumerate(texts):
        n = min(len(corpus.words[i]), width)
        length[k] = n
        pos[k, :n] = pos_vocab.ids(corpus.pos[i][:n])
        word[k, :n] = word_vocab.ids([normalize(w) for w in corpus.words[i][:n]])
        label[k, :n] = corpus.labels[i][:n]
        for a, rel in corpus.related[i].items():
            if a < n:
                related[k, a, :len(rel)] = rel
    # device_put: no program per shape (jnp.asarray compiles a copy); `vectors` is copied
    # first, since the device array may share the host buffer of a caller's array
    return Texts(*(jax.device_put(x) for x in (pos, word, label, related, length,
                                               np.array(vectors, np.float32))))


def vocabulary_size(corpus: Corpus) -> int:
    """Distinct (normalized) words of the whole corpus + 1: a bound on any fold's word-vector
    table, so that every fold's table has the same shape (tables are zero-padded to it)."""
    return len({normalize(w) for ws in corpus.words for w in ws}) + 1


def width_for(corpus: Corpus, max_words: int) -> int:
    """Padded length: the longest text, at most `max_words` (the authors' num_words = 500)."""
    return min(max(len(w) for w in corpus.words), max_words)


# --- the environment (pure JAX, one text; vmap over texts) --------------------------------

def _exclusive_flags(tags: Array, related: Array, t: Array) -> tuple[Array, Array]:
    """(an alternative of word t is already selected, an alternative comes after t)."""
    valid = related >= 0
    chosen = jnp.any(valid & (tags[jnp.maximum(related, 0)] == SELECTED))
    later = jnp.any(valid & (related > t))
    return chosen, later


def reward(spec: RewardSpec, texts: Texts, ep: Episode, action: Array) -> tuple[Array, Array]:
    """Reward of `action` at word ep.t, and the tags after it. Pure; see RewardSpec."""
    t, i = ep.t, ep.text
    tags = ep.tags.at[t].set(action + 1)
    label = texts.label[i, t]
    a1, a2, a3 = (spec.base * a for a in spec.assign)
    sel = action == SELECT
    chosen, later = _exclusive_flags(tags, texts.related[i, t], t)
    excl_ok = (sel & ~chosen) | (~sel & chosen) | (~sel & later)
    basic = jnp.select(
        [label == ESSENTIAL, label == OPTIONAL, label == EXCLUSIVE],
        [jnp.where(sel, a2, -a2), jnp.where(sel, a1, 0.0), jnp.where(excl_ok, a3, -a3)],
        jnp.where(sel, -a1, a1))
    if spec.use_additional:
        rho = jnp.sum(tags == SELECTED) / spec.num_words
        extra = spec.scale * spec.base * rho ** 2
        basic = jnp.where(basic == 0, 0.0,
                          jnp.where((rho <= spec.action_rate) & (basic > 0), basic + extra,
                                    basic - extra))
    return basic, tags


def step(spec: RewardSpec, texts: Texts, ep: Episode, action: Array
         ) -> tuple[Episode, Array, Array]:
    """Tag word ep.t; returns (next episode state, reward, done). The last word of a text ends
    the episode and earns the terminal bonus."""
    r, tags = reward(spec, texts, ep, action)
    done = ep.t + 1 >= texts.length[ep.text]
    return Episode(ep.text, ep.t + 1, tags), r + jnp.where(done, spec.terminal_bonus, 0.0), done


def start(text: Array, width: int) -> Episode:
    return Episode(jnp.asarray(text, jnp.int32), jnp.int32(0), jnp.zeros(width, jnp.int32))


def observe(texts: Texts, ep: Episode, columns: tuple[str, ...]) -> Array:
    """A party's observation: its feature columns ('pos', 'word') and the tags, (W, c+1)."""
    cols = [getattr(texts, c)[ep.text] for c in columns] + [ep.tags]
    return jnp.stack(cols, -1).astype(jnp.float32)


def expert_tags(texts: Texts, i: Array) -> Array:
    """The best tagging of text i (every basic reward positive): select essential and optional
    actions, and of each group of exclusive alternatives the first one."""
    label, related = texts.label[i], texts.related[i]
    pos = jnp.arange(label.shape[0])
    first = ~jnp.any((related >= 0) & (related < pos[:, None]), -1)
    sel = (label == ESSENTIAL) | (label == OPTIONAL) | ((label == EXCLUSIVE) & first)
    return jnp.where(pos < texts.length[i], jnp.where(sel, SELECTED, NEGLECTED), UNTAGGED)


# --- metrics (host side, exactly the authors' counting) -------------------------------------

def extraction_counts(label: np.ndarray, related: np.ndarray, tags: np.ndarray,
                      length: int) -> tuple[int, int, int]:
    """(truth, right, selected) for one text's final tags, as the authors' compute_f1:
    selected = every selected word; an essential action counts in truth and is right when
    selected; an optional action counts (in truth and right) only when selected; each group of
    exclusive alternatives counts once in truth (its first member), and a member is right when
    it is selected and none of its alternatives is."""
    truth = right = selected = 0
    seen: set[int] = set()
    for s in range(length):
        sel = tags[s] == SELECTED
        selected += int(sel)
        lab = label[s]
        if lab == ESSENTIAL:
            truth += 1
            right += int(sel)
        elif lab == OPTIONAL and sel:
            truth += 1
            right += 1
        elif lab == EXCLUSIVE:
            alts = [int(r) for r in related[s] if r >= 0]
            if s not in seen:
                truth += 1
                seen.add(s)
            seen.update(alts)
            if sel and not any(tags[a] == SELECTED for a in alts):
                right += 1
    return truth, right, selected


def f1_score(truth: int, right: int, selected: int) -> dict[str, float]:
    """precision = right / selected, recall = right / truth, F1 their harmonic mean (0 when
    undefined, as the authors' basic_f1)."""
    rec = right / truth if truth else 0.0
    pre = right / selected if selected else 0.0
    f1 = 2 * pre * rec / (pre + rec) if pre + rec > 0 else 0.0
    return {"precision": pre, "recall": rec, "f1": f1}


def scores(texts: Texts, tags: np.ndarray, total_reward: float) -> dict[str, Any]:
    """F1 over all texts together (totals summed first, as the paper) and AvgRwd = total reward
    / total steps (one step per word inside the episode)."""
    label, related, length = (np.asarray(x) for x in (texts.label, texts.related, texts.length))
    tags = np.asarray(tags)
    totals = np.zeros(3, int)
    for k in range(label.shape[0]):
        totals += extraction_counts(label[k], related[k], tags[k], int(length[k]))
    steps = int(length.sum())
    return {**f1_score(*map(int, totals)), "truth": int(totals[0]), "right": int(totals[1]),
            "selected": int(totals[2]), "steps": steps,
            "avg_reward": float(total_reward) / max(steps, 1)}


def verb_tags(corpus: Corpus, texts: list[int], width: int) -> np.ndarray:
    """The select-every-verb baseline: select each word whose POS tag starts with VB."""
    out = np.zeros((len(texts), width), np.int32)
    for k, i in enumerate(texts):
        n = min(len(corpus.pos[i]), width)
        out[k, :n] = [SELECTED if p.startswith("VB") else NEGLECTED for p in corpus.pos[i][:n]]
    return out


def play(spec: RewardSpec, texts: Texts, tags_policy: Array) -> tuple[Array, Array]:
    """Replay a fixed tagging (T, W) through the environment: (final tags, total reward)."""
    width = texts.label.shape[1]

    def one(i: Array, plan: Array) -> tuple[Array, Array]:
        def body(c: tuple[Episode, Array], t: Array) -> tuple[tuple[Episode, Array], None]:
            ep, total = c
            live = t < texts.length[i]
            nxt, r, _ = step(spec, texts, ep, (plan[t] == SELECTED).astype(jnp.int32))
            ep = jax.tree_util.tree_map(lambda n, o: jnp.where(live, n, o), nxt, ep)
            return (ep, total + jnp.where(live, r, 0.0)), None

        (ep, total), _ = jax.lax.scan(body, (start(i, width), jnp.float32(0.0)),
                                      jnp.arange(width))
        return ep.tags, total

    tags, totals = jax.vmap(one)(jnp.arange(texts.count), jnp.asarray(tags_policy))
    return tags, jnp.sum(totals)
