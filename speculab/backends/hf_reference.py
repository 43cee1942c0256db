"""Hugging Face transformers' speculative sampling as installed, run as a black box for :mod:`speculab.certify`.

Nothing of transformers is copied here: its function ``transformers.generation.utils._speculative_sampling`` (the
acceptance step of its assisted generation), its logits warpers and ``generate(..., assistant_model=...)`` are
imported when called and run as they are, and their outputs are tested against the law they should follow:

* :func:`hf_sampler` wraps the acceptance step as a sampler for :func:`speculab.certify.check_sampler`: ``K``
  drafts from the draft's law, the step applied once, its first token returned. Its option
  ``assistant_ensemble_weight = w`` (static ensemble verification) accepts against ``v = w q + (1 − w) p`` by
  design: the law it outputs is ``v``, at ``TV(v, q) = (1 − w) TV(p, q)`` from the target (:func:`ensemble_law`).
* :func:`hf_laws` applies transformers' own temperature, top-k and top-p warpers, in the order its ``generate``
  applies them, to a pair of logits: the laws the step samples from and the law it must output.
* :func:`assisted_runs` decodes a prompt ``runs`` times with assisted generation on a model pair (one prompt at
  a time, as transformers requires), for the law tests of :func:`speculab.certify.check_decoder`.
Convention: ``p`` = draft, ``q`` = target (transformers' docstring uses the opposite letters).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers

import numpy as np
import torch

from speculab._validate import as_generator, as_positive_int

__all__ = ["transformers_version", "hf_laws", "hf_sampler", "ensemble_law", "assisted_config", "assisted_runs"]


def _default_device(device: torch.device):
    """``device`` as torch's default device while transformers runs, where it is not already (the context
    intercepts every torch call, so it is entered only when needed)."""
    current = torch.get_default_device()
    same = current.type == device.type and (device.index is None or current.index == device.index)
    return contextlib.nullcontext() if same else device


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def _check_weight(ensemble_weight) -> float | None:
    if ensemble_weight is None:
        return None
    ok = isinstance(ensemble_weight, numbers.Real) and not isinstance(ensemble_weight, bool)
    if not (ok and 0 < ensemble_weight < 1):
        raise ValueError(f"ensemble_weight must be None or a number in (0, 1); got {ensemble_weight!r}")
    return float(ensemble_weight)


def hf_laws(draft_logits, target_logits, *, temperature: float = 1.0, top_k: int | None = None, top_p=None):
    """``(p, q)``: the draft's and target's laws after transformers' warpers (temperature, then top-k, then top-p,
    as ``generate`` orders them), float64 numpy arrays ``(V,)``. Temperature must be positive: at 0 transformers
    decodes greedily and does not sample."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    real = lambda x: isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)  # noqa: E731
    if not (real(temperature) and temperature > 0):
        raise ValueError(
            f"temperature must be a finite number > 0 (greedy decoding samples nothing); got {temperature!r}"
        )
    if top_k is not None and not (isinstance(top_k, numbers.Integral) and not isinstance(top_k, bool) and top_k >= 0):
        raise ValueError(f"top_k must be None or an integer >= 0 (0: off); got {top_k!r}")
    if top_p is not None and not (real(top_p) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1]; got {top_p!r}")
    if np.shape(draft_logits) != np.shape(target_logits) or np.ndim(draft_logits) != 1:
        raise ValueError(
            f"draft_logits and target_logits must be vectors of one length; got {np.shape(draft_logits)} and "
            f"{np.shape(target_logits)}"
        )
    warpers = LogitsProcessorList([TemperatureLogitsWarper(float(temperature))])
    if top_k:
        warpers.append(TopKLogitsWarper(int(top_k)))
    if top_p is not None and top_p < 1:
        warpers.append(TopPLogitsWarper(float(top_p)))
    out = []
    with _default_device(torch.device("cpu")):  # transformers builds tensors on the default device
        for logits in (draft_logits, target_logits):
            scores = torch.as_tensor(np.asarray(logits, dtype=np.float64))[None]
            out.append(torch.softmax(warpers(torch.zeros((1, 1), dtype=torch.long), scores), dim=-1)[0].numpy())
    return out[0], out[1]


def ensemble_law(p, q, ensemble_weight: float) -> np.ndarray:
    """The law transformers' acceptance step outputs with ``assistant_ensemble_weight = w``: ``v = w q + (1 − w) p``
    (it accepts a draft with ``min(1, v/p)`` and corrects from ``[v − p]_+ ∝ [q − p]_+``)."""
    w = _check_weight(ensemble_weight)
    return w * np.asarray(q, dtype=float) + (1 - w) * np.asarray(p, dtype=float)


def hf_sampler(K: int = 2, ensemble_weight: float | None = None):
    """A sampler ``f(draft_logits, target_logits, n, rng)`` for :func:`speculab.certify.check_sampler`: ``n`` times,
    ``K`` drafts i.i.d. from ``softmax(draft_logits)`` (drawn with ``rng``), then transformers'
    ``_speculative_sampling`` as installed (its own randomness from torch's generator, seeded from ``rng`` and
    restored after); returns the first token each call outputs."""
    from transformers.generation.utils import _speculative_sampling

    K = as_positive_int(K, "K")
    w = _check_weight(ensemble_weight)
    # the step's other parameters changed across transformers' versions: pass what the installed one takes
    params = inspect.signature(_speculative_sampling).parameters
    extra = {"is_done_candidate": False, "last_assistant_token_is_eos": False, "max_matches": K}
    options = {k: v for k, v in extra.items() if k in params}
    if w is not None:
        if "assistant_ensemble_weight" not in params:
            raise ValueError(
                f"ensemble_weight: transformers {transformers_version()}'s _speculative_sampling has no "
                "assistant_ensemble_weight"
            )
        options["assistant_ensemble_weight"] = w

    def sampler(draft_logits, target_logits, n, rng):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tensors of a few numbers: a thread pool only waits (badly, on a busy machine)
        try:
            with _default_device(torch.device("cpu")):  # transformers builds its index tensors on the default device
                return _sample(draft_logits, target_logits, n, as_generator(rng))
        finally:
            torch.set_num_threads(threads)

    def _sample(draft_logits, target_logits, n, rng):
        # float32, as transformers' assisted generation casts its logits ("to retain precision")
        draft = torch.as_tensor(np.asarray(draft_logits, dtype=np.float32))
        target = torch.as_tensor(np.asarray(target_logits, dtype=np.float32))
        p = torch.softmax(draft.double(), dim=-1).numpy()
        drafts = rng.choice(p.size, size=(n, K), p=p / p.sum())
        candidate_logits = draft.expand(1, K, -1).contiguous()
        new_logits = target.expand(1, K + 1, -1).contiguous()
        out = np.empty(n, dtype=np.int64)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(rng.integers(2**62)))
            for i in range(n):
                ids = torch.as_tensor(np.r_[0, drafts[i]])[None]  # one prompt token, then the candidates
                tokens, _ = _speculative_sampling(ids, candidate_logits, K, new_logits, **options)
                out[i] = int(tokens[0, 0])
        return out

    sampler.__name__ = f"transformers {transformers_version()} _speculative_sampling (K = {K}" + (
        f", assistant_ensemble_weight = {w:g})" if w is not None else ")"
    )
    return sampler


def assisted_config(pair, sampling, *, K: int, max_new_tokens: int, ensemble_weight: float | None = None):
    """transformers' ``GenerationConfig`` for assisted generation with ``K`` assistant tokens a round (constant
    schedule, no confidence stop), ``sampling``'s warp (temperature 0: greedy), padding with the pair's EOS."""
    from transformers import GenerationConfig

    settings = dict(
        max_new_tokens=as_positive_int(max_new_tokens, "max_new_tokens"),
        num_assistant_tokens=as_positive_int(K, "K"),
        num_assistant_tokens_schedule="constant",
        assistant_confidence_threshold=0.0,
        do_sample=not sampling.greedy,
        pad_token_id=pair.eos_token_id,
    )
    if ensemble_weight is not None:  # an option of recent transformers only
        settings["assistant_ensemble_weight"] = _check_weight(ensemble_weight)
    if not sampling.greedy:
        settings.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
    return GenerationConfig(**settings)


def assisted_runs(
    pair,
    ids: list[int],
    runs: int,
    *,
    sampling,
    key,
    K: int = 2,
    max_new_tokens: int = 3,
    ensemble_weight: float | None = None,
) -> list[list[int]]:
    """Decode the prompt ``ids`` ``runs`` times with transformers' assisted generation (``K`` assistant tokens a
    round, constant schedule) on ``pair``'s Hugging Face models, warped by ``sampling`` as transformers warps
    (temperature 0: greedy). Returns each run's new tokens (up to EOS). Randomness: torch's generator, seeded once
    from ``key`` and restored after."""
    from transformers.utils import logging as hf_logging

    if not (hasattr(pair.draft, "model") and hasattr(pair.target, "model")):
        raise ValueError("pair: assisted generation needs Hugging Face models on both sides")
    runs = as_positive_int(runs, "runs")
    config = assisted_config(pair, sampling, K=K, max_new_tokens=max_new_tokens, ensemble_weight=ensemble_weight)
    x = torch.tensor([list(ids)], dtype=torch.long, device=pair.device)
    seed = int(as_generator(key).integers(2**62))
    out = []
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its assistant's own generate call warns of transformers' own arguments
    try:
        with (
            torch.inference_mode(),
            _default_device(pair.device),  # transformers builds tensors on the default device: the models'
            torch.random.fork_rng(devices=[pair.device] if pair.device.type == "cuda" else []),
        ):
            torch.manual_seed(seed)
            for _ in range(runs):
                new = pair.target.model.generate(
                    x, attention_mask=torch.ones_like(x), generation_config=config, assistant_model=pair.draft.model
                )[0, x.shape[1] :].tolist()
                eos = pair.eos_token_id
                out.append(new[: new.index(eos) + 1] if eos is not None and eos in new else new)
    finally:
        hf_logging.set_verbosity(level)
    return out
