"""Speculative decoding on real language models: AR, SD (fixed K / K = ∞), batch SD, biased decoding.

Convention: ``p`` = draft, ``q`` = target, both after the same sampling warp
(:class:`~speculab.backends.warp.Sampling`). Each prompt is decoded on its own
(one sequence at a time); batch SD drafts its ``M`` continuations as one batch
and verifies them in one batched target call. Both models keep KV caches that
are cropped back after a rejection. Counts follow the simulators
(:class:`~speculab.sim.Counts`): a *rejection* is a token drawn from the
rejection distribution, an *oracle call* is one target forward pass (a round),
*draft calls* are draft tokens sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from speculab._validate import as_positive_int
from speculab.backends.pair import ModelPair
from speculab.backends.warp import Sampling
from speculab.methods import SD, Autoregressive, BatchSD, Biased
from speculab.sim.counts import Counts

__all__ = ["decode", "DecodeResult", "RunRecord", "KIND_NAMES"]

#: Position kinds in :class:`RunRecord`.
DRAFT, CORRECTION, BONUS, TARGET = 0, 1, 2, 3
KIND_NAMES = ("draft", "correction", "bonus", "target")


@dataclass(frozen=True)
class RunRecord:
    """Per-position record of one decoded sequence (arrays of length = generated tokens).

    Attributes:
      tokens: generated token ids.
      kind: 0 accepted draft, 1 correction (a rejection), 2 bonus, 3 target sample (AR).
      tv: ``TV(p_n, q_n)`` at the position (NaN where ``p_n`` was not computed).
      reject_prob: conditional probability, given the prefix, that this position is a
        rejection (SD: ``TV``; batch root: ``Π r_m``; biased: ``Σ(1−b)p``; bonus: 0).
      accept_prob: acceptance probability ``b(x̃)`` of the draft token checked here (NaN if none).
      loss_tv: ``TV(P_A,n, q_n)`` of the algorithm's one-step output law to the target (0 if unbiased).
      loss_kl: ``KL(P_A,n ‖ q_n)`` likewise.
      target_logprob: ``log q_n(x_n)`` of the output token.
    """

    tokens: np.ndarray
    kind: np.ndarray
    tv: np.ndarray
    reject_prob: np.ndarray
    accept_prob: np.ndarray
    loss_tv: np.ndarray
    loss_kl: np.ndarray
    target_logprob: np.ndarray


@dataclass(frozen=True)
class DecodeResult:
    """What :func:`decode` returns: tokens, texts, :class:`Counts` (one run per prompt) and records."""

    tokens: list[list[int]]
    texts: list[str]
    counts: Counts
    records: list[RunRecord]


class _Builder:
    """Accumulates one run's output and per-position record."""

    def __init__(self):
        self.cols = {k: [] for k in RunRecord.__dataclass_fields__}
        self.counts = dict(rejections=0, oracle_calls=0, draft_calls=0, accepted=0, bonus=0)

    def add(self, token, kind, *, tv=float("nan"), reject_prob=0.0, accept_prob=float("nan"),
            loss_tv=0.0, loss_kl=0.0, target_logprob=float("nan")):
        for k, v in (("tokens", token), ("kind", kind), ("tv", tv), ("reject_prob", reject_prob),
                     ("accept_prob", accept_prob), ("loss_tv", loss_tv), ("loss_kl", loss_kl),
                     ("target_logprob", target_logprob)):
            self.cols[k].append(v)
        if kind == CORRECTION:
            self.counts["rejections"] += 1
        elif kind == DRAFT:
            self.counts["accepted"] += 1
        elif kind == BONUS:
            self.counts["bonus"] += 1

    def record(self) -> RunRecord:
        arr = {k: np.asarray(v, dtype=np.int64 if k in ("tokens", "kind") else np.float64) for k, v in self.cols.items()}
        return RunRecord(**arr)


# -- acceptance rules -----------------------------------------------------------------------------
def _rule(method, p: torch.Tensor, q: torch.Tensor):
    """``(b, unnormalised rejection weights, unbiased)`` for rows of ``p``, ``q`` (shape ``(n, V)``, float64).

    Where the weights sum to 0 (only round-off: then nothing can be rejected) they are replaced by ``q``.
    """
    tiny = torch.finfo(p.dtype).tiny
    if isinstance(method, Biased):
        b = torch.where(p > q + method.eps, (q + method.eps) / p.clamp_min(tiny), torch.ones_like(p))
        rej = (q - b * p).clamp_min(0) if method.rejection == "opt" else q
        unbiased = False
    else:
        b = torch.where(p > q, q / p.clamp_min(tiny), torch.ones_like(p))  # min(1, q/p), no division by 0
        rej = (q - p).clamp_min(0)
        unbiased = True
    rej = torch.where(rej.sum(-1, keepdim=True) > 0, rej, q)
    return b, rej, unbiased


def _tv(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return (p - q).clamp_min(0).sum(-1)


def _loss(method, p, q, b, rej):
    """Per-row TV and KL of the one-step output law ``P_A = b p + P_rej D`` to ``q`` (biased methods)."""
    D = ((1 - b) * p).sum(-1, keepdim=True)
    rej_n = rej / rej.sum(-1, keepdim=True)  # _rule guarantees a positive sum
    law = b * p + rej_n * D
    tv = 0.5 * (law - q).abs().sum(-1)
    tiny = torch.finfo(law.dtype).tiny
    kl = torch.where(law > 0, law * (law.clamp_min(tiny).log() - q.clamp_min(tiny).log()), torch.zeros_like(law)).sum(-1)
    kl = torch.where(((law > 0) & (q == 0)).any(-1), torch.full_like(kl, float("inf")), kl)
    return tv, kl


def _sample(prob: torch.Tensor, generator: torch.Generator, greedy: bool) -> int:
    """One token from an (unnormalised) distribution ``(V,)``; argmax when greedy."""
    if greedy:
        return int(prob.argmax())
    return int(torch.multinomial(prob, 1, generator=generator))


# -- the decoding loop ----------------------------------------------------------------------------------
class _Run:
    def __init__(self, pair: ModelPair, prompt: list[int], sampling: Sampling, generator, max_new: int, track_draft: bool):
        self.pair, self.sampling, self.g = pair, sampling, generator
        self.ids = list(prompt)
        self.n_prompt = len(prompt)
        self.max_new = max_new
        self.eos = pair.eos_token_id
        self.dev = pair.device
        self.ds, self.ts = pair.draft.start(), pair.target.start()
        self.out = _Builder()
        self.track_draft = track_draft
        self.done = False

    @property
    def remaining(self) -> int:
        return self.max_new - (len(self.ids) - self.n_prompt)

    def _tensor(self, tokens, rows=1):
        return torch.tensor([tokens] * rows, dtype=torch.long, device=self.dev)

    def _extend(self, model, state, tokens, rows=1):
        return model.extend(state, self._tensor(tokens, rows))

    def _accept(self, tokens):
        self.ids.extend(tokens)
        if self.eos is not None and self.eos in tokens or self.remaining <= 0:
            self.done = True
        n = len(self.ids) - 1
        self.pair.target.crop(self.ts, n)
        self.pair.draft.crop(self.ds, min(self.ds.length, n))

    # Algorithm 3 ---------------------------------------------------------------------------------
    def step_autoregressive(self):
        q = self.sampling.probs(self._extend(self.pair.target, self.ts, self.ids[self.ts.length:])[0, -1])
        self.out.counts["oracle_calls"] += 1
        x = _sample(q, self.g, self.sampling.greedy)
        tv = float("nan")
        if self.track_draft:
            p = self.sampling.probs(self._extend(self.pair.draft, self.ds, self.ids[self.ds.length:])[0, -1])
            tv = float(_tv(p, q))
        self.out.add(x, TARGET, tv=tv, reject_prob=1.0, target_logprob=float(q[x].log()))
        self.out.counts["rejections"] += 1  # [Yin]: AR is Alg. 2 with b ≡ 0, every token a rejection
        self._accept([x])

    # Algorithms 1 and 2 (one draft chain) ------------------------------------------------------------------------
    def _draft_chain(self, L: int, rows: int):
        """Draft ``L`` tokens per row; returns tokens ``(rows, L)`` and their laws ``(rows, L, V)``."""
        pair, greedy = self.pair, self.sampling.greedy
        p = self.sampling.probs(self._extend(pair.draft, self.ds, self.ids[self.ds.length:])[:, -1])  # (1, V)
        ps, xs = [], []
        if rows > 1:
            pair.draft.repeat(self.ds, rows)
            p = p.expand(rows, -1)
        for i in range(L):
            if greedy:
                x = p.argmax(-1)
            else:
                x = torch.multinomial(p, 1, generator=self.g)[:, 0]
            ps.append(p)
            xs.append(x)
            if rows == 1 and self.eos is not None and int(x[0]) == self.eos:
                break
            if i + 1 < L:
                p = self.sampling.probs(pair.draft.extend(self.ds, x[:, None])[:, -1])
        self.out.counts["draft_calls"] += rows * len(xs)
        return torch.stack(xs, 1), torch.stack(ps, 1)

    def _verify(self, method, xs, P, Q, start: int, bonus_ok: bool, root=None):
        """Scan drafts ``xs`` (L,) with laws ``P`` (L, V) against ``Q`` (L+1, V) from index ``start``.

        Emits accepted drafts, then a correction or a bonus token; returns the new tokens.
        """
        L = xs.numel()
        P, Q = P.double(), Q.double()  # acceptance ratios and per-step losses in float64
        Ps, Qs, drafts = P[start:], Q[start:L], xs[start:]  # the positions checked here, (n, V)
        n = L - start
        b, rej, unbiased = _rule(method, Ps, Qs)
        accept = b[torch.arange(n, device=xs.device), drafts]
        u = torch.rand(n, generator=self.g, device=xs.device)
        ok = (u < accept).tolist()
        n_ok = ok.index(False) if False in ok else n
        reject_prob = ((1 - b) * Ps).sum(-1)
        tv = _tv(Ps, Qs)
        ltv, lkl = (torch.zeros(n), torch.zeros(n)) if unbiased else _loss(method, Ps, Qs, b, rej)
        logq = Q.clamp_min(torch.finfo(Q.dtype).tiny).log()

        def emit(i: int, x: int, kind: int) -> None:
            self.out.add(x, kind, tv=float(tv[i]), reject_prob=float(reject_prob[i]), accept_prob=float(accept[i]),
                         loss_tv=float(ltv[i]), loss_kl=float(lkl[i]), target_logprob=float(logq[start + i, x]))
            new.append(x)

        new = list(root or [])
        for i in range(n_ok):
            emit(i, int(drafts[i]), DRAFT)
        if n_ok < n:
            emit(n_ok, _sample(rej[n_ok], self.g, self.sampling.greedy), CORRECTION)
        elif bonus_ok and (self.eos is None or int(xs[-1]) != self.eos):
            x = _sample(Q[L], self.g, self.sampling.greedy)
            self.out.add(x, BONUS, target_logprob=float(logq[L, x]))
            new.append(x)
        return new

    def step_speculative(self, method, K: int | None):
        L = self.remaining if K is None else min(K, self.remaining)
        xs, P = self._draft_chain(L, 1)
        xs, P = xs[0], P[0]  # (L,), (L, V)
        L = xs.numel()
        logits = self._extend(self.pair.target, self.ts, self.ids[self.ts.length:] + xs.tolist())[0, -(L + 1):]
        self.out.counts["oracle_calls"] += 1
        Q = self.sampling.probs(logits)  # (L+1, V)
        bonus_ok = K is not None and L == K and self.remaining > L
        self._accept(self._verify(method, xs, P, Q, 0, bonus_ok))

    # Algorithm 4 -------------------------------------------------------------------------------------
    def step_batch(self, method: BatchSD):
        M = method.M
        L = self.remaining if method.K is None else min(method.K, self.remaining)
        xs, P = self._draft_chain(L, M)  # (M, L), (M, L, V)
        L = xs.size(1)  # with M = 1 drafting stops at EOS
        catch = self.ids[self.ts.length:]
        self.pair.target.repeat(self.ts, M)
        tokens = torch.cat([self._tensor(catch, M), xs], 1)
        logits = self.pair.target.extend(self.ts, tokens)[:, -(L + 1):]
        self.out.counts["oracle_calls"] += 1
        Q = self.sampling.probs(logits)  # (M, L+1, V)
        p_root, q_root = P[0, 0].double(), Q[0, 0].double()
        tv_root = float(_tv(p_root, q_root))
        root_reject = float(_root_reject_prob(q_root, p_root, M))  # Π_m r_m, whichever draft is taken
        u, R = q_root.clone(), torch.ones((), dtype=q_root.dtype, device=q_root.device)
        logq = q_root.double().clamp_min(torch.finfo(torch.float64).tiny).log()
        chosen = None
        for m in range(M):
            x = int(xs[m, 0])
            accept = float(torch.clamp(u[x] / (R * p_root[x]), max=1.0)) if R > 0 else 1.0
            if float(torch.rand((), generator=self.g, device=xs.device)) < accept:
                chosen = m
                self.out.add(x, DRAFT, tv=tv_root, reject_prob=root_reject, accept_prob=accept,
                             target_logprob=float(logq[x]))
                break
            u = (u - R * p_root).clamp_min(0)
            R = u.sum()
        if chosen is None:
            x = _sample(u, self.g, self.sampling.greedy)
            self.out.add(x, CORRECTION, tv=tv_root, reject_prob=root_reject, target_logprob=float(logq[x]))
            self.pair.target.select(self.ts, 0)
            self.pair.draft.select(self.ds, 0)
            self._accept([x])
            return
        self.pair.target.select(self.ts, chosen)
        self.pair.draft.select(self.ds, chosen)
        row_x, row_P, row_Q = xs[chosen], P[chosen], Q[chosen]
        if self.eos is not None and int(row_x[0]) == self.eos:
            self._accept([int(row_x[0])])
            return
        # truncate the chosen draft at its first EOS
        toks = row_x.tolist()
        if self.eos is not None and self.eos in toks[1:]:
            cut = toks.index(self.eos, 1) + 1
            row_x, row_P = row_x[:cut], row_P[:cut]
            row_Q = torch.cat([row_Q[:cut], row_Q[cut:cut + 1]])
        bonus_ok = method.K is not None and row_x.numel() == method.K and self.remaining > row_x.numel()
        self._accept(self._verify(SD(), row_x, row_P, row_Q, 1, bonus_ok, root=[int(row_x[0])]))


def _root_reject_prob(q: torch.Tensor, p: torch.Tensor, M: int) -> torch.Tensor:
    """``Π_{m≤M} TV(q^m, p)`` by the division-free recursion of :mod:`speculab.theory.batch`."""
    u, R = q.clone(), torch.ones((), dtype=q.dtype, device=q.device)
    for _ in range(M):
        u = (u - R * p).clamp_min(0)
        R = u.sum()
    return R


def decode(
    pair: ModelPair,
    prompts: list[str] | list[list[int]] | str,
    method=SD(),
    *,
    max_new_tokens: int = 64,
    sampling: Sampling = Sampling(),
    generator: torch.Generator | int = 0,
    track_draft: bool = False,
) -> DecodeResult:
    """Decode each prompt with ``method`` on a real draft/target pair.

    Args:
      pair: from :func:`speculab.backends.load_pair`.
      prompts: a string, a list of strings, or a list of token-id lists.
      method: ``Autoregressive()``, ``SD(K=None | int)``, ``BatchSD(M, K=None)``,
        ``Biased(eps, "opt" | "uno", K=None)``.
      max_new_tokens: generated tokens per prompt (fewer if EOS is produced).
      sampling: temperature / top-k / top-p, applied identically to ``p`` and ``q``.
      generator: a ``torch.Generator`` on the pair's device, or an int seed for a new one.
      track_draft: for ``Autoregressive``, also run the draft to record ``TV(p_n, q_n)``.

    Returns:
      :class:`DecodeResult` with one ``Counts`` run and one :class:`RunRecord` per prompt.
    """
    max_new_tokens = as_positive_int(max_new_tokens, "max_new_tokens")
    if not isinstance(method, (Autoregressive, SD, BatchSD, Biased)):
        raise ValueError(f"method must be Autoregressive, SD, BatchSD or Biased for real models; got {method!r}")
    if isinstance(generator, int) and not isinstance(generator, bool):
        generator = torch.Generator(device=pair.device).manual_seed(generator)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or an int seed; got {generator!r}")
    if torch.device(generator.device).type != pair.device.type:
        raise ValueError(f"generator is on {generator.device} but the models are on {pair.device}; "
                         "create it with torch.Generator(device=pair.device)")
    if isinstance(prompts, str):
        prompts = [prompts]
    encoded = [list(p) if not isinstance(p, str) else pair.tokenizer.encode(p) for p in prompts]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"prompt {i} is empty; give at least one token")
        if pair.max_length and len(ids) + max_new_tokens > pair.max_length:
            raise ValueError(
                f"prompt {i} has {len(ids)} tokens; with max_new_tokens={max_new_tokens} the sequence "
                f"exceeds the models' context of {pair.max_length}"
            )
    results, records, fields = [], [], {k: [] for k in Counts.FIELDS}
    for ids in encoded:
        run = _Run(pair, ids, sampling, generator, max_new_tokens, track_draft)
        while not run.done:
            if isinstance(method, Autoregressive):
                run.step_autoregressive()
            elif isinstance(method, BatchSD):
                run.step_batch(method)
            else:
                run.step_speculative(method, method.K)
        gen = run.ids[run.n_prompt:]
        results.append(gen)
        records.append(run.out.record())
        c = run.out.counts
        for k in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
            fields[k].append(c[k])
        fields["discarded"].append(c["draft_calls"] - c["accepted"])
        fields["tokens"].append(len(gen))
    counts = Counts(**{k: np.asarray(v, dtype=np.int64) for k, v in fields.items()})
    texts = [pair.tokenizer.decode(t, skip_special_tokens=True) for t in results]
    return DecodeResult(results, texts, counts, records)
