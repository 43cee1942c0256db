"""Heads for the real-model tests of the methods that run one while drafting (SpecDec++, SPRINTER)."""

import torch

from speculab.backends.heads import HeadConfig, TrainedHead, constant_head, make_head


def width(pair) -> int:
    """The draft's hidden-state width (what a head reads)."""
    return pair.draft.model.config.hidden_size


def constant(pair, a: float) -> TrainedHead:
    """A head scoring ``a`` whatever the hidden state."""
    return constant_head(width(pair), a)


def random_head(pair, seed: int, *, kind: str = "resnet", depth: int = 1, scale: float = 1.0) -> TrainedHead:
    """A freshly initialised head (its output layer's weights times ``scale``, to spread its scores)."""
    config = HeadConfig(d_in=width(pair), kind=kind, depth=depth, seed=seed)
    head = make_head(config, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        head.out.weight.mul_(scale)
    return TrainedHead(head, config)
