"""Decoding real language models with any method that has a round rule: the entry point and the one-prompt loop.

Convention: ``p`` = draft, ``q`` = target, both after the same sampling warp
(:class:`~speculab.backends.warp.Sampling`). Prompts are decoded together as the rows
of one batch (:mod:`speculab.backends.batched`) unless ``batch_size=1``; this module is
the one-prompt path and what both share.
A round drafts ``L = method.draft_length(remaining)`` tokens on ``method.rows``
rows (one batched draft pass per token), scores them with one batched target
call, and asks the method for the exact law of its decision given the block
(:meth:`speculab.methods.Method.round_law`, written once against the array API —
the same code the simulators run). The decision is drawn from that law with two
uniforms (:mod:`speculab.backends.streams`); the round's output and records are those
of :func:`~speculab.backends.rounds.round_output`, as on the batched path; both
models' KV caches are then reduced to the followed row and cropped back to the
accepted prefix. Counts follow the simulators (:class:`~speculab.counts.Counts`).
"""

from __future__ import annotations

import numbers
import time
from functools import partial

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from speculab import kernels
from speculab._progress import advance, expect
from speculab._validate import as_positive_int, check_text, spawn_seeds
from speculab.backends.batched import batchable, decode_batched
from speculab.backends.tree_decode import check_tree_pair, decode_trees
from speculab.backends.journal import encode_run, open_journal
from speculab.backends.journal_sense import run_limits
from speculab.backends.models import HFModel
from speculab.backends.pair import ModelPair, check_pair
from speculab.backends.rounds import COUNTED, Records, RoundInfo, RoundRecord, RunRecord, record, round_output
from speculab.backends.streams import OUTCOME, TOKEN, head_lane, key_words, uniforms
from speculab.backends.warp import Sampling, check_laws
from speculab.counts import KIND_NAMES, Counts
from speculab.methods import SD, Method, sample_round
from speculab.methods.capabilities import DraftHead, drafting_law, has, head_of, reading
from speculab.methods.probe import RoundProbe

__all__ = [
    "decode",
    "encode_prompts",
    "PromptRefused",
    "DecodeResult",
    "RunRecord",
    "RoundRecord",
    "RoundInfo",
    "KIND_NAMES",
    "COUNTED",
]


@dataclass(frozen=True)
class DecodeResult:
    """What :func:`decode` returns: tokens, texts, :class:`Counts` (one run per prompt), position and round records,
    and the call's wall time in seconds (for a call replayed from a journal, the time it took when it ran)."""

    tokens: list[list[int]]
    texts: list[str]
    counts: Counts
    records: list[RunRecord]
    rounds: list[RoundRecord]
    seconds: float = float("nan")


# -- one run ------------------------------------------------------------------------------------------------
class _Run:
    """One prompt decoded on its own: the models' caches cropped back after each round (real rollback), a head
    read while drafting where the method has one. Each round ends as a batched one does
    (:func:`~speculab.backends.rounds.round_output` on one row), with the same uniforms."""

    def __init__(
        self,
        index: int,
        pair: ModelPair,
        prompt: list[int],
        sampling: Sampling,
        key: int,
        max_new: int,
        track_draft: bool,
        on_round: Callable | None,
        records: Records,
        slot: int,
    ):
        self.index, self.pair, self.sampling = index, pair, sampling
        self.dev = pair.device
        self.key = key_words([key], self.dev)  # (1, 2)
        self.round_index = 0
        self.ids = list(prompt)
        self.n_prompt = len(prompt)
        self.max_new = max_new
        self.eos = pair.eos_token_id
        self.ds, self.ts = pair.draft.start(), pair.target.start()
        self.track_draft = track_draft
        self.on_round = on_round
        self.records, self.slot = records, torch.tensor([slot], device=self.dev)
        self._small: dict[int, torch.Tensor] = {}
        self.done = False

    @property
    def remaining(self) -> int:
        return self.max_new - (len(self.ids) - self.n_prompt)

    def _tensor(self, tokens, rows=1):
        return torch.tensor([tokens] * rows, dtype=torch.long, device=self.dev).reshape(rows, len(tokens))

    def _catch_up(self, model, state, hidden: bool = False):
        """Feed ``model`` the accepted tokens it has not seen yet; return the logits after the last ``(1, 1, V)``
        (with ``hidden``: the logits and the last hidden states at all of them, ``(1, n, V)`` and ``(1, n, d)``)."""
        tokens = self._tensor(self.ids[state.length :])
        return model.extend(state, tokens, hidden=True) if hidden else model.extend(state, tokens, last=True)

    def _accept(self, tokens: list[int]) -> None:
        self.ids.extend(tokens)
        if self.eos is not None and self.eos in tokens or self.remaining <= 0:
            self.done = True
        n = len(self.ids) - 1
        self.pair.target.crop(self.ts, n)
        self.pair.draft.crop(self.ds, min(self.ds.length, n))

    def _draft(self, L: int, rows: int, method: Method, U):
        """Draft ``L`` tokens per row; returns tokens ``(rows, L)``, their laws ``(rows, L, V)`` and the values the
        method's head gave at the slots (:class:`~speculab.methods.capabilities.DraftHead`; ``[]`` without one).

        ``U``: the round's uniforms ``(1, ·)`` (:mod:`speculab.backends.streams`: draft lanes, then the head's).
        A single row stops at EOS, or where the draft proposes nothing (the block is then shorter than ``L``,
        possibly empty: the round is then one target step), or where the method's head on the draft's hidden
        states says stop. A head reading the drafted token (SpecDec++) is run on each drafted token but the block's
        last possible one, fed to the draft for its hidden state — a round the head stops early costs one draft
        forward more than its drafts. A head reading the previous token (SPRINTER's verifier) reads the hidden state
        of the pass that computed the slot's law, before the slot is drafted: it costs no forward pass.
        """
        pair, greedy = self.pair, self.sampling.greedy
        u = U[0, 2 : 2 + L * rows].reshape(L, rows).T  # (rows, L): draft_lane(i, m, rows)
        proposes = getattr(pair.draft, "proposes", None) if rows == 1 else None
        if proposes is not None and not proposes(tuple(self.ids)):  # nothing to draft: the draft catches up later
            return (*self._no_drafts(rows, pair.vocab_size), [])
        head = head_of(method) if rows == 1 else None
        previous = head is not None and method.head_reads == "previous"
        heads = U[0, 2 + L * rows :].tolist() if head is not None else []  # head_lane(i), one per slot
        if previous:
            logits, hidden = self._catch_up(pair.draft, self.ds, hidden=True)
        else:
            logits = self._catch_up(pair.draft, self.ds)
        p = drafting_law(method, self.sampling.probs(logits[:, -1].double(), check=False))  # (1, V): DraftLaw
        ps, xs = [], []
        if rows > 1:
            pair.draft.repeat(self.ds, rows)
            p = p.expand(rows, -1)
        predictions = []
        for i in range(L):
            if proposes is not None and not proposes(tuple(self.ds.history[0])):
                break  # the draft proposes nothing here (prompt lookup without a match): the block ends
            if previous:  # the head reads the state that gave this slot's law
                predictions.append(method.read_head(head(hidden[0, -1]), heads[i]))
            x = p.argmax(-1) if greedy else kernels.sample_index(p, u[:, i])
            ps.append(p)
            xs.append(x)
            if previous and method.stop_drafting(predictions, self.remaining):
                break
            if rows == 1 and self.eos is not None and int(x[0]) == self.eos:
                break
            if i + 1 == L:
                break
            if previous:
                logits, hidden = pair.draft.extend(self.ds, x[:, None], hidden=True)
            elif head is None:
                logits = pair.draft.extend(self.ds, x[:, None])
            else:  # the head reads the hidden state at x: stop, or draft on from the same pass's logits
                logits, hidden = pair.draft.extend(self.ds, x[:, None], hidden=True)
                predictions.append(method.read_head(head(hidden[0, -1]), heads[i]))
                if method.stop_drafting(predictions, self.remaining):
                    break  # the pass that read x is one more draft forward than SD makes for this block
            p = drafting_law(method, self.sampling.probs(logits[:, -1].double(), check=False))
        # the first slot always drafts: the loop's check there reads the history checked above (the caught-up draft's)
        return torch.stack(xs, 1), torch.stack(ps, 1), predictions

    def _no_drafts(self, rows: int, V: int):
        """An empty block: tokens ``(rows, 0)`` and laws ``(rows, 0, V)``."""
        return (
            torch.zeros((rows, 0), dtype=torch.long, device=self.dev),
            torch.zeros((rows, 0, V), dtype=torch.float64, device=self.dev),
        )

    def round(self, method: Method) -> None:
        """One round: draft, one target call, the method's law, the decision, records, cache rollback."""
        M, V = method.rows, self.pair.vocab_size
        L = method.draft_length(self.remaining)
        head = head_of(method) is not None
        lanes = list(range(2 + L * M)) + [head_lane(i) for i in range(L if head else 0)]  # the head's: past the drafts'
        U = uniforms(self.key, self.round_index, lanes)
        self.round_index += 1
        predictions = []
        if L > 0:
            xs, P, predictions = self._draft(L, M, method, U)  # (M, L), (M, L, V)
            L = xs.size(1)
        else:  # no drafts: the target alone (autoregressive decoding)
            xs, P = self._no_drafts(M, V)
        if M > 1:
            self.pair.target.repeat(self.ts, M)
        tokens = torch.cat([self._tensor(self.ids[self.ts.length :], M), xs], 1)
        # laws in float64 from the logits: acceptance ratios, round laws and losses exact to float64
        Q = self.sampling.probs(self.pair.target.extend(self.ts, tokens)[:, -(L + 1) :].double(), check=False)
        check_laws(Q, P)  # NaN logits of either model refused, once per round
        last = int(xs[0, -1]) if L else None
        bonus = bonus_possible(L, self.remaining, M, last, self.eos)
        if L == 0 and M == 1 and self.on_round is None:
            # no drafts: every method's round law is one token from q_1 (Method.round_law), drawn here directly
            # with the uniform sample_round would use — autoregressive steps, prompt lookup without a match
            law, zero = None, torch.zeros(1, dtype=torch.long, device=self.dev)
            decision = zero, zero, kernels.sample_index(Q[:1, 0], U[:, TOKEN])
            row = tau = 0
        else:
            law = (
                method.round_law(P[None], Q[None], xs[None], bonus=bonus, predictions=predictions)
                if head
                else method.round_law(P[None], Q[None], xs[None], bonus=bonus)
            )
            decision = sample_round(law, U[:, OUTCOME], U[:, TOKEN])
            row, tau = int(decision[0][0]), int(decision[1][0])
        if self.on_round is not None:
            self.on_round(RoundInfo(self.index, P, Q, xs, law, row, tau, predictions if head else None))
        if M > 1:
            self.pair.target.select(self.ts, row)
            self.pair.draft.select(self.ds, row)
        tracked = self._tracked_tv(Q[0, 0]) if self.track_draft and L == 0 else None
        called = 1 if not head or method.target_called(predictions) else 0
        out = round_output(
            law,
            P[None],
            Q[None],
            xs[None],
            decision,
            self._counts(L),
            rows=M,
            eos=self.eos,
            tracked_tv=tracked,
            oracle_calls=self._counts(called),
        )
        self.records.add(self.slot, out.chunk)
        tokens, valid = out.chunk.tokens[0].tolist(), out.chunk.valid[0].tolist()
        self._accept([t for t, v in zip(tokens, valid) if v])

    def _counts(self, n: int) -> torch.Tensor:
        """``n`` as a ``(1,)`` tensor on the device, made once per value (a round's block length, its target calls)."""
        if n not in self._small:
            self._small[n] = torch.full((1,), n, dtype=torch.long, device=self.dev)
        return self._small[n]

    def _tracked_tv(self, q):
        """``TV(p_n, q_n)`` ``(1,)`` for an autoregressive step, running the draft alongside (``track_draft``)."""
        p = self.sampling.probs(self._catch_up(self.pair.draft, self.ds)[0, -1].double())
        return kernels.tv(p, q)[None]


def bonus_possible(L: int, remaining: int, rows: int, last: int | None, eos: int | None) -> bool:
    """Whether a token may follow a block of ``L`` drafts with ``remaining`` tokens to go: not at the horizon, and not
    after a single row's block that ends with a drafted EOS (``last``: the block's last draft, ``None`` if empty).
    The output is cut at an accepted EOS anyway, so the EOS case changes no token or count; it keeps the round law
    honest for whoever reads it (``on_round``: ``tests/test_drafts.py`` checks it there)."""
    return L < remaining and not (rows == 1 and last is not None and eos is not None and last == eos)


def hidden_size(model: HFModel) -> int | None:
    """The width of ``model``'s hidden states (what a head reads), or ``None`` when its config does not say."""
    config = model.model.config
    return getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)


def prompt_list(prompts) -> list:
    """Prompts as a non-empty list: a string is one prompt; otherwise a sequence of strings or token-id lists."""
    if isinstance(prompts, str):
        return [prompts]
    if prompts is None or isinstance(prompts, (bytes, dict)) or not hasattr(prompts, "__iter__"):
        raise ValueError(f"prompts must be a string or a list of strings or token-id lists; got {prompts!r}")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty; give at least one prompt")
    return prompts


def _token_ids(p, i: int, vocab_size: int) -> list[int]:
    if not hasattr(p, "__iter__"):
        raise ValueError(f"prompt {i} must be a string or a list of token ids; got {p!r}")
    ids = list(p)
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 0 <= t < vocab_size:
            raise ValueError(f"prompt {i} must hold integer token ids in [0, {vocab_size}); got {t!r}")
    return [int(t) for t in ids]


class PromptRefused(ValueError):
    """A refusal of one prompt, by its ``index`` among the prompts given: the message is ``text`` with ``{prompt}``
    where the prompt is named (``what`` and its index, "prompt 3"), so that a caller that took the prompts under
    another name — the command line's ``--prompt`` — can name it so (:meth:`naming`)."""

    def __init__(self, text: str, index: int, what: str = "prompt"):
        self.text, self.index = text, index
        super().__init__(text.format(prompt=f"{what} {index}"))

    def naming(self, name: str) -> str:
        """The message with the prompt named ``name``."""
        return self.text.format(prompt=name)


def encode_prompts(pair: ModelPair, prompts, max_new_tokens: int, *, what: str = "prompt") -> list[list[int]]:
    """The prompts' token ids, each checked and with room for ``max_new_tokens`` (an int ``>= 1``) in the models'
    context: a refusal of one prompt is a :class:`PromptRefused` naming it as ``what`` and its index (``speculab
    plan`` says which of its held-out prompts)."""
    encoded = [
        pair.tokenizer.encode(check_text(p, f"prompt {i}")) if isinstance(p, str) else _token_ids(p, i, pair.vocab_size)
        for i, p in enumerate(prompt_list(prompts))
    ]
    for i, ids in enumerate(encoded):
        if not ids:
            raise PromptRefused("{prompt} is empty; give at least one token", i, what)
    i = max(range(len(encoded)), key=lambda j: len(encoded[j]), default=None)  # the longest: the tightest room
    if i is not None and pair.max_length and len(encoded[i]) + max_new_tokens > pair.max_length:
        room, n = pair.max_length - len(encoded[i]), len(encoded[i])
        if room <= 0:  # no max_new_tokens would do: the prompt is what must change
            text = f"{{prompt}} is {n} tokens, which leaves no room for a new one in the models' context of "
            raise PromptRefused(text + f"{pair.max_length}: shorten it", i, what)
        raise PromptRefused(
            f"max_new_tokens must be at most {room} for {{prompt}} ({n} tokens, the longest, in the models' context "
            f"of {pair.max_length}); got {max_new_tokens}",
            i,
            what,
        )
    return encoded


def decode(
    pair: ModelPair,
    prompts: list[str] | list[list[int]] | str,
    method: Method = SD(),
    *,
    max_new_tokens: int = 64,
    sampling: Sampling = Sampling(),
    key: Any,
    track_draft: bool = False,
    on_round: Callable[[RoundInfo], None] | None = None,
    batch_size: int | None = None,
) -> DecodeResult:
    """Decode each prompt with ``method`` on a real draft/target pair.

    Args:
      pair: from :func:`speculab.backends.load_pair`.
      prompts: a string, a list of strings, or a list of token-id lists.
      method: any registered method with a round rule (``speculab.methods.names(real_models=True)``):
        ``Autoregressive()``, ``SD(K)``, ``BatchSD(M, K)``, ``Biased(eps, "opt" | "uno", K)``,
        ``Fuzzy(theta, div, K)``, ``RejectionDecoding(b=f, rejection=g)`` with array-API functions, …
      max_new_tokens: generated tokens per prompt (fewer if EOS is produced).
      sampling: temperature / top-k / top-p, applied identically to ``p`` and ``q``.
      key: an int seed, a ``torch.Generator`` (on any device: it gives the seeds), or a numpy Generator (required,
        also under greedy decoding, so that a call never depends on a hidden default). Each prompt
        gets its own seed (:func:`speculab._validate.spawn_seeds`), and every uniform it uses is a function of
        that seed, the round and the decision it is for (:mod:`speculab.backends.streams`): the batched and
        the one-prompt path, on the CPU or on CUDA, draw the same numbers, so for the same key they give the same
        tokens and counts, prompt by prompt, up to draws within float round-off of a boundary (the models'
        logits differ in their last bits between batch shapes, torch thread counts and devices).
      track_draft: for ``Autoregressive``, also run the draft to record ``TV(p_n, q_n)``.
      on_round: called with a :class:`RoundInfo` after every round (e.g. to evaluate another
        rule on the same blocks); it runs under ``torch.inference_mode`` as the loop does (its tensors are
        inference tensors: read them, or ``.clone()`` them outside to keep them for autograd). A
        :class:`~speculab.backends.RoundProbe` is journaled with the runs inside ``resumable`` (a resumed call
        puts its observations back); a plain function makes the call run again in full. A tree method's rounds
        come in the node layout (:func:`speculab.backends.tree_decode.decode_trees`).
      batch_size: prompts decoded together as the rows of one batch (:mod:`speculab.backends.batched`;
        ``None``: all of them); ``1`` decodes one prompt at a time. Both paths give the same
        tokens, counts and records for the same key (each prompt's own random stream, see ``key``).
        A method whose head decides the round's length while drafting is batched when its head reads each
        drafted token's hidden state (SpecDec++'s acceptance head), and decoded one prompt at a time whatever
        ``batch_size`` when it reads the state before each slot (SPRINTER's verifier). A tree method
        (:mod:`speculab.methods.tree`) always runs as batches of rows, with tree attention
        (:mod:`speculab.backends.tree_decode`; ``batch_size=1``: batches of one).

    Returns:
      :class:`DecodeResult` with one ``Counts`` run, one :class:`RunRecord` and one
      :class:`RoundRecord` per prompt.
    """
    max_new_tokens, batch_size, head = _checked(pair, method, max_new_tokens, sampling, batch_size, on_round)
    trees = reading(method) == "trees"
    if trees:
        check_tree_pair(method, pair)
    encoded = encode_prompts(pair, prompts, max_new_tokens)
    seeds = spawn_seeds(key, len(encoded))  # each prompt's stream (speculab.backends.streams)
    # a head read before each slot is drafted (SPRINTER's verifier, which may skip the target): one prompt at a time
    # (a tree method always runs as batches of rows: batch_size=1 is a batch of one)
    batched = trees or (batch_size != 1 and (head is None or method.head_reads == "token") and batchable(method, pair))
    call = _Call(
        pair, method, encoded, seeds, sampling, max_new_tokens, track_draft, on_round, batch_size, trees, batched
    )
    n = len(encoded)
    block = (batch_size or n) if batched else 1  # what one line of a journal holds: one batch, or one prompt
    probe = on_round if isinstance(on_round, RoundProbe) else None  # a callback whose observations are journaled
    journal = None if on_round is not None and probe is None else call.journal(block, probe)
    limits = None if journal is None else run_limits(pair, method, max_new_tokens, probe is not None)
    if journal is None:
        block = n  # not journaled: one pass over every prompt, as the batched path splits them itself
    # the progress display counts each run's max_new_tokens: the tokens of each round, the rest when a run stops early
    expect(n * max_new_tokens, f"{method}: {n} run{'s' if n != 1 else ''} of {max_new_tokens} tokens")
    runs: list[tuple] = []  # per prompt: tokens, RunRecord, RoundRecord, counts, seconds
    before = {i: len(probe.rounds(i)) for i in range(n)} if probe is not None else {}  # a probe used before
    try:
        with torch.inference_mode():  # no autograd bookkeeping on the loop's many small operations
            for b, start in enumerate(range(0, n, block)):
                index = range(start, min(start + block, n))
                if journal is not None and b in journal.done:
                    runs += _replay(journal, b, index, limits, probe, max_new_tokens)
                    continue
                t0 = time.perf_counter()
                done = call.runs(index)
                each = (time.perf_counter() - t0) / len(index)
                new = [(*run, each) for run in done]
                if journal is not None:
                    journal.append(b, [encode_run(*r) | _observed(probe, i, before) for i, r in zip(index, new)])
                runs += new
    except BaseException:
        if probe is not None:  # back as it was before the call (a resumed call puts back what was journaled)
            probe.truncate(before)
        raise
    return _result(pair, runs)


def _checked(pair, method, max_new_tokens, sampling, batch_size, on_round) -> tuple[int, int | None, Any]:
    """:func:`decode`'s arguments checked (a ``ValueError`` naming the first that is wrong): ``max_new_tokens`` and
    ``batch_size`` as ints, and the method's head (``None`` if it has none)."""
    check_pair(pair)
    max_new_tokens = as_positive_int(max_new_tokens, "max_new_tokens")
    head = _checked_method(pair, method)
    if not isinstance(sampling, Sampling):
        raise ValueError(
            f"sampling must be a speculab.backends.Sampling (e.g. Sampling(temperature=0.8)); got {sampling!r}"
        )
    if batch_size is not None:
        batch_size = as_positive_int(batch_size, "batch_size")
    if on_round is not None and (not callable(on_round) or isinstance(on_round, type)):
        raise ValueError(
            f"on_round must be a function of a RoundInfo or a RoundProbe instance (or None); got "
            f"{on_round!r}" + (" (a class: give an instance, e.g. Probe())" if isinstance(on_round, type) else "")
        )
    return max_new_tokens, batch_size, head


def _checked_method(pair: ModelPair, method) -> Any:
    """The method's head (``None`` if it has none), once the method is one that runs on ``pair`` with that head."""
    if not isinstance(method, Method):
        raise ValueError(f"method must be a speculab method (e.g. SD(K=4)); got {method!r}")
    if not method.runs_on_real_models():
        raise ValueError(
            f"method {type(method).__name__} does not run on real models (it needs a trained "
            f"component); methods that do: {', '.join(_real_model_names())}"
        )
    head = head_of(method)
    if not has(method, DraftHead):
        return head
    if head is None:
        given = getattr(method, method.head_param)
        raise ValueError(
            f"{type(method).__name__} on real models needs a head trained on the draft's hidden states "
            f"(speculab.backends.heads.train_head, or load_head on a file a reproduction saved) as "
            f"its {method.head_param} — e.g. Sprinter(verifier=head, threshold=0.5), "
            f"SpecDecPP(h, head=head); on the command line --head FILE; got {given!r}"
        )
    if not isinstance(pair.draft, HFModel):
        raise ValueError(
            f"{type(method).__name__}'s head reads the draft's hidden states: the draft must be a "
            f"Hugging Face model; got {type(pair.draft).__name__}"
        )
    width = hidden_size(pair.draft)
    d_in = getattr(getattr(head, "config", None), "d_in", None)
    if d_in is None:
        raise ValueError(
            f"{type(method).__name__}'s head must be a speculab.backends.heads.TrainedHead "
            f"(train_head or load_head); got {head!r}"
        )
    if width is not None and d_in != width:
        raise ValueError(f"the head reads {d_in} features but the draft's hidden states have {width}")
    return head


@dataclass(frozen=True)
class _Call:
    """One :func:`decode` call, checked: what each block of its prompts is decoded with."""

    pair: ModelPair
    method: Method
    encoded: list[list[int]]
    seeds: list[int]
    sampling: Sampling
    max_new_tokens: int
    track_draft: bool
    on_round: Callable | None
    batch_size: int | None
    trees: bool
    batched: bool

    def journal(self, block: int, probe: RoundProbe | None):
        """The call's journal (:func:`~speculab.backends.journal.open_journal`), lines of ``block`` prompts."""
        return open_journal(
            self.pair,
            self.encoded,
            self.method,
            self.sampling,
            self.seeds,
            max_new_tokens=self.max_new_tokens,
            track_draft=self.track_draft,
            block_size=block,
            batched=self.batched,
            probe=probe,
        )

    def runs(self, index: range) -> list[tuple]:
        """The prompts ``index`` decoded, each run as (tokens, RunRecord, RoundRecord, counts): as the rows of
        batches (chains by :func:`decode_batched`, trees by :func:`decode_trees`), or one prompt at a time."""
        if self.batched:
            run_batch = decode_trees if self.trees else partial(decode_batched, track_draft=self.track_draft)
            return run_batch(
                self.pair,
                [self.encoded[i] for i in index],
                self.method,
                max_new_tokens=self.max_new_tokens,
                sampling=self.sampling,
                seeds=[self.seeds[i] for i in index],
                on_round=self.on_round,
                batch_size=self.batch_size,
                first_index=index.start,
            )
        records = Records(len(index))
        for slot, i in enumerate(index):
            run = _Run(
                i,
                self.pair,
                self.encoded[i],
                self.sampling,
                self.seeds[i],
                self.max_new_tokens,
                self.track_draft,
                self.on_round,
                records,
                slot,
            )
            left = self.max_new_tokens
            while not run.done:
                produced = len(run.ids)
                run.round(self.method)
                advance(len(run.ids) - produced)
                left -= len(run.ids) - produced
            advance(left)  # a run ended early (EOS): the rest of its budget
        return records.collect()


def _replay(journal, b: int, index: range, limits, probe: RoundProbe | None, max_new_tokens: int) -> list[tuple]:
    """Finished block ``b`` (prompts ``index``) read back from the journal, its probe's observations put back."""
    entries = journal.replay(b, len(index), limits)
    runs = [_replayed(entry) for entry in entries]
    advance(len(index) * max_new_tokens)
    if probe is not None:
        for i, entry in zip(index, entries):
            probe.restore(i, entry["probe"])
    return runs


def _observed(probe: RoundProbe | None, i: int, before: dict) -> dict:
    """What a journal line keeps of prompt ``i``'s probe: the rounds it observed in this call."""
    return {} if probe is None else {"probe": probe.rounds(i)[before[i] :]}


def _result(pair: ModelPair, runs: list[tuple]) -> DecodeResult:
    """The call's result from its runs (tokens, RunRecord, RoundRecord, counts, seconds), in the prompts' order."""
    fields = {k: [] for k in Counts.FIELDS}
    for gen, _, _, c, _ in runs:
        for k in COUNTED:
            fields[k].append(c[k])
        fields["discarded"].append(c["draft_calls"] - c["accepted"])
        fields["tokens"].append(len(gen))
    counts = Counts(**{k: np.asarray(v, dtype=np.int64) for k, v in fields.items()})
    results = [r[0] for r in runs]
    texts = [pair.tokenizer.decode(t, skip_special_tokens=True) for t in results]
    return DecodeResult(
        results, texts, counts, [r[1] for r in runs], [r[2] for r in runs], float(sum(r[4] for r in runs))
    )


def _replayed(entry: dict) -> tuple:
    """A run read back from a journal (:func:`speculab.backends.journal.encode_run`'s inverse)."""
    return (
        entry["tokens"],
        record(RunRecord, entry["record"]),
        record(RoundRecord, entry["rounds"]),
        entry["counts"],
        entry["seconds"],
    )


def _real_model_names() -> list[str]:
    from speculab.methods import names

    return names(real_models=True)
