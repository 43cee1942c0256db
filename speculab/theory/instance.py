"""Markov instances: the draft/target pairs of the papers' simulations (SPEC §0).

A Markov instance is a pair of non-stationary Markov chains over a vocabulary of
``V`` tokens, run for ``T`` steps from a prompt token ``x_0 ~ rho``:

* ``P[n-1, a, b] = p_n(x_n = b | x_{n-1} = a)`` — the draft model,
* ``Q[n-1, a, b] = q_n(x_n = b | x_{n-1} = a)`` — the target model,

for positions ``n = 1..T`` (array index ``n - 1``). [Yin] App. F uses ``V = 7``,
uniform ``rho`` and ``T = 50`` or ``100``.
"""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike

import numpy as np

from speculab import kernels
from speculab._validate import (
    as_distribution,
    as_float_array,
    as_generator,
    as_positive_int,
)

__all__ = ["MarkovInstance", "chain_marginals"]

_FORMAT_VERSION = 1


def chain_marginals(rho: np.ndarray, transitions: np.ndarray) -> np.ndarray:
    r"""Marginals :math:`\mu_0 = \rho`, :math:`\mu_n = \mu_{n-1} K_n` of a non-stationary chain.

    Args:
      rho: initial law, shape ``(V,)``.
      transitions: ``(T, V, V)`` row-stochastic kernels ``K_1..K_T``.

    Returns:
      ``(T + 1, V)`` array whose row ``n`` is the law of ``x_n``.
    """
    T, V = transitions.shape[0], transitions.shape[-1]
    mu = np.empty((T + 1, V))
    mu[0] = rho
    for n in range(T):
        mu[n + 1] = mu[n] @ transitions[n]
    return mu


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class MarkovInstance:
    """A draft/target pair of non-stationary Markov chains.

    Attributes:
      P: draft transitions, shape ``(T, V, V)``, rows sum to 1.
      Q: target transitions, same shape.
      rho: law of the prompt token ``x_0``, shape ``(V,)``.

    The arrays are copied and made read-only on construction.
    """

    P: np.ndarray
    Q: np.ndarray
    rho: np.ndarray

    def __post_init__(self):
        P = as_distribution(self.P, "P", ndim=3)
        Q = as_distribution(self.Q, "Q", ndim=3)
        rho = as_distribution(self.rho, "rho", ndim=1)
        if P.shape[1] != P.shape[2]:
            raise ValueError(f"P must have shape (T, V, V); got {P.shape}")
        if Q.shape != P.shape:
            raise ValueError(
                f"P and Q must have the same shape (T, V, V); got {P.shape} and {Q.shape}"
            )
        if rho.shape[0] != P.shape[2]:
            raise ValueError(f"rho must have length V = {P.shape[2]}; got {rho.shape[0]}")
        object.__setattr__(self, "P", _frozen(P))
        object.__setattr__(self, "Q", _frozen(Q))
        object.__setattr__(self, "rho", _frozen(rho))

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
        """``TV(P[n, a], Q[n, a])`` for every position and context, shape ``(T, V)``."""
        return kernels.tv(self.P, self.Q)

    # -- constructors --------------------------------------------------------
    @classmethod
    def random(
        cls,
        T: int,
        V: int,
        key,
        *,
        rows: str = "dirichlet",
        concentration: float = 1.0,
        rho: np.ndarray | None = None,
    ) -> "MarkovInstance":
        r"""Random non-stationary draft and target chains with independent rows.

        ``rows="dirichlet"``: every row ``P[n, a]``, ``Q[n, a]`` is an independent
        :math:`\mathrm{Dirichlet}(c, \dots, c)` draw, ``c = concentration``
        (small ``c`` gives peaked rows and a larger TV).
        ``rows="uniform"``: i.i.d. ``U(0, 1)`` entries normalised per row — the
        generator that reproduces the scale of [Yin] App. F (``E[N_rej] ≈ 16.4``
        at ``T = 50, V = 7``; the paper reports 16.41).

        Args:
          T: horizon.
          V: vocabulary size (>= 2).
          key: int seed or ``np.random.Generator``.
          rows: ``"dirichlet"`` or ``"uniform"``.
          concentration: Dirichlet concentration ``c > 0`` (``rows="dirichlet"`` only).
          rho: prompt law; uniform if omitted.
        """
        T = as_positive_int(T, "T")
        V = as_positive_int(V, "V", minimum=2)
        if not (np.isfinite(concentration) and concentration > 0):
            raise ValueError(f"concentration must be a finite number > 0; got {concentration!r}")
        rng = as_generator(key)
        if rows == "dirichlet":
            alpha = np.full(V, float(concentration))
            P = rng.dirichlet(alpha, size=(T, V))
            Q = rng.dirichlet(alpha, size=(T, V))
        elif rows == "uniform":
            P = rng.random((T, V, V))
            Q = rng.random((T, V, V))
            P /= P.sum(axis=-1, keepdims=True)
            Q /= Q.sum(axis=-1, keepdims=True)
        else:
            raise ValueError(f"rows must be 'dirichlet' or 'uniform'; got {rows!r}")
        rho = np.full(V, 1.0 / V) if rho is None else rho
        return cls(P, Q, rho)

    @classmethod
    def context_free(cls, p, q, T: int, rho=None) -> "MarkovInstance":
        """Every position and context uses the same pair ``(p, q)`` (i.i.d. tokens)."""
        T = as_positive_int(T, "T")
        p = as_distribution(p, "p", ndim=1)
        q = as_distribution(q, "q", ndim=1)
        if p.shape != q.shape:
            raise ValueError(f"p and q must have the same length; got {p.shape[0]} and {q.shape[0]}")
        V = p.shape[0]
        P = np.broadcast_to(p, (T, V, V))
        Q = np.broadcast_to(q, (T, V, V))
        rho = np.full(V, 1.0 / V) if rho is None else rho
        return cls(P, Q, rho)

    @classmethod
    def stationary(cls, P, Q, T: int, rho=None) -> "MarkovInstance":
        """Time-homogeneous chains: the ``(V, V)`` kernels ``P`` and ``Q`` at every position."""
        T = as_positive_int(T, "T")
        P = as_distribution(P, "P", ndim=2)
        Q = as_distribution(Q, "Q", ndim=2)
        if P.shape != Q.shape or P.shape[0] != P.shape[1]:
            raise ValueError(f"P and Q must both have shape (V, V); got {P.shape} and {Q.shape}")
        V = P.shape[0]
        rho = np.full(V, 1.0 / V) if rho is None else rho
        return cls(np.broadcast_to(P, (T, V, V)), np.broadcast_to(Q, (T, V, V)), rho)

    # -- persistence ---------------------------------------------------------
    def save(self, path: str | PathLike) -> None:
        """Write the instance to an ``.npz`` file (lossless)."""
        np.savez(path, P=self.P, Q=self.Q, rho=self.rho, format_version=_FORMAT_VERSION)

    @classmethod
    def load(cls, path: str | PathLike) -> "MarkovInstance":
        """Read an instance written by :meth:`save` (validated again on load)."""
        with np.load(path) as data:
            missing = {"P", "Q", "rho"} - set(data.files)
            if missing:
                raise ValueError(f"{path} is not a speculab Markov instance: missing {sorted(missing)}")
            version = int(data["format_version"]) if "format_version" in data.files else 1
            if version > _FORMAT_VERSION:
                raise ValueError(f"{path} has format version {version}; this speculab reads <= {_FORMAT_VERSION}")
            return cls(as_float_array(data["P"], "P"), as_float_array(data["Q"], "Q"), data["rho"])
