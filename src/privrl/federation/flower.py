"""The aggregator side on Flower: Reports as Flower records, and PGC-A3C's ServerApp.

Agents run in SuperNodes of their own (privrl.systems.pgc_a3c.flower is the agent side;
privrl.runtime.flower starts a local deployment). Between them and this ServerApp travel only:

- to an agent: θ, the agent id and the submission index it is asked for (`request_content`);
- from an agent: a `Submission` (agent id, index, the Report's value and the guarantee it
  carries) and the episode's score (`submission_content`), or a Flower error saying why it
  refused (its budget is spent, the agent is not its own, ...).

The server checks every reply before any of it is used (`read_submission`: the records and
their types, a 1-D float32 value of the model's dimension, the guarantee's fields), then hands
the Submission to the same `AggregatorService` the Ray runtime uses, which refuses a
non-finite or misshaped value, another mechanism's guarantee, an unknown agent and a second
report for one (agent, index), charges the ledger, logs and applies. Nothing here imports
environment, rollout or system code (tests/test_boundary.py).

flwr is the optional `flower` extra; it is imported when this module is.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp

from privrl.federation.service import AggregatorService, Submission
from privrl.privacy.report import Guarantee, Report, restore_report

__all__ = ["PROGRESS", "RESULTS", "SLOT", "WireError", "ask_in_batches", "batch_content",
           "batch_reply_content", "read_batch", "read_batch_reply", "read_request",
           "read_submission", "request_content", "send_and_receive", "serve_pgc", "server_app",
           "submission_content"]

RESULTS = "flower.json"  # what the ServerApp leaves beside the aggregator's files
PROGRESS = "flower-progress.json"  # the same, as of the round in flight (what an abort keeps)
POLL_S = 0.1  # the ServerApp's wait between two pulls of replies (Flower's own grid: 3 s)
MAX_BATCH = 4096  # the most asks one message may carry (an agent refuses a longer list)
SLOT = "privrl-slot-"  # a SuperNode's registered name: SLOT + its index (hosts agents ≡ index)
_GUARANTEE_FIELDS = ("epsilon", "delta", "notion", "unit", "neighbouring", "sensitivity", "norm")
# Flower's own answers for a SuperNode that left (not the agent's refusals)
_GONE = (ErrorCode.NODE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE)


class WireError(ValueError):
    """A message whose records are not what the protocol sends; the reason, in one line."""


# --- the wire format -----------------------------------------------------------------------
def request_content(theta: np.ndarray, agent_id: int, index: int) -> RecordDict:
    """What the server asks of an agent: submission `index` of agent `agent_id`, from θ."""
    return RecordDict({"theta": ArrayRecord({"theta": Array(np.asarray(theta, np.float32))}),
                       "ask": ConfigRecord({"agent": int(agent_id), "index": int(index)})})


def read_request(content: RecordDict, dim: int) -> tuple[np.ndarray, int, int]:
    """θ (float32, shape (dim,), finite), agent id and index of a request, or WireError."""
    theta = _array(content, "theta", "theta", (dim,))
    if not np.all(np.isfinite(theta)):
        raise WireError("θ holds NaN or inf")
    ask = _config(content, "ask")
    return theta, _int(ask, "agent"), _int(ask, "index")


def submission_content(sub: Submission, score: float) -> RecordDict:
    """An agent's reply: its Submission (the Report's value and guarantee) and its score."""
    return RecordDict({
        "report": ArrayRecord({"value": Array(np.asarray(sub.report.value, np.float32))}),
        "ids": ConfigRecord({"agent": int(sub.agent_id), "index": int(sub.index)}),
        "guarantee": _guarantee_record(sub.report.guarantee),
        "score": MetricRecord({"score": float(score)})})


def read_submission(content: RecordDict, dim: int) -> tuple[Submission, float]:
    """The Submission and score a reply holds, or WireError. Only the form is checked here;
    the aggregator service checks the rest (finite, its mechanism, a new (agent, index))."""
    value = _array(content, "report", "value", (dim,))
    ids = _config(content, "ids")
    guarantee = _read_guarantee(_config(content, "guarantee"))
    score = content.metric_records.get("score")
    if score is None or not isinstance(score.get("score"), float):
        raise WireError("no score")
    report: Report = restore_report(value, guarantee)
    return Submission(_int(ids, "agent"), _int(ids, "index"), report), float(score["score"])


def _guarantee_fields(guarantee: Guarantee) -> dict[str, Any]:
    return {k: ("inf" if isinstance(v, float) and math.isinf(v) else v)
            for k, v in guarantee.to_state().items() if v is not None}


def _guarantee_record(guarantee: Guarantee) -> ConfigRecord:
    return ConfigRecord(_guarantee_fields(guarantee))


def _read_guarantee(config: Any) -> Guarantee:
    state: dict[str, Any] = dict.fromkeys(("sensitivity", "norm"))
    for k, v in config.items():
        if k not in _GUARANTEE_FIELDS:
            raise WireError(f"the guarantee has no field {k!r}")
        state[k] = math.inf if (k == "epsilon" and v == "inf") else v
    try:
        return Guarantee.from_state(state)
    except ValueError as e:
        raise WireError(f"not a guarantee: {e}") from None


# --- one message per SuperNode per round: a batch of asks, a batch of replies ------------------
# Flower moves every record of a message as an object of its own (an ArrayRecord: three, with
# its Array and chunk), one HTTP request per object at each of the three hops (sender to
# SuperLink or SuperNode, on to the other side, on to the executor or the ServerApp). A batch
# therefore travels as ONE config record each way, whatever its size: θ and the reports'
# values as little-endian float32 bytes of a length the reader checks (no header to parse).
# (A config record is one object, where flwr would cut an array into 5 MB chunks: a batch's
# values are asks × dim × 4 bytes, a few of PGC-A3C's small models a SuperNode a round.)
def batch_content(theta: np.ndarray, asks: list[tuple[int, int]]) -> RecordDict:
    """What the server asks of a SuperNode in one message: submission (a, index) from θ for
    each (a, index) in `asks`, in that order."""
    return RecordDict({"asks": ConfigRecord({
        "theta": _f32_bytes(theta), "agents": [int(a) for a, _ in asks],
        "indices": [int(i) for _, i in asks]})})


def read_batch(content: RecordDict, dim: int) -> tuple[np.ndarray, list[tuple[int, int]]] | None:
    """θ and the asks of a batch request (`batch_content`), None for a single request
    (`request_content`), or WireError."""
    if "asks" not in content.config_records:
        return None
    asks = _config(content, "asks")
    _only(asks, {"theta", "agents", "indices"})
    theta = _f32(asks.get("theta"), (dim,), "θ")
    if not np.all(np.isfinite(theta)):
        raise WireError("θ holds NaN or inf")
    agents, indices = _ints(asks, "agents"), _ints(asks, "indices")
    if len(agents) != len(indices) or not 0 < len(agents) <= MAX_BATCH:
        raise WireError(f"asks must be two integer lists of one length in 1..{MAX_BATCH}")
    return theta, list(zip(agents, indices, strict=True))


def batch_reply_content(items: list[tuple[Submission, float] | str]) -> RecordDict:
    """A SuperNode's reply to a batch, ONE config record: per ask, in order, its Submission
    and score or the reason it refused it. The released reports' values are the rows of one
    float32 block; each distinct guarantee (normally one) is written once, its fields as
    g<k>.<field>, and each report names its k."""
    released = [(i, item) for i, item in enumerate(items) if not isinstance(item, str)]
    guarantees: list[Guarantee] = []
    which = []
    for _, (sub, _) in released:
        if sub.report.guarantee not in guarantees:
            guarantees.append(sub.report.guarantee)
        which.append(guarantees.index(sub.report.guarantee))
    record: dict[str, Any] = {
        "size": len(items),
        "released": [i for i, _ in released],
        "agents": [int(sub.agent_id) for _, (sub, _) in released],
        "indices": [int(sub.index) for _, (sub, _) in released],
        "scores": [float(score) for _, (_, score) in released],
        "guarantee": which,
        "values": b"".join(_f32_bytes(sub.report.value) for _, (sub, _) in released),
        "refused": [i for i, item in enumerate(items) if isinstance(item, str)],
        "reasons": [item for item in items if isinstance(item, str)]}
    for k, guarantee in enumerate(guarantees):
        record.update({f"g{k}.{f}": v for f, v in _guarantee_fields(guarantee).items()})
    return RecordDict({"answers": ConfigRecord(record)})


def read_batch_reply(content: RecordDict, dim: int, size: int
                     ) -> list[tuple[Submission, float] | str]:
    """Per ask of a batch of `size`: the Submission and score (the checks of
    `read_submission`: a float32 value of shape (dim,), integer ids, a float score, a
    guarantee's fields) or the reason the agent refused it; WireError for a reply that is not
    one well-formed batch of `size` (then nothing of it is used)."""
    answers = _config(content, "answers")
    if _int(answers, "size") != size:
        raise WireError(f"not a reply to {size} asks")
    released, refused = _ints(answers, "released"), _ints(answers, "refused")
    if sorted(released + refused) != list(range(size)):
        raise WireError(f"released and refused must name each of the {size} asks once")
    agents, indices, which = (_ints(answers, k) for k in ("agents", "indices", "guarantee"))
    scores, reasons = answers.get("scores"), answers.get("reasons")
    if (not isinstance(scores, list) or not all(isinstance(v, float) for v in scores)
            or not isinstance(reasons, list) or not all(isinstance(v, str) for v in reasons)):
        raise WireError("scores must be floats and reasons strings")
    if (len(reasons) != len(refused)
            or {len(agents), len(indices), len(which), len(scores)} != {len(released)}):
        raise WireError("the batch's lists differ in length")
    fields: dict[int, dict[str, Any]] = {k: {} for k in set(which)}
    for key, v in answers.items():
        if key in _ANSWER_KEYS:
            continue
        k, _, field = key.partition(".")
        if not (k[1:].isdigit() and k == f"g{int(k[1:])}" and int(k[1:]) in fields):
            raise WireError(f"the reply has no field {key!r}")
        fields[int(k[1:])][field] = v
    guarantees = {k: _read_guarantee(f) for k, f in fields.items()}
    values = _f32(answers.get("values"), (len(released), dim), "the reports' values")
    out: list[tuple[Submission, float] | str] = [""] * size
    for i, reason in zip(refused, reasons, strict=True):
        out[i] = f"the agent refused: {reason}"
    for k, i in enumerate(released):
        report: Report = restore_report(values[k].copy(), guarantees[which[k]])
        out[i] = (Submission(agents[k], indices[k], report), scores[k])
    return out


_ANSWER_KEYS = frozenset({"size", "released", "agents", "indices", "scores", "guarantee",
                          "values", "refused", "reasons"})


def _f32_bytes(a: Any) -> bytes:
    return np.ascontiguousarray(a, "<f4").tobytes()


def _f32(data: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    """Little-endian float32 bytes of exactly `shape`, as a float32 array, or WireError."""
    if not isinstance(data, bytes) or len(data) != 4 * math.prod(shape):
        raise WireError(f"{what} must be {math.prod(shape)} float32 values as bytes")
    return np.frombuffer(data, "<f4").astype(np.float32).reshape(shape)


def _only(config: ConfigRecord, keys: set[str]) -> None:
    if set(config) != keys:
        raise WireError(f"a record must hold exactly {sorted(keys)}, got {sorted(config)}")


def _array(content: RecordDict, record: str, name: str, shape: tuple[int, ...]) -> np.ndarray:
    arrays = content.array_records.get(record)
    if arrays is None or set(arrays) != {name}:
        raise WireError(f"no array record {record!r} holding exactly {name!r}")
    try:  # the bytes themselves, not the dtype and shape the record declares for them
        a = arrays[name].numpy()  # np.load without pickles (flwr's Array)
    except (TypeError, ValueError, OSError) as e:
        raise WireError(f"{name} is not a NumPy array: {e}") from None
    if a.dtype != np.float32 or a.shape != shape:
        raise WireError(f"{name} must be float32 of shape {shape}, got {a.dtype} {a.shape}")
    return a


def _config(content: RecordDict, record: str) -> ConfigRecord:
    config = content.config_records.get(record)
    if config is None:
        raise WireError(f"no config record {record!r}")
    return config


def _ints(config: ConfigRecord, key: str) -> list[int]:
    v = config.get(key)
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                          for x in v):
        raise WireError(f"{key} must be a list of integers")
    return v


def _int(config: ConfigRecord, key: str) -> int:
    v = config.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise WireError(f"{key} must be an integer, got {v!r}")
    return v


# --- PGC-A3C's ServerApp ---------------------------------------------------------------------
def serve_pgc(grid: Grid, directory: Path, submissions: int, per_agent: int, parallel: int,
              nodes: int, wait_s: float = 60.0, reply_timeout_s: float = 300.0,
              poll_s: float = POLL_S) -> dict:
    """PGC-A3C's aggregator over Flower: `submissions` reports in rounds of `parallel`, each
    from θ as the round starts (the local runner's rounds), applied in submission order.

    The service is restored from `directory` (its setup written by whoever started the run:
    θ₀, the model's dimension, the agents, the ledger, the mechanism's guarantee), so this
    process holds nothing the setup does not say. Agent a lives on the SuperNode registered
    as slot a mod `nodes` (`SLOT`); a round sends each SuperNode ONE message with all its
    agents' asks (`ask_in_batches`), so a round costs one Flower round trip.

    A SuperNode that leaves the run (Flower reports it unavailable, or it is no longer
    online) is dead for the rest of it: its agents are asked nothing more and the run goes on
    with the others. Before each round PROGRESS records what is asked, so that whoever reads
    the results after an abort knows which asks may have been released. Returns what it
    writes to RESULTS: each submission's score (null where none was accepted), the
    refusals, the dead SuperNodes' slots and the asks that got no answer."""
    svc = AggregatorService.restore(directory)
    ids = _wait_for_nodes(grid, nodes, wait_s)
    dim = svc.aggregator.dim
    scores: list[float | None] = [None] * submissions
    refused: list[dict[str, Any]] = []
    dead: list[int] = []  # slots
    unanswered: list[list[int]] = []  # (agent, index) asked, no answer: maybe released

    def state(asked: list[tuple[int, int]]) -> dict[str, Any]:
        return {"nodes": ids, "scores": scores, "refused": refused, "dead": sorted(dead),
                "unanswered": unanswered, "asked": [list(x) for x in asked],
                "status": svc.status()}

    for start in range(0, submissions, parallel):
        theta = svc.theta()
        asked = list(range(start, min(start + parallel, submissions)))
        asks = [divmod(n, per_agent) for n in asked]
        live = [ask for ask in asks if ask[0] % nodes not in dead]
        _write_json(directory / PROGRESS, state(live))
        answers, gone = ask_in_batches(grid, ids, theta, live, dim, reply_timeout_s, poll_s)
        dead.extend(s for s in gone if s not in dead)
        for n, ask in zip(asked, asks, strict=True):
            slot = ask[0] % nodes
            answer = answers.get(ask) or (f"SuperNode {slot} left the run" if slot in dead
                                          else "no reply before the timeout")
            if not isinstance(answer, str):
                verdict = svc.submit(answer[0])
                if verdict.accepted:
                    scores[n] = answer[1]
                    continue
                answer = verdict.reason
            if ask in live and ask not in answers:
                unanswered.append(list(ask))
            refused.append({"submission": n, "reason": answer})
    svc.close()
    out = state([])
    del out["asked"]
    _write_json(directory / RESULTS, out)
    return out


def send_and_receive(grid: Grid, messages: Any, timeout: float | None,
                     poll_s: float = POLL_S, pushed: Any = None,
                     arrivals: dict[int, float] | None = None) -> list[Message]:
    """Flower's `Grid.send_and_receive` (push, then pull until every reply came or `timeout`
    passed), pulling every `poll_s` instead of flwr 1.42's fixed 3 s. `pushed`: the ids of
    messages already pushed, whose replies it waits for instead (`messages` is not pushed).
    `arrivals`: filled with when (time.monotonic) each node's reply was pulled."""
    pending = set(grid.push_messages(messages) if pushed is None else pushed)
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    out: list[Message] = []
    while pending:
        got = list(grid.pull_messages(list(pending)))
        out.extend(got)
        if arrivals is not None:
            arrivals.update({m.metadata.src_node_id: time.monotonic() for m in got})
        pending -= {m.metadata.reply_to_message_id for m in got}
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    return out


def ask_in_batches(grid: Grid, ids: list[int], theta: np.ndarray, asks: list[tuple[int, int]],
                   dim: int, timeout_s: float | None, poll_s: float = POLL_S
                   ) -> tuple[dict[tuple[int, int], tuple[Submission, float] | str], list[int]]:
    """Ask agent a (on the SuperNode of slot a mod len(ids)) for submission (a, index) from θ,
    for each (a, index) in `asks`: one message per SuperNode holding all its asks
    (`batch_content`). Waits for the replies, pulling every `poll_s`, until all came, a
    SuperNode is reported unavailable or is no longer online (its slot is returned as gone;
    its asks get no answer), or `timeout_s` passed. Returns the answers by ask (a Submission
    and score that are well formed and the one asked for, or why not; what the aggregator
    then accepts is its own check) and the slots gone. An ask without an answer is absent."""
    by_slot: dict[int, list[tuple[int, int]]] = {}
    for ask in asks:
        by_slot.setdefault(ask[0] % len(ids), []).append(ask)
    messages = {slot: Message(batch_content(theta, mine), dst_node_id=ids[slot],
                              message_type="train") for slot, mine in by_slot.items()}
    pending = {mid: slot for slot, mid in zip(messages, grid.push_messages(messages.values()),
                                               strict=True)}
    answers: dict[tuple[int, int], tuple[Submission, float] | str] = {}
    gone: list[int] = []
    deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
    next_check = time.monotonic() + 1.0
    while pending:
        for reply in grid.pull_messages(list(pending)):
            slot = pending.pop(reply.metadata.reply_to_message_id, None)
            if slot is None:
                continue
            if reply.has_error() and reply.error.code in _GONE:
                gone.append(slot)
                continue
            answers.update(_answers(reply, by_slot[slot], dim))
        if not pending or time.monotonic() > deadline:
            break
        if time.monotonic() > next_check:  # a SuperNode that went offline answers nothing
            online = set(grid.get_node_ids())
            for mid, slot in list(pending.items()):
                if ids[slot] not in online:
                    gone.append(slot)
                    del pending[mid]
            next_check = time.monotonic() + 1.0
        time.sleep(poll_s)
    return answers, gone


def _answers(reply: Message, asks: list[tuple[int, int]], dim: int
             ) -> dict[tuple[int, int], tuple[Submission, float] | str]:
    """A SuperNode's reply to its batch, per ask."""
    if (reason := _refusal(reply)) is not None:
        return dict.fromkeys(asks, reason)
    try:
        items = read_batch_reply(reply.content, dim, len(asks))
    except WireError as e:
        return dict.fromkeys(asks, f"malformed: {e}")
    out: dict[tuple[int, int], tuple[Submission, float] | str] = {}
    for ask, item in zip(asks, items, strict=True):
        if not isinstance(item, str) and (item[0].agent_id, item[0].index) != ask:
            item = f"not the submission asked for: {item[0].agent_id, item[0].index}"
        out[ask] = item
    return out


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a reader never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def ask_for_submissions(grid: Grid, ids: list[int], theta: np.ndarray,
                        asks: list[tuple[int, int]], dim: int, timeout_s: float | None
                        ) -> list[tuple[Submission | None, float | None, str | None]]:
    """Ask agent a (on the SuperNode ids[a mod len(ids)]) for its submission (a, index) from θ,
    for each (a, index) in `asks`, all at once. Per ask, in order: (submission, score, None)
    for a reply that is a well-formed Submission (`read_submission`) and the one asked for,
    else (None, None, why not). What the aggregator then accepts is its own check."""
    messages = [Message(request_content(theta, a, index), dst_node_id=ids[a % len(ids)],
                        message_type="train") for a, index in asks]
    replies = {r.metadata.reply_to_message_id: r
               for r in send_and_receive(grid, messages, timeout_s)}
    out: list[tuple[Submission | None, float | None, str | None]] = []
    for ask, sent in zip(asks, messages, strict=True):
        reply = replies.get(sent.metadata.message_id)
        reason = _refusal(reply)
        if reason is None:
            try:
                sub, score = read_submission(reply.content, dim)
            except WireError as e:
                reason = f"malformed: {e}"
            else:
                if (sub.agent_id, sub.index) == ask:
                    out.append((sub, score, None))
                    continue
                reason = f"not the submission asked for: {sub.agent_id, sub.index}"
        out.append((None, None, reason))
    return out


def _refusal(reply: Message | None) -> str | None:
    if reply is None:
        return "no reply before the timeout"
    if reply.has_error():
        return f"the agent refused: {reply.error.reason}"
    return None


def _wait_for_nodes(grid: Grid, nodes: int, wait_s: float) -> list[int]:
    """The SuperNode ids of slots 0..nodes-1: the nodes registered as f"{SLOT}{i}" that are
    online. A wrong mapping would only bring refusals: each agent refuses agents not its own."""
    deadline = time.monotonic() + wait_s
    while True:
        online = set(grid.get_node_ids())
        slots = {n.name: n.node_id for n in grid.get_nodes() if n.node_id in online}
        ids = [slots.get(f"{SLOT}{i}") for i in range(nodes)]
        if None not in ids:
            return [int(i) for i in ids if i is not None]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{sum(i is not None for i in ids)} of {nodes} SuperNodes "
                               f"connected in {wait_s:g} s")
        time.sleep(0.2)


server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    """The ServerApp's entry point: its parameters are the run config the app bundle names
    (privrl.runtime.flower writes it). It leaves RESULTS, or on a failure RESULTS with the
    error."""
    c = context.run_config
    directory = Path(str(c["aggregator-dir"]))
    try:
        serve_pgc(grid, directory, int(c["submissions"]), int(c["per-agent"]),
                  int(c["parallel"]), int(c["nodes"]), reply_timeout_s=float(c["reply-timeout"]))
    except Exception as e:  # whoever waits for RESULTS learns why there are none
        _write_json(directory / RESULTS, {"error": f"{type(e).__name__}: {e}"})
        raise
