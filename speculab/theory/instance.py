"""Markov instances: the draft/target pairs of the papers' simulations (SPEC §0).

A Markov instance is a pair of non-stationary Markov chains over a vocabulary of
``V`` tokens, run for ``T`` steps from a prompt token ``x_0 ~ rho``:

* ``P[n-1, a, b] = p_n(x_n = b | x_{n-1} = a)`` — the draft model,
* ``Q[n-1, a, b] = q_n(x_n = b | x_{n-1} = a)`` — the target model,

for positions ``n = 1..T`` (array index ``n - 1``). [Yin] App. F uses ``V = 7``,
uniform ``rho`` and ``T = 50`` or ``100``.
"""

from __future__ import annotations

import numbers
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

import numpy as np

from speculab import kernels
from speculab._files import atomic_path
from speculab._npz import check_claims
from speculab._validate import (
    as_distribution,
    as_float_array,
    as_generator,
    as_positive_int,
)

__all__ = [
    "MarkovInstance",
    "chain_marginals",
    "compact",
    "rowwise",
    "cumulative",
    "per_position",
    "push",
    "expect",
    "scalar",
]
# compact … expect are the primitives that keep compact instances compact (exact counts,
# simulators); they are not re-exported by speculab.theory.

_FORMAT_VERSION = 2
_DTYPES = {"float64": np.float64, "float32": np.float32}


def compact(a: np.ndarray) -> np.ndarray:
    """The distinct part of a broadcast stack: every leading axis along which ``a`` is broadcast (stride 0) kept once.

    A stationary instance's ``(T, V, V)`` kernels are a broadcast of one ``(V, V)``
    kernel, a context-free one's of one row: their compact forms have shapes
    ``(1, V, V)`` and ``(1, 1, V)``. The result broadcasts back to ``a``; the last
    axis (the vocabulary) is never compacted. Costs nothing (a view).
    """
    index = tuple(slice(0, 1) if a.shape[i] > 1 and a.strides[i] == 0 else slice(None) for i in range(a.ndim - 1))
    return a[index]


def rowwise(fn, *arrays: np.ndarray) -> np.ndarray:
    """``fn(*arrays)`` for a ``fn`` acting row by row, evaluated on the compact parts only.

    The arrays are broadcast stacks of the same shape ``(T, V, V)`` (or ``(T, V)``);
    ``fn`` runs on their compact parts broadcast to a common compact shape, and the
    result (an array or a tuple of arrays, e.g. a method's rule) is broadcast back to
    the full shape as read-only views. On a stationary instance this is one ``(V, V)``
    evaluation instead of ``T``, and nothing of size ``T V²`` is allocated.
    """
    full = np.broadcast_shapes(*(a.shape for a in arrays))
    parts = [compact(a) for a in arrays]
    shape = np.broadcast_shapes(*(p.shape for p in parts))
    out = fn(*(np.broadcast_to(p, shape) for p in parts))

    def widen(x):  # a row-wise reduction drops the last axis
        x = np.asarray(x)
        return np.broadcast_to(x, full[: x.ndim])

    return tuple(widen(x) for x in out) if isinstance(out, tuple) else widen(out)


def cumulative(a: np.ndarray) -> np.ndarray:
    """Running sums along the last axis (the inverse-CDF tables of the simulators); use through :func:`rowwise`."""
    return np.cumsum(a, axis=-1)


def at_position(a: np.ndarray, n: int) -> np.ndarray:
    """``a[n]`` of a stack whose leading axis has length ``T`` or 1 (a compact stack: the same at every position)."""
    return a[n if a.shape[0] > 1 else 0]


def per_position(fn, T: int, *arrays: np.ndarray):
    """Yield ``fn(a[n], b[n], …)`` for ``n = 0..T-1``, computed once when no array varies with the position.

    Each array has a leading axis of length ``T`` or 1 (the same at every
    position, e.g. a stationary kernel from :func:`compact`). This is how the exact
    counts stream over positions in ``O(V²)`` memory and, on stationary instances,
    derive each quantity from the kernels once.
    """
    if all(a.shape[0] == 1 for a in arrays):
        value = fn(*(a[0] for a in arrays))
        for _ in range(T):
            yield value
        return
    for n in range(T):
        yield fn(*(at_position(a, n) for a in arrays))


def push(mass: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """``mass @ kernel`` for a kernel of shape ``(A, V)`` stored compactly.

    ``A = V``: one row per context; ``A = 1``: the same row for every context, so
    the product is the total mass times that row (``O(V)``, no ``(V, V)`` array).
    ``mass`` has shape ``(..., V)``.
    """
    if kernel.shape[-2] == 1:
        return mass.sum(axis=-1, keepdims=True) * kernel[0]
    return mass @ kernel


def expect(mass: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``mass @ f`` for a per-context quantity ``f`` of shape ``(A,)``, ``A = V`` or 1 (the same for every context)."""
    if f.shape[-1] == 1:
        return mass.sum(axis=-1) * f[0]
    return mass @ f


def scalar(x):
    """A 0-d numpy result as a Python float; an array of another library (a JAX tracer under ``jax.grad``) as is."""
    return float(x) if isinstance(x, (np.ndarray, np.generic)) else x


def chain_marginals(rho: np.ndarray, transitions: np.ndarray) -> np.ndarray:
    r"""Marginals :math:`\mu_0 = \rho`, :math:`\mu_n = \mu_{n-1} K_n` of a non-stationary chain.

    Args:
      rho: initial law, shape ``(V,)``.
      transitions: ``(T, V, V)`` row-stochastic kernels ``K_1..K_T`` (a broadcast
        stack, e.g. a stationary instance's, is read through :func:`compact`).

    Returns:
      ``(T + 1, V)`` array whose row ``n`` is the law of ``x_n``.
    """
    T, V = transitions.shape[0], transitions.shape[-1]
    mu = np.empty((T + 1, V), dtype=np.result_type(rho, transitions))
    mu[0] = rho
    for n, kernel in enumerate(per_position(lambda k: k, T, compact(transitions))):
        mu[n + 1] = push(mu[n], kernel)
    return mu


def _dtype(dtype) -> type:
    try:
        name = np.dtype(dtype).name if dtype is not None else None
    except TypeError:
        name = None
    if name not in _DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32'; got {dtype!r}")
    return _DTYPES[name]


def _kernels(a, name: str, dtype) -> np.ndarray:
    """A ``(T, V, V)`` stack validated and frozen on its compact part, returned as a read-only broadcast view."""
    stack = isinstance(a, np.ndarray) and a.ndim == 3  # possibly a broadcast: keep only its distinct part
    part = np.array(as_distribution(compact(a) if stack else a, name, ndim=3), dtype=dtype, copy=True)
    part.setflags(write=False)
    return np.broadcast_to(part, a.shape if stack else part.shape)


def _read_npz(path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, each read in full (objects never unpickled); anything that keeps them from
    being read — no such file, empty, truncated, corrupt, not an ``.npz`` — is one ``ValueError`` naming the file."""
    if not Path(path).is_file():
        raise ValueError(f"no instance file at {path}")
    check_claims(path)  # before numpy allocates what a header claims
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive")
        with data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(
            f"{path} is not a speculab Markov instance (an .npz written by MarkovInstance.save or "
            f"`speculab instance`): {reason}"
        ) from exc


def _header_int(data: dict[str, np.ndarray], name: str) -> int:
    """A file's header field ``name``: one whole number ``>= 1`` (not an array, text, a fraction or a bool)."""
    value = data[name]
    if value.shape != () or value.dtype == bool or not np.issubdtype(value.dtype, np.integer):
        raise ValueError(f"{name} must be one integer; got {value!r}")
    return as_positive_int(int(value), name)


@dataclass(frozen=True, eq=False)
class MarkovInstance:
    """A draft/target pair of non-stationary Markov chains.

    Attributes:
      P: draft transitions, shape ``(T, V, V)``, rows sum to 1.
      Q: target transitions, same shape.
      rho: law of the prompt token ``x_0``, shape ``(V,)``.
      dtype: ``"float64"`` (default) or ``"float32"`` (half the memory for large
        vocabularies; sums then carry float32 round-off).

    The arrays are copied and made read-only on construction. Kernels given as a
    broadcast (``np.broadcast_to``, as :meth:`stationary` and :meth:`context_free`
    build them) stay compact: only their distinct part is stored (``(V, V)`` or one
    row), ``P`` and ``Q`` are read-only broadcast views of it, and the exact counts
    (T1, T3, the lookahead counts) run in ``O(T V²)`` time and ``O(V²)`` memory —
    ``O(T V)`` time and ``O(V)`` memory when the rows do not depend on the context.
    """

    P: np.ndarray
    Q: np.ndarray
    rho: np.ndarray
    dtype: str = field(default="float64", kw_only=True)

    def __post_init__(self):
        dtype = _dtype(self.dtype)
        P = _kernels(self.P, "P", dtype)
        Q = _kernels(self.Q, "Q", dtype)
        rho = as_distribution(self.rho, "rho", ndim=1)
        if P.shape[0] == 0:
            raise ValueError(f"P must have at least one position (T >= 1); got shape {P.shape}")
        if P.shape[1] != P.shape[2]:
            raise ValueError(f"P must have shape (T, V, V); got {P.shape}")
        if Q.shape != P.shape:
            raise ValueError(f"P and Q must have the same shape (T, V, V); got {P.shape} and {Q.shape}")
        if rho.shape[0] != P.shape[2]:
            raise ValueError(f"rho must have length V = {P.shape[2]}; got {rho.shape[0]}")
        rho = np.array(rho, dtype=dtype, copy=True)
        rho.setflags(write=False)
        object.__setattr__(self, "P", P)
        object.__setattr__(self, "Q", Q)
        object.__setattr__(self, "rho", rho)
        object.__setattr__(self, "dtype", np.dtype(dtype).name)

    # -- shape -------------------------------------------------------------
    @property
    def T(self) -> int:
        """Number of tokens to generate."""
        return self.P.shape[0]

    @property
    def V(self) -> int:
        """Vocabulary size."""
        return self.P.shape[2]

    def __repr__(self) -> str:
        return f"MarkovInstance(T={self.T}, V={self.V})"

    # -- derived quantities --------------------------------------------------
    def marginals(self) -> np.ndarray:
        r"""Marginals of the target chain, :math:`\mu_n` for ``n = 0..T``, shape ``(T + 1, V)``."""
        return chain_marginals(self.rho, self.Q)

    def tv(self) -> np.ndarray:
        """``TV(P[n, a], Q[n, a])`` for every position and context, shape ``(T, V)`` (a broadcast view when compact)."""
        return rowwise(kernels.tv, self.P, self.Q)

    # -- constructors --------------------------------------------------------
    @classmethod
    def random(
        cls,
        T: int,
        V: int,
        key,
        *,
        row_law: str = "dirichlet",
        concentration: float = 1.0,
        rho: np.ndarray | None = None,
        dtype: str = "float64",
    ) -> "MarkovInstance":
        r"""Random non-stationary draft and target chains with independent rows.

        ``row_law="dirichlet"``: every row ``P[n, a]``, ``Q[n, a]`` is an independent
        :math:`\mathrm{Dirichlet}(c, \dots, c)` draw, ``c = concentration``
        (small ``c`` gives peaked rows and a larger TV).
        ``row_law="uniform"``: i.i.d. ``U(0, 1)`` entries normalised per row — the
        generator that reproduces the scale of [Yin] App. F (``E[N_rej] ≈ 16.4``
        at ``T = 50, V = 7``; the paper reports 16.41).

        Args:
          T: horizon.
          V: vocabulary size (>= 2).
          key: int seed or ``np.random.Generator``.
          row_law: how each row is drawn, ``"dirichlet"`` or ``"uniform"``.
          concentration: Dirichlet concentration ``c > 0`` (``row_law="dirichlet"`` only).
          rho: prompt law; uniform if omitted.
          dtype: ``"float64"`` or ``"float32"`` (the draws are made in float64).
        """
        T = as_positive_int(T, "T")
        V = as_positive_int(V, "V", minimum=2)
        number = isinstance(concentration, numbers.Real) and not isinstance(concentration, bool)
        if not (number and np.isfinite(concentration) and concentration > 0):
            raise ValueError(f"concentration must be a finite number > 0; got {concentration!r}")
        rng = as_generator(key)
        if row_law == "dirichlet":
            alpha = np.full(V, float(concentration))
            P = rng.dirichlet(alpha, size=(T, V))
            Q = rng.dirichlet(alpha, size=(T, V))
        elif row_law == "uniform":
            P = rng.random((T, V, V))
            Q = rng.random((T, V, V))
            P /= P.sum(axis=-1, keepdims=True)
            Q /= Q.sum(axis=-1, keepdims=True)
        else:
            raise ValueError(f"row_law must be 'dirichlet' or 'uniform'; got {row_law!r}")
        rho = np.full(V, 1.0 / V) if rho is None else rho
        return cls(P, Q, rho, dtype=dtype)

    @classmethod
    def context_free(cls, p, q, T: int, rho=None, *, dtype: str = "float64") -> "MarkovInstance":
        """Every position and context uses the same pair ``(p, q)`` (i.i.d. tokens).

        Stored as the two rows: ``O(V)`` memory whatever ``T`` (``V = 50,000`` is fine).
        """
        T = as_positive_int(T, "T")
        p = as_distribution(p, "p", ndim=1)
        q = as_distribution(q, "q", ndim=1)
        if p.shape != q.shape:
            raise ValueError(f"p and q must have the same length; got {p.shape[0]} and {q.shape[0]}")
        V = p.shape[0]
        P = np.broadcast_to(p, (T, V, V))
        Q = np.broadcast_to(q, (T, V, V))
        rho = np.full(V, 1.0 / V) if rho is None else rho
        return cls(P, Q, rho, dtype=dtype)

    @classmethod
    def stationary(cls, P, Q, T: int, rho=None, *, dtype: str = "float64") -> "MarkovInstance":
        """Time-homogeneous chains: the ``(V, V)`` kernels ``P`` and ``Q`` at every position.

        Stored once: ``O(V²)`` memory whatever ``T``.
        """
        T = as_positive_int(T, "T")
        P = as_distribution(P, "P", ndim=2)
        Q = as_distribution(Q, "Q", ndim=2)
        if P.shape != Q.shape or P.shape[0] != P.shape[1]:
            raise ValueError(f"P and Q must both have shape (V, V); got {P.shape} and {Q.shape}")
        V = P.shape[0]
        rho = np.full(V, 1.0 / V) if rho is None else rho
        return cls(np.broadcast_to(P, (T, V, V)), np.broadcast_to(Q, (T, V, V)), rho, dtype=dtype)

    # -- persistence ---------------------------------------------------------
    def save(self, path: str | PathLike) -> Path:
        """Write the instance to an ``.npz`` file (lossless; compact kernels are written compactly); returns the
        file written (``.npz`` is appended to a name without it, as numpy does). A folder is refused. Written
        atomically (:func:`speculab._files.atomic_path`)."""
        text = os.fspath(path)
        target = Path(text)
        if text.endswith(("/", os.sep)) or target.is_dir() or target.name in ("", ".", ".."):
            raise ValueError(f"path must name a file (e.g. {Path(text) / 'instance.npz'}); got the folder {text!r}")
        if target.suffix != ".npz":
            target = target.with_name(target.name + ".npz")
        with atomic_path(target) as tmp, open(tmp, "wb") as f:  # a file object: numpy appends no suffix
            np.savez(f, P=compact(self.P), Q=compact(self.Q), rho=self.rho, T=self.T, format_version=_FORMAT_VERSION)
        return target

    @classmethod
    def load(cls, path: str | PathLike) -> "MarkovInstance":
        """Read an instance written by :meth:`save` (validated again on load). A file that is not one — missing,
        empty, truncated, corrupt, another format, pickled objects (never unpickled), a header field
        (``format_version``, ``T``) that is not one whole number, arrays that are not an instance's — is refused
        with a ``ValueError`` naming it."""
        data = _read_npz(path)
        missing = {"P", "Q", "rho"} - set(data)
        if missing:
            raise ValueError(f"{path} is not a speculab Markov instance: missing {sorted(missing)}")
        try:
            version = _header_int(data, "format_version") if "format_version" in data else 1
        except ValueError as exc:
            raise ValueError(f"{path} is not a speculab Markov instance: {exc}") from None
        if version > _FORMAT_VERSION:
            raise ValueError(f"{path} has format version {version}; this speculab reads <= {_FORMAT_VERSION}")
        try:
            return cls._from_arrays(data)
        except ValueError as exc:
            raise ValueError(f"{path} is not a speculab Markov instance: {exc}") from None

    @classmethod
    def _from_arrays(cls, data: dict[str, np.ndarray]) -> "MarkovInstance":
        """The instance of a file's arrays: format 1 (full stacks) or 2 (compact parts and the horizon ``T``)."""
        P, Q, rho = data["P"], data["Q"], data["rho"]
        dtype = "float32" if P.dtype == np.float32 else "float64"
        P, Q = as_float_array(P, "P"), as_float_array(Q, "Q")
        if "T" in data:
            T = _header_int(data, "T")
            if P.ndim != 3 or Q.ndim != 3 or P.shape[-1] != Q.shape[-1]:
                raise ValueError(f"P and Q have shapes {P.shape} and {Q.shape}")
            V = P.shape[-1]
            P, Q = np.broadcast_to(P, (T, V, V)), np.broadcast_to(Q, (T, V, V))
        return cls(P, Q, rho, dtype=dtype)
