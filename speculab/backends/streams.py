r"""Counter-based random streams for real-model decoding: a prompt's seed and a counter give its uniforms.

Each prompt decoded by :func:`speculab.backends.decode` owns a 64-bit seed
(:func:`speculab._validate.spawn_seeds`). Every uniform a round uses is a pure function of that seed, the round's
index and a *lane* naming what the uniform is for (:data:`OUTCOME`, :data:`TOKEN`, :func:`draft_lane`,
:func:`head_lane`), computed with Threefry-2x32 (20 rounds; Salmon, Moraes, Dror, Shaw, *Parallel random numbers:
as easy as 1, 2, 3*, SC 2011 — the generator JAX's keys use) as elementwise integer tensor operations. So

* the uniforms of every row of a batch are computed at once, in a fixed number of tensor operations whatever the
  number of rows (no ``torch.Generator`` per prompt, no call per row);
* they are the same numbers on the CPU and on CUDA (integer arithmetic, then one exact conversion to float64);
* the batched and the one-prompt path draw the same uniform for the same decision, however many other uniforms
  either computed: nothing is consumed, so padding drafts or a block cut short at EOS shift nothing.

The words are kept in ``int64`` tensors holding values in ``[0, 2^32)`` (sums wrap with a mask; no operation
overflows 64 bits), because not every device has unsigned 32-bit arithmetic. ``tests/test_streams.py`` checks the
function against Random123's known-answer vectors and JAX's ``threefry_2x32``.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["threefry2x32", "uniforms", "key_words", "OUTCOME", "TOKEN", "draft_lane", "head_lane"]

_MASK = 0xFFFFFFFF
_PARITY = 0x1BD11BDA  # Threefry's key-schedule constant
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # Threefry-2x32's rotation constants, used in turn

#: The lane of a round's outcome uniform (which row is followed, how many drafts are accepted).
OUTCOME = 0
#: The lane of a round's token uniform (the correction or bonus token).
TOKEN = 1
_HEAD = 1 << 24  # lanes of a head's per-slot uniforms start here (well past any draft lane)


def draft_lane(slot, row, rows: int):
    """The lane of the uniform that draws draft row ``row``'s token at ``slot`` in a round of ``rows`` draft rows
    (ints or integer tensors)."""
    return 2 + slot * rows + row


def head_lane(slot):
    """The lane of the uniform a method's head reads at ``slot`` (SPRINTER's random verdicts)."""
    return _HEAD + slot


def _add(a, b):
    return (a + b) & _MASK


def _rotl(x, r: int):
    return ((x << r) | (x >> (32 - r))) & _MASK


def threefry2x32(k0, k1, c0, c1):
    """Threefry-2x32 with 20 rounds: the two 32-bit output words for key ``(k0, k1)`` and counter ``(c0, c1)``.

    Args:
      k0, k1, c0, c1: int64 torch tensors or numpy arrays (broadcast together), or Python ints, holding values in
        ``[0, 2^32)``.

    Returns:
      ``(y0, y1)``: int64 arrays of the broadcast shape, values in ``[0, 2^32)``.
    """
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = _add(c0, k0), _add(c1, k1)
    for i in range(20):
        x0 = _add(x0, x1)
        x1 = _rotl(x1, _ROTATIONS[i % 8]) ^ x0
        if i % 4 == 3:  # key injection after every four rounds
            s = (i + 1) // 4
            x0 = _add(x0, ks[s % 3])
            x1 = _add(x1, ks[(s + 1) % 3] + s)
    return x0, x1


def key_words(seeds, device) -> torch.Tensor:
    """Per-prompt Threefry keys ``(n, 2)`` (int64 words) from 64-bit int seeds, on ``device``."""
    words = [[int(s) & _MASK, (int(s) >> 32) & _MASK] for s in seeds]
    return torch.tensor(words, dtype=torch.int64, device=device).reshape(len(words), 2)


def uniforms(keys: torch.Tensor, round_index, lanes) -> torch.Tensor:
    """Uniforms in ``[0, 1)`` (float64, 53 random bits) for each prompt's key at a round and its lanes.

    Args:
      keys: ``(B, 2)`` int64 key words (:func:`key_words`).
      round_index: the round's index in each prompt's decoding, an int or ``(B,)`` int64 tensor.
      lanes: ``(n,)`` int64 lanes (a tensor or a list of ints).

    Returns:
      ``(B, n)`` float64 on the keys' device: ``u = (⌊y0 / 2^5⌋ · 2^26 + ⌊y1 / 2^6⌋) / 2^53``. On the CPU the
      words are computed with numpy (the same integers; its operations cost a fraction of torch's on small arrays).
    """
    dev = keys.device
    if dev.type == "cpu" and keys.size(0) == 1 and not isinstance(round_index, torch.Tensor) and len(lanes) <= 64:
        # one prompt, a few lanes: Python's integers beat any array library's per-call cost
        k0, k1 = keys[0].tolist()
        words = [threefry2x32(k0, k1, round_index & _MASK, int(lane) & _MASK) for lane in _ints(lanes)]
        return torch.tensor(
            [[((y0 >> 5) * (1 << 26) + (y1 >> 6)) * 2.0**-53 for y0, y1 in words]], dtype=torch.float64, device=dev
        )
    if dev.type == "cpu":
        k = keys.numpy()
        c0 = np.asarray(round_index.numpy() if isinstance(round_index, torch.Tensor) else round_index, dtype=np.int64)
        c1 = np.asarray(lanes.numpy() if isinstance(lanes, torch.Tensor) else lanes, dtype=np.int64)
        c0 = c0[:, None] if c0.ndim == 1 else c0
        return torch.from_numpy(_unit(*threefry2x32(k[:, :1], k[:, 1:], c0 & _MASK, c1 & _MASK)))
    return torch_uniforms(keys, round_index, lanes)


def torch_uniforms(keys: torch.Tensor, round_index, lanes) -> torch.Tensor:
    """:func:`uniforms` computed with torch operations on the keys' device (what a GPU runs; on the CPU,
    ``tests/test_streams.py`` holds it equal to the numpy words)."""
    dev = keys.device
    lanes = torch.as_tensor(lanes, dtype=torch.int64, device=dev)  # a tensor on the device already: no copy
    if isinstance(round_index, torch.Tensor):
        c0 = round_index.to(device=dev, dtype=torch.int64)[:, None] & _MASK
    else:
        c0 = int(round_index) & _MASK  # a Python int enters the arithmetic as a scalar: no copy to the device
    y0, y1 = threefry2x32(keys[:, :1], keys[:, 1:], c0, lanes & _MASK)
    return ((y0 >> 5) * (1 << 26) + (y1 >> 6)).to(torch.float64) * 2.0**-53


def _ints(lanes) -> list[int]:
    return lanes.tolist() if isinstance(lanes, (torch.Tensor, np.ndarray)) else [int(x) for x in lanes]


def _unit(y0, y1):
    """The float64 uniform of two numpy words (53 bits: exact)."""
    return ((y0 >> 5) * (1 << 26) + (y1 >> 6)).astype(np.float64) * 2.0**-53
