"""Input checks shared by every public entry point.

Each check returns a float64 (or int) array and raises a ``ValueError`` that
names the argument and states what was expected. Nothing is clipped or
renormalised silently: a vector that is not a distribution is refused.
"""

from __future__ import annotations

import numbers

import numpy as np

#: Tolerance on ``|sum(p) - 1|`` for a probability vector.
SUM_ATOL = 1e-6


class TooLarge(ValueError):
    """An exact computation refused because its size is past a stated budget (block verification's
    ``MAX_PATHS``, the stopping tree's ``NODE_BUDGET``): the input is valid but has no exact answer within the
    budget, so a simulation beside it reports "theory: none" and the reason instead of failing."""


def as_float_array(x, name: str) -> np.ndarray:
    """``x`` as a float64 array with only finite real entries (complex values and text refused, not cast)."""
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError) as exc:  # nested sequences of different lengths
        raise ValueError(
            f"{name} must be a rectangular array of numbers (rows of one length); got {type(x).__name__}"
        ) from exc
    if np.iscomplexobj(raw) or (raw.dtype == object and any(isinstance(v, complex) for v in raw.flat)):
        raise ValueError(f"{name} must hold real numbers; got complex values")
    loose = [v for v in raw.flat if isinstance(v, (str, bytes)) or v is None] if raw.dtype == object else []
    if raw.dtype.kind in "US" or loose:  # numpy would read "0.5" as 0.5 and None as NaN
        raise ValueError(f"{name} must be an array of numbers; got {'None' if loose[:1] == [None] else 'text'}")
    try:
        arr = raw.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of numbers; got {type(x).__name__}") from exc
    if arr.size and not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} must be finite; entry {tuple(int(i) for i in bad)} is {arr[tuple(bad)]}")
    return arr


def as_distribution(x, name: str, *, ndim: int | None = None, atol: float = SUM_ATOL) -> np.ndarray:
    """Check that ``x`` holds probability vectors along its last axis.

    Args:
      x: array-like of shape ``(..., V)``.
      name: the argument's name, used in error messages.
      ndim: if given, the exact number of dimensions required.
      atol: allowed ``|sum - 1|`` per vector.

    Returns:
      ``x`` as a float64 array (not renormalised).
    """
    arr = as_float_array(x, name)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s); got shape {arr.shape}")
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must be a non-empty probability vector; got shape {arr.shape}")
    if np.any(arr < 0):
        bad = np.argwhere(arr < 0)[0]
        raise ValueError(f"{name} must be non-negative; entry {tuple(int(i) for i in bad)} is {arr[tuple(bad)]:.6g}")
    sums = arr.sum(axis=-1)
    err = np.abs(sums - 1.0)
    if np.any(err > atol):
        worst = np.unravel_index(np.argmax(err), err.shape) if err.ndim else ()
        where = f" (row {tuple(int(i) for i in worst)})" if err.ndim else ""
        raise ValueError(
            f"{name} must sum to 1 along its last axis (tolerance {atol:g}); a sum is {float(sums[worst]):.10g}{where}"
        )
    return arr


def as_pair(p, q, name_p: str = "p", name_q: str = "q") -> tuple[np.ndarray, np.ndarray]:
    """Two probability vectors (or stacks of them) of the same shape, e.g. a draft ``p`` and a target ``q``."""
    p = as_distribution(p, name_p)
    q = as_distribution(q, name_q)
    check_same_shape(p, q, name_p, name_q)
    return p, q


def as_probability_array(x, name: str) -> np.ndarray:
    """Check that every entry of ``x`` is a probability in ``[0, 1]``."""
    arr = as_float_array(x, name)
    if arr.size and (arr.min() < 0 or arr.max() > 1):
        bad = np.argwhere((arr < 0) | (arr > 1))[0]
        raise ValueError(f"{name} must lie in [0, 1]; entry {tuple(int(i) for i in bad)} is {arr[tuple(bad)]:.6g}")
    return arr


def check_same_shape(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    """Refuse two arrays whose shapes differ (e.g. vocabularies of different sizes)."""
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape; got {a.shape} and {b.shape}")


def as_positive_int(x, name: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``x`` as a Python int ``>= minimum`` (and ``<= maximum``, when given; booleans refused)."""
    within = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum:,}]"
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise ValueError(f"{name} must be an integer {within}; got {x!r}")
    if x < minimum or (maximum is not None and x > maximum):
        raise ValueError(f"{name} must be an integer {within}; got {x}")
    return int(x)


def check_text(text: str, name: str) -> str:
    """``text``, refused unless it can be written as UTF-8: a lone surrogate is what Python makes of bytes that were
    not UTF-8 (in a command line, a file name), which no tokenizer encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} must be UTF-8 text; got {text!r} (character {exc.start} is not)") from None
    return text


def as_lookahead(K, name: str = "K") -> int | None:
    """A lookahead: ``None`` (draft to the end, ``K = ∞``) or an integer ``>= 1``."""
    if K is None:
        return None
    if isinstance(K, bool) or not isinstance(K, numbers.Integral) or K < 1:
        raise ValueError(f"{name} must be an integer >= 1 (or None for ∞); got {K!r}")
    return int(K)


#: What every ``key`` argument accepts (simulate, decode, compare, the reproductions, MarkovInstance.random).
KEY_TYPES = "an int seed in [0, 2**64), a numpy.random.Generator or a torch.Generator"
SEED_LIMIT = 1 << 64  # int seeds are in [0, SEED_LIMIT) (the command line checks --seed against it too)


def _is_torch_generator(key) -> bool:
    return type(key).__module__.startswith("torch") and type(key).__name__ == "Generator"


def _seed(key, name: str) -> int | None:
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        if not 0 <= key < SEED_LIMIT:
            raise ValueError(f"{name} must be {KEY_TYPES}; the int {key} is out of range")
        return int(key)
    return None


def as_generator(key, name: str = "key") -> np.random.Generator:
    """A numpy ``Generator`` from any accepted ``key`` (see :data:`KEY_TYPES`).

    Library code never seeds globally: the caller passes an int seed (turned into
    a fresh ``np.random.default_rng(seed)``) or a generator it owns, which is
    consumed (a torch generator gives one seed for a new numpy generator).
    """
    if isinstance(key, np.random.Generator):
        return key
    seed = _seed(key, name)
    if seed is not None:
        return np.random.default_rng(seed)
    if _is_torch_generator(key):
        import torch

        return np.random.default_rng(int(torch.randint(0, 1 << 62, (1,), generator=key, device=key.device)))
    raise ValueError(f"{name} must be {KEY_TYPES}; got {key!r}")


def import_jax(feature: str):
    """``(jax, jax.numpy)``, or an ImportError saying how to install JAX for ``feature``."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:  # pragma: no cover - exercised only without jax
        raise ImportError(f"{feature} needs JAX: pip install 'speculab[jax]' (or jax jaxlib)") from exc
    return jax, jnp


def _is_jax_key(key) -> bool:
    return type(key).__module__.startswith("jax")


def as_jax_key(key, name: str = "key"):
    """A JAX PRNG key from any accepted ``key`` (see :data:`KEY_TYPES`) or a JAX key itself.

    A JAX key (typed, ``jax.random.key``, or raw, ``jax.random.PRNGKey``) is used as is;
    an int seed gives ``jax.random.key(seed)`` (seeds of 64 bits are folded, never truncated);
    a numpy or torch generator gives one seed for a new key.
    """
    import jax

    if _is_jax_key(key):
        typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
        if not ((typed and key.shape == ()) or (not typed and key.dtype == np.uint32 and key.shape == (2,))):
            raise ValueError(
                f"{name} must be a JAX PRNG key (jax.random.key(seed)); got an array of "
                f"dtype {key.dtype} and shape {key.shape}"
            )
        return key
    seed = _seed(key, name)
    if seed is None:
        if isinstance(key, np.random.Generator) or _is_torch_generator(key):
            seed = int(as_generator(key, name).integers(0, 1 << 63))
        else:
            raise ValueError(f"{name} must be {KEY_TYPES} or a JAX PRNG key; got {key!r}")
    return jax.random.fold_in(jax.random.key(seed & 0xFFFFFFFF), seed >> 32)


def as_torch_generator(key, device, name: str = "key"):
    """A ``torch.Generator`` on ``device`` from any accepted ``key`` (see :data:`KEY_TYPES`).

    A torch generator on ``device``'s type is used as is; one elsewhere, or a numpy
    generator, gives one seed for a new torch generator.
    """
    import torch

    device = torch.device(device)
    if _is_torch_generator(key) and torch.device(key.device).type == device.type:
        return key
    seed = _seed(key, name)
    if seed is None and (isinstance(key, np.random.Generator) or _is_torch_generator(key)):
        seed = int(as_generator(key, name).integers(0, 1 << 62))
    if seed is None:
        raise ValueError(f"{name} must be {KEY_TYPES}; got {key!r}")
    return torch.Generator(device=device).manual_seed(seed)


def spawn_seeds(key, n: int, name: str = "key") -> list[int]:
    """``n`` independent int seeds derived from any accepted ``key`` (same key, same seeds)."""
    seed = _seed(key, name)
    if seed is not None:
        return [int(s.generate_state(1, np.uint64)[0]) for s in np.random.SeedSequence(seed).spawn(n)]
    rng = as_generator(key, name)
    return [int(x) for x in rng.integers(0, 1 << 62, size=n)]
