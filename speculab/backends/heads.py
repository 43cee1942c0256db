"""Learned heads on a draft model's hidden states: training, ROC, and files that keep their provenance.

A *head* maps a draft's last hidden state ``h`` (``d`` numbers) to a probability: the
SPRINTER verifier ([SPR] §3.2: a linear layer and a sigmoid, "is this draft acceptable")
and the SpecDec++ acceptance head ([SDpp] §4: a ``(D+1)``-layer ResNet with SiLU,
"will this draft be accepted"). Both are trained here the same way: binary cross-entropy
on (possibly soft) labels with per-example weights, Adam, a held-out split and early
stopping on its loss — deterministic for a seed (initialisation and shuffling draw from
one ``torch.Generator``) and a fixed torch thread count (``torch.set_num_threads``: the
reductions are ordered by thread, so the last bits of the weights can differ between
counts, also between an interrupted run and its resumption), with a progress line per epoch, and resumable: with a
``checkpoint`` path the state after every epoch (weights, optimiser, generator, history)
is written atomically, and ``resume=True`` continues from it to the very weights an
uninterrupted run reaches. :func:`save_head` / :func:`load_head` keep a trained head in
one safetensors file whose metadata holds its configuration and training metrics.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from speculab._files import atomic_path
from speculab._validate import as_torch_generator

__all__ = [
    "HeadConfig",
    "TrainedHead",
    "make_head",
    "constant_head",
    "train_head",
    "save_head",
    "load_head",
    "roc_curve",
    "auc",
]

KINDS = ("linear", "resnet")


@dataclass(frozen=True)
class HeadConfig:
    """A head's architecture and training.

    Args:
      d_in: the hidden state's size.
      kind: ``"linear"`` (one linear layer and a sigmoid, [SPR]) or ``"resnet"`` (``depth``
        residual blocks ``x + SiLU(W x + b)`` then a linear layer and a sigmoid: ``depth + 1``
        layers, [SDpp]).
      depth: residual blocks of a ``"resnet"`` head (``D``).
      lr, epochs, batch_size: Adam's step size, the most passes over the training split, examples per step.
      patience: epochs without a better held-out loss before training stops (early stopping).
      val_fraction: share of the examples held out for early stopping (by example; split by
        group beforehand if examples are correlated).
      seed: initialisation, split and shuffling.
    """

    d_in: int
    kind: str = "linear"
    depth: int = 0
    lr: float = 1e-3
    epochs: int = 50
    batch_size: int = 256
    patience: int = 5
    val_fraction: float = 0.2
    seed: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {self.kind!r}")
        for name, minimum in (
            ("d_in", 1),
            ("depth", 0),
            ("epochs", 1),
            ("batch_size", 1),
            ("patience", 1),
            ("seed", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.kind == "linear" and self.depth:
            raise ValueError(f"a linear head has no residual blocks; got depth={self.depth}")
        for name, ok, expected in (
            ("lr", lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
            ("val_fraction", lambda v: 0 < v < 1, "a number in (0, 1)"),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not ok(value):
                raise ValueError(f"{name} must be {expected}; got {value!r}")
            object.__setattr__(self, name, float(value))


class _Residual(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.linear = torch.nn.Linear(d, d)

    def forward(self, x):
        return x + torch.nn.functional.silu(self.linear(x))


class _Head(torch.nn.Module):
    """``depth`` residual blocks, then a linear layer to one logit; :meth:`prob` applies the sigmoid."""

    def __init__(self, config: HeadConfig):
        super().__init__()
        self.blocks = torch.nn.Sequential(*(_Residual(config.d_in) for _ in range(config.depth)))
        self.out = torch.nn.Linear(config.d_in, 1)

    def forward(self, hidden):  # the logit
        return self.out(self.blocks(hidden))[..., 0]

    @torch.no_grad()
    def prob(self, hidden):
        return torch.sigmoid(self.forward(hidden))


def make_head(config: HeadConfig, key=None) -> _Head:
    """A freshly initialised head (PyTorch's default initialisation, drawn from ``key``, any key speculab accepts;
    ``None``: torch's global generator), on the CPU, where heads are trained (a head follows the hidden states it
    reads to their device: :class:`TrainedHead`)."""
    if key is not None:
        key = as_torch_generator(key, "cpu")
    with torch.random.fork_rng(devices=[]), torch.device("cpu"):
        if key is not None:
            torch.manual_seed(int(torch.randint(0, 2**62, (), generator=key, device=key.device)))
        return _Head(config)


@dataclass
class TrainedHead:
    """A trained head, its configuration and its training metrics (``history``: per-epoch losses)."""

    head: _Head
    config: HeadConfig
    metrics: dict = field(default_factory=dict)

    #: Marks a head that reads a draft's hidden states (methods run it in the decoding loop, never on Markov instances).
    reads_hidden_states = True

    def __post_init__(self):
        if not isinstance(self.head, torch.nn.Module):
            raise ValueError(
                f"head must be a torch module from make_head or train_head; got {type(self.head).__name__}"
            )
        if not isinstance(self.config, HeadConfig):
            raise ValueError(f"config must be a HeadConfig; got {type(self.config).__name__}")

    def __repr__(self) -> str:  # one line in a method's repr (the command line prints it), not the module tree
        c = self.config
        shape = "linear" if c.kind == "linear" else f"resnet, depth {c.depth}"
        return f"TrainedHead({shape}, d_in={c.d_in}, epochs={self.metrics.get('epochs', 0)})"

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head's probability for hidden states ``hidden`` ``(..., d_in)``, on their device (the head follows them
        there, once: a head trained on the CPU reads a GPU model's states)."""
        if hidden.shape[-1] != self.config.d_in:
            raise ValueError(
                f"hidden states must have {self.config.d_in} features (the head's d_in); "
                f"got shape {tuple(hidden.shape)}"
            )
        weight = next(self.head.parameters())
        if weight.device != hidden.device:
            self.head.to(hidden.device)
        return self.head.prob(hidden.to(weight.dtype))


def constant_head(d_in: int, score: float) -> TrainedHead:
    """A linear head scoring ``score`` whatever its input (zero weights, bias ``logit(score)``): a baseline that knows
    nothing (e.g. SPRINTER's random verifier with ``threshold=None``) and a head whose decisions a test can predict.

    Args:
      d_in: the width of the hidden states it will read.
      score: its output, in ``(0, 1)`` (a logit is finite only there).
    """
    ok = isinstance(score, numbers.Real) and not isinstance(score, bool) and 0 < score < 1
    if not ok:
        raise ValueError(f"score must be a number in (0, 1); got {score!r}")
    config = HeadConfig(d_in=d_in)
    head = make_head(config)
    with torch.no_grad():
        head.out.weight.zero_()
        head.out.bias.fill_(math.log(score / (1 - score)))
    return TrainedHead(head, config, {"constant": float(score)})


def _as_examples(features, targets, weights):
    def as_float32(a):
        if isinstance(a, torch.Tensor):
            return a.float()
        return torch.as_tensor(np.asarray(a, dtype=np.float32), device="cpu")

    try:
        X, y = as_float32(features), as_float32(targets)
    except (TypeError, ValueError) as err:
        raise ValueError(f"features and targets must be numeric arrays ({err})") from None
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"features must be a (n, d) array with n >= 2; got shape {tuple(X.shape)}")
    if y.shape != (X.shape[0],):
        raise ValueError(f"targets must have shape ({X.shape[0]},), one per example; got {tuple(y.shape)}")
    if not torch.isfinite(X).all():
        raise ValueError("features contain NaN or infinite values")
    if not bool(((y >= 0) & (y <= 1)).all()):
        raise ValueError("targets must be probabilities in [0, 1] (NaN refused)")
    w = torch.ones_like(y) if weights is None else torch.as_tensor(weights, dtype=torch.float32, device="cpu")
    if w.shape != y.shape or not bool(((w >= 0) & torch.isfinite(w)).all()) or not bool(w.sum() > 0):
        raise ValueError(f"weights must be {X.shape[0]} finite non-negative numbers, not all 0")
    return X, y, w


def _loss(head, X, y, w, scale) -> torch.Tensor:
    """Weighted binary cross-entropy of the head's logits against soft targets, ``Σ w · bce / scale``.

    Training batches divide by their size times the training split's mean weight (not by their own weight,
    which may be 0: a batch of zero-weight examples then simply contributes nothing), so the batches' losses
    are unbiased pieces of one weighted objective; the held-out loss divides by its total weight.
    """
    per = torch.nn.functional.binary_cross_entropy_with_logits(head(X), y, reduction="none")
    return (w * per).sum() / scale


def _atomic_save(obj, path: Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _split(n: int, groups, config: HeadConfig, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out and training indices: ``val_fraction`` of the examples, or of the groups when ``groups`` is given
    (correlated examples — the tokens of one completion — then stay on one side)."""
    if groups is None:
        order = torch.randperm(n, generator=rng, device="cpu")
        n_val = max(1, int(round(config.val_fraction * n)))
        return order[:n_val], order[n_val:]
    labels = np.asarray(groups)
    if labels.shape != (n,):
        raise ValueError(f"groups must have shape ({n},), one per example; got {labels.shape}")
    unique, inverse = np.unique(labels, return_inverse=True)
    if unique.size < 2:
        raise ValueError("groups must hold at least two distinct groups (one to train on, one to hold out)")
    order = torch.randperm(unique.size, generator=rng, device="cpu").numpy()
    held = np.zeros(unique.size, dtype=bool)
    held[order[: max(1, int(round(config.val_fraction * unique.size)))]] = True
    mask = torch.from_numpy(held[inverse])
    return torch.nonzero(mask)[:, 0], torch.nonzero(~mask)[:, 0]


def _fingerprint(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def train_head(
    features,
    targets,
    weights=None,
    *,
    config: HeadConfig,
    groups=None,
    progress: bool = False,
    checkpoint: str | Path | None = None,
    resume: bool = False,
) -> TrainedHead:
    """Train a head on ``features`` ``(n, d)`` and ``targets`` ``(n,)`` in [0, 1] (hard or soft labels).

    The held-out split (``config.val_fraction`` of the examples, or of the ``groups`` when
    given) decides early stopping; the weights returned are the epoch's with the lowest
    held-out loss. ``weights`` ``(n,)`` scale each example's loss (e.g. [SDpp]'s ``w_rej``;
    0 leaves an example out). With ``checkpoint``, the state after every epoch is written
    there (atomically); ``resume=True`` continues from it — refused unless the
    configuration and the data (by fingerprint) are the same — and ends where an
    uninterrupted run ends.
    """
    if not isinstance(config, HeadConfig):
        raise ValueError(
            f"config must be a HeadConfig (e.g. HeadConfig(d_in=..., kind='linear')); got {type(config).__name__}"
        )
    X, y, w = _as_examples(features, targets, weights)
    if X.shape[1] != config.d_in:
        raise ValueError(f"features have {X.shape[1]} columns but config.d_in = {config.d_in}")
    rng = torch.Generator().manual_seed(config.seed)
    val, train = _split(X.shape[0], groups, config, rng)
    if train.numel() == 0:
        raise ValueError(f"no training examples left after holding out {val.numel()} of {X.shape[0]}")
    if not bool(w[val].sum() > 0) or not bool(w[train].sum() > 0):
        raise ValueError("the held-out and the training split must each have some weight > 0")
    scale_train, scale_val = float(w[train].mean()), float(w[val].sum())
    head = make_head(config, rng)
    opt = torch.optim.Adam(head.parameters(), lr=config.lr)
    state = {"epoch": 0, "best": math.inf, "best_epoch": -1, "best_weights": None, "stale": 0, "history": []}
    path = None if checkpoint is None else Path(checkpoint)
    data = _fingerprint(X, y, w, val)
    if resume:
        if path is None or not path.exists():
            raise ValueError(f"resume=True needs an existing checkpoint; got {checkpoint!r}")
        saved = torch.load(path, weights_only=True)
        if saved.get("config") != asdict(config) or saved.get("data") != data:
            raise ValueError(f"checkpoint {path} was written for another configuration or data set; not resuming")
        head.load_state_dict(saved["head"])
        opt.load_state_dict(saved["opt"])
        rng.set_state(saved["generator"])
        state = saved["state"]
    while state["epoch"] < config.epochs and state["stale"] < config.patience:
        head.train()
        perm = train[torch.randperm(train.numel(), generator=rng, device="cpu")]
        total = 0.0
        for start in range(0, perm.numel(), config.batch_size):
            idx = perm[start : start + config.batch_size]
            opt.zero_grad()
            loss = _loss(head, X[idx], y[idx], w[idx], scale_train * idx.numel())
            loss.backward()
            opt.step()
            total += float(loss.detach()) * idx.numel()
        head.eval()
        with torch.no_grad():
            val_loss = float(_loss(head, X[val], y[val], w[val], scale_val))
        if not math.isfinite(val_loss):
            raise ValueError(
                f"training diverged at epoch {state['epoch'] + 1} (held-out loss {val_loss}); "
                f"lower lr (now {config.lr})"
            )
        state["epoch"] += 1
        train_loss = total / train.numel()  # the weighted objective: Σ w bce / Σ w over the training split
        state["history"].append({"epoch": state["epoch"], "train_loss": train_loss, "val_loss": val_loss})
        if val_loss < state["best"]:
            state.update(
                best=val_loss,
                best_epoch=state["epoch"],
                stale=0,
                best_weights={k: v.clone() for k, v in head.state_dict().items()},
            )
        else:
            state["stale"] += 1
        if progress:
            print(
                f"  epoch {state['epoch']:3d}: train loss {train_loss:.4f}, held-out {val_loss:.4f}"
                f"{'  (best)' if state['stale'] == 0 else ''}",
                file=sys.stderr,
                flush=True,
            )
        if path is not None:
            _atomic_save(
                {
                    "config": asdict(config),
                    "data": data,
                    "head": head.state_dict(),
                    "opt": opt.state_dict(),
                    "generator": rng.get_state(),
                    "state": state,
                },
                path,
            )
    head.load_state_dict(state["best_weights"])
    head.eval()
    with torch.no_grad():
        scores = torch.sigmoid(head(X[val])).numpy()
    hard = y[val].numpy()
    metrics = {
        "epochs": state["epoch"],
        "best_epoch": state["best_epoch"],
        "val_loss": state["best"],
        "stopped_early": state["stale"] >= config.patience,
        "history": state["history"],
        "n_train": int(train.numel()),
        "n_val": int(val.numel()),
    }
    if np.all((hard == 0) | (hard == 1)) and 0 < hard.sum() < hard.size:
        metrics["val_auc"] = auc(scores, hard)
    return TrainedHead(head, config, metrics)


def save_head(trained: TrainedHead, path: str | Path) -> Path:
    """Write ``trained`` to one safetensors file (weights; configuration and metrics as JSON metadata)."""
    from safetensors.torch import save_file

    path = Path(path)
    meta = {
        "format": "speculab-head/1",
        "config": json.dumps(asdict(trained.config)),
        "metrics": json.dumps(trained.metrics),
    }
    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous() for k, v in trained.head.state_dict().items()}, str(tmp), metadata=meta)
    return path


def load_head(path: str | Path) -> TrainedHead:
    """Read a head written by :func:`save_head` (refuses any other file with a clear error)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is a folder, not a head file" if path.is_dir() else f"no head file at {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as err:  # safetensors raises its own error types for non-safetensors files
        raise ValueError(f"{path} is not a safetensors file ({err})") from None
    if meta.get("format") != "speculab-head/1":
        raise ValueError(
            f"{path} is a safetensors file but not a speculab head (metadata format {meta.get('format')!r})"
        )
    try:
        config = HeadConfig(**json.loads(meta["config"]))
        metrics = json.loads(meta["metrics"])
        head = _Head(config)
        head.load_state_dict(tensors)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"{path} is a speculab head file whose configuration, metrics or weights do not fit "
            f"together ({type(err).__name__}: {err})"
        ) from None
    head.eval()
    return TrainedHead(head, config, metrics)


def _check_scores(scores, labels):
    s, y = np.asarray(scores, dtype=float), np.asarray(labels)
    if s.ndim != 1 or y.shape != s.shape:
        raise ValueError(f"scores and labels must be 1-d arrays of one length; got {s.shape} and {y.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or infinite values")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0 or 1")
    y = y.astype(bool)
    if y.all() or not y.any():
        raise ValueError("labels must contain both classes (a ROC curve needs positives and negatives)")
    return s, y


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ROC curve of ``scores`` for binary ``labels``: ``(fpr, tpr, thresholds)``, from ``(0, 0)`` to ``(1, 1)``.

    Point ``i`` classifies ``score >= thresholds[i]`` as positive (tied scores move together).
    """
    s, y = _check_scores(scores, labels)
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # the last index of each distinct score
    tp, fp = np.cumsum(y)[last], np.cumsum(~y)[last]
    return (np.r_[0.0, fp / (~y).sum()], np.r_[0.0, tp / y.sum()], np.r_[np.inf, s[last]])


def auc(scores, labels) -> float:
    """Area under the ROC curve: ``P(score of a positive > score of a negative)``, ties counted one half."""
    from scipy.stats import rankdata

    s, y = _check_scores(scores, labels)
    ranks = rankdata(s)  # average ranks: ties count one half
    n1, n0 = int(y.sum()), int((~y).sum())
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))
