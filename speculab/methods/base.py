r"""The method protocol: what every decoding method owns, and the registry that finds it.

A method is one module holding one frozen dataclass that subclasses :class:`Method`
(optax's shape for a transformation: one object, a few functions, composable
with everything else). It owns

* its **rule** — the verification step on arrays, written once against the array
  API (:mod:`speculab.kernels`): :meth:`Method.round_law` gives the exact law of
  one round's decision given the drafted block; numpy (the simulators), torch
  (the real-model backend) and JAX run it unchanged. Both simulation engines run
  every method from its laws alone (:mod:`speculab.sim.engine`): the round law, the
  rule ``(b, P)`` of a slotwise method, or the position law or adaptive drafting of
  a method without a round law of its own;
* its **exact expectations** — :meth:`Method.expected` returns an
  :class:`~speculab.counts.Expected` whose fields are named as ``Counts``' (or
  ``None`` where no theory exists);
* its **registration** — ``name`` and CLI parameters (:func:`param` fields),
  entered in :data:`REGISTRY` by :func:`register`, which the CLI, ``compare`` and
  ``decode`` read.

**A round** (the unit every engine shares): from a context, draft ``L`` tokens on
each of ``M`` rows (``x[m, i] ~ p_i``), make one target call (``q_1..q_{L+1}``),
then the rule picks a row ``m`` and a number ``τ ∈ {0..L}`` of accepted drafts and
outputs ``x[m, :τ]`` followed by one more token ``y``: a *correction* (``τ < L``),
a *bonus* from ``q_{L+1}`` (``τ = L`` when a next position exists), or nothing.
:class:`RoundLaw` holds the exact probabilities of ``(m, τ)`` and the weights of
``y`` given the block; :func:`sample_round` draws from it with two uniforms.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, NamedTuple

from array_api_compat import array_namespace, device

from speculab import kernels
from speculab._validate import as_lookahead
from speculab.counts import Expected
from speculab.methods.capabilities import DraftHead, has
from speculab.theory.stopping import AdaptiveDrafting

__all__ = [
    "Method",
    "RoundLaw",
    "AdaptiveDrafting",
    "param",
    "register",
    "REGISTRY",
    "get",
    "names",
    "build",
    "sample_round",
    "check_probability",
    "check_lookahead",
]


# -- parameters and registration ----------------------------------------------------------
def param(
    default=dataclasses.MISSING,
    *,
    help: str,
    cli: bool = True,
    type: Callable | None = None,
    choices: tuple | None = None,
    required: bool = False,
):
    """A method parameter: a dataclass field carrying what the CLI needs.

    Args:
      default: the default (omit for a required parameter).
      help: one line for ``--help``.
      cli: whether the parameter is a command-line option (functions and arrays are not).
      type: the option's type on the command line (``int``, ``float``, ``str``).
      choices: allowed values on the command line.
      required: required on the command line even though the dataclass has a default
        (e.g. SPRINTER's ``eta_tp``, which a verifier function can replace in Python).
    """
    meta = {
        "help": help,
        "cli": cli,
        "type": type,
        "choices": choices,
        "required": required or default is dataclasses.MISSING,
    }
    return dataclasses.field(default=default, metadata=meta)


#: Method name -> method class, filled by :func:`register` (one line per method in ``speculab.methods``).
REGISTRY: dict[str, type["Method"]] = {}


def cli_params(cls: type["Method"]) -> dict[str, dataclasses.Field]:
    """The command-line parameters of a method class, by field name."""
    return {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("cli")}


def register(cls: type["Method"]) -> type["Method"]:
    """Enter a method class in :data:`REGISTRY` under ``cls.name`` (a class decorator).

    Refuses a name already taken by another class, and a command-line parameter
    whose type differs from a same-named parameter of a registered method (they
    share one ``--option``).
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a class attribute `name` (its registry and CLI name)")
    if name in REGISTRY and REGISTRY[name] is not cls:
        raise ValueError(f"method name {name!r} is taken by {REGISTRY[name].__name__}")
    for other in REGISTRY.values():
        shared = set(cli_params(cls)) & set(cli_params(other))
        for p in shared:
            a, b = cli_params(cls)[p].metadata, cli_params(other)[p].metadata
            if a["type"] is not b["type"] or a["choices"] != b["choices"]:
                raise ValueError(f"parameter {p!r} of {cls.__name__} clashes with {other.__name__}'s (type or choices)")
    REGISTRY[name] = cls
    return cls


def get(name: str) -> type["Method"]:
    """The registered method class called ``name``."""
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(REGISTRY)}")
    return REGISTRY[name]


def names(*, real_models: bool | None = None, cli: bool | None = None) -> list[str]:
    """Registered method names, optionally only those that run on real models / on the command line."""
    out = []
    for name, cls in REGISTRY.items():
        if real_models is not None and cls.runs_on_real_models() != real_models:
            continue
        if cli is not None and cls.constructible_from_cli() != cli:
            continue
        out.append(name)
    return out


def build(name: str, values: dict[str, Any], head=None) -> "Method":
    """A method from its registry name and command-line values (``None`` = not given).

    ``head``: a head trained on the draft's hidden states (``--head FILE``, loaded), given to the method as its
    ``head_param`` (:class:`~speculab.methods.capabilities.DraftHead`). It takes the place of the options required
    only on the command line (those
    with a default in Python, e.g. SPRINTER's ``--eta-tp``/``--eta-fp``, which stand for a verifier): those
    are then refused.

    Raises a ``ValueError`` naming the option for a parameter the method does not
    take or a required one that is missing; the method's own checks do the rest.
    """
    cls = get(name)
    own = cli_params(cls)
    given = {k: v for k, v in values.items() if v is not None}
    extra = sorted(k for k in given if k not in own)
    if extra:
        raise ValueError(f"{', '.join(option(k) for k in extra)} does not apply to --method {name}")
    if head is not None:
        if not has(cls, DraftHead):
            takers = [n for n, c in REGISTRY.items() if has(c, DraftHead)]
            raise ValueError(
                f"--head does not apply to --method {name}: it reads no trained head "
                f"(methods that do: {', '.join(takers)})"
            )
        replaced = {k for k, f in own.items() if f.metadata["required"] and f.default is not dataclasses.MISSING}
        clash = sorted(k for k in given if k in replaced)
        if clash:
            raise ValueError(
                f"{', '.join(option(k) for k in clash)} does not apply with --head (the head takes its place)"
            )
        own = {k: f for k, f in own.items() if k not in replaced}
        given[cls.head_param] = head
    missing = [k for k, f in own.items() if f.metadata["required"] and k not in given]
    if missing:
        raise ValueError(
            f"--method {name} needs {', '.join(option(k) + ' (' + own[k].metadata['help'] + ')' for k in missing)}"
        )
    return cls(**given)


def option(field_name: str) -> str:
    """The command-line option of a parameter: ``eta_tp`` -> ``--eta-tp``."""
    return "--" + field_name.replace("_", "-")


# -- shared checks of method parameters ---------------------------------------------------
def check_probability(x, name: str) -> float:
    """``x`` as a float in ``[0, 1]`` (booleans and NaN refused)."""
    ok = isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and 0 <= x <= 1
    if not ok:
        raise ValueError(f"{name} must be a number in [0, 1]; got {x!r}")
    return float(x)


check_lookahead = as_lookahead  # a lookahead: None (K = ∞) or an integer >= 1


# -- one round's law ---------------------------------------------------------------------------
class RoundLaw(NamedTuple):
    """The exact law of one round's decision given the drafted block (array API; leading batch axes ``...``).

    With ``M`` draft rows of ``L`` tokens:

    Attributes:
      outcome: ``(..., M, L + 1)`` probability that the round follows row ``m`` and
        accepts exactly ``τ`` of its drafts (sums to 1 over ``(m, τ)``).
      correction: ``(..., M, L + 1, V)`` unnormalised weights of the token output after
        ``(m, τ)``: the correction for ``τ < L``, the bonus law ``q_{L+1}`` for ``τ = L``
        (all zeros when no bonus is possible: nothing follows).
      reject_prob: ``(..., M, L + 1)`` conditional probability, given everything output
        before it, that slot ``i`` of row ``m`` is a correction (0 at a bonus slot); the
        paired prediction of the rejection count.
      accept_prob: ``(..., M, L)`` probability that the draft at slot ``i`` is accepted
        given the output before it and the draft itself (SD: ``min(1, q/p)``).
      law: ``(..., M, L, V)`` one-step output law at each slot of a biased method (the
        per-token bias ``TV(law, q)`` is reported from it), or ``None`` when unbiased.
    """

    outcome: Any
    correction: Any
    reject_prob: Any
    accept_prob: Any
    law: Any = None

    def expected_accepted(self):
        """``E[τ | block]`` and ``Var[τ | block]``, shape ``(...)`` each."""
        xp = array_namespace(self.outcome)
        tau = xp.arange(self.outcome.shape[-1], dtype=self.outcome.dtype, device=device(self.outcome))
        mean = xp.sum(self.outcome * tau, axis=(-2, -1))
        return mean, xp.sum(self.outcome * tau * tau, axis=(-2, -1)) - mean * mean


def sample_round(law: RoundLaw, u_outcome, u_token):
    """Draw one round's decision from its law with two uniforms (array API, batched over ``...``).

    Returns:
      ``(row, accepted, token)``: ``(...)`` integer arrays; ``token`` is ``-1`` where
      nothing follows the accepted drafts (all accepted at the horizon).
    """
    xp = array_namespace(law.outcome)
    M, L1 = law.outcome.shape[-2], law.outcome.shape[-1]
    lead = law.outcome.shape[:-2]
    idx = kernels.sample_index(xp.reshape(law.outcome, (*lead, M * L1)), u_outcome)  # (...)
    weights = xp.reshape(law.correction, (*lead, M * L1, law.correction.shape[-1]))
    w = xp.take_along_axis(weights, xp.broadcast_to(idx[..., None, None], (*lead, 1, weights.shape[-1])), axis=-2)[
        ..., 0, :
    ]
    cum = xp.cumulative_sum(w, axis=-1)
    token = kernels.sample_cumulative(cum, u_token)  # V (out of range) where w has no mass: replaced by -1
    return idx // L1, idx % L1, xp.where(cum[..., -1] > 0, token, -1)


# -- the protocol -------------------------------------------------------------------------------------
class Method(ABC):
    """Base of every decoding method (a frozen dataclass registered with :func:`register`): the core protocol.

    Subclasses set ``name`` and give :meth:`draft_length` and :meth:`round_law`, from which both simulation
    engines and the real-model backend run them; :meth:`expected` (exact theory) and :meth:`compare_rows`
    (method-specific rows of ``compare``) are optional. What a method may give beyond this — a slotwise rule,
    a root table, a position law, adaptive drafting, a head on the draft, a probe of each round — it declares by
    defining a capability's members (:mod:`speculab.methods.capabilities`, checked by its ``has``).
    """

    name: ClassVar[str] = ""
    #: Whether the method drafts tokens (autoregressive decoding, the reference of every comparison, does not).
    drafting: ClassVar[bool] = True
    #: Whether the method runs on real models (optimal multi-draft's linear programs do not fit a real vocabulary).
    real_models: ClassVar[bool] = True

    # -- what the method is -------------------------------------------------------------
    def __str__(self) -> str:
        """The method for people: its ``repr`` with an unlimited lookahead ``K=None`` written ``K=∞``, as the docs
        write it. ``repr`` stays the constructor, which journals, plans and ``--json`` outputs record."""
        if not dataclasses.is_dataclass(self):
            return repr(self)
        shown = (
            f"{f.name}={'∞' if f.name == 'K' and getattr(self, f.name) is None else repr(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
            if f.repr
        )
        return f"{type(self).__name__}({', '.join(shown)})"

    @property
    def unbiased(self) -> bool:
        """Whether the output law is the target's whatever the instance (the table tests check it exactly)."""
        return True

    @property
    def rows(self) -> int:
        """Draft rows per round (batch SD drafts ``M``)."""
        return 1

    # -- a round ------------------------------------------------------------------------------
    @abstractmethod
    def draft_length(self, remaining: int) -> int:
        """Tokens to draft per row in a round that may output at most ``remaining`` tokens (0: none)."""

    @abstractmethod
    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        """The exact law of a round's decision given the block (array API).

        Args:
          p: ``(..., M, L, V)`` the draft's laws at the drafted slots.
          q: ``(..., M, L + 1, V)`` the target's laws there and at the next position.
          x: ``(..., M, L)`` integer drafted tokens.
          bonus: whether a position follows the block (else ``q[..., L, :]`` is unused).

        A method with a head on the draft (:class:`~speculab.methods.capabilities.DraftHead`) also receives
        ``predictions=``, its stored values at the slots. A round without drafts (``L = 0``: autoregressive
        decoding, a draft that proposes nothing) must be one token from ``q[..., 0, :]`` — there is nothing to
        accept; the engines and the one-prompt decoding loop draw it directly.
        """

    # -- theory ------------------------------------------------------------------------------
    def expected(self, inst) -> Expected | None:
        """Exact expected counts on a Markov instance (``None``: the method has no exact theory). A theory whose
        work explodes with the instance raises :class:`~speculab._validate.TooLarge` past its budget
        (:func:`speculab.work_budget`)."""
        return None

    def compare_rows(self, ctx) -> list:
        """Method-specific rows of :func:`speculab.compare.compare` (``ctx``: :class:`speculab.compare.Context`)."""
        return []

    # -- the registry's view ----------------------------------------------------------------------
    @classmethod
    def runs_on_real_models(cls) -> bool:
        return cls.real_models

    @classmethod
    def constructible_from_cli(cls) -> bool:
        """Whether every required parameter is a command-line option."""
        return all(
            f.metadata.get("cli")
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
