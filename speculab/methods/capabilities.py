"""What a method may give beyond the core protocol, each declared one way: by defining its members.

Every method gives the core of :class:`~speculab.methods.Method` — its name and parameters, ``draft_length``,
``round_law``, ``expected`` and its rows of ``compare``. A method that can give more defines the members of a
capability below (each a :class:`typing.Protocol`, documented there), and everything that reads one — the two
simulation engines, the decoding loop, ``compare``, the command line — asks :func:`has`, the one check: a
method has a capability iff its class defines every member of it (a member set to ``None`` opts out, as
``__hash__ = None`` does).

* :class:`Slotwise` — a rule ``(b, P)`` of [Yin] Algorithm 2 (:class:`~speculab.methods.ChainMethod`): a round is
  verified one slot at a time, so engines advance position by position and draw a draft only when it is verified;
* :class:`RootTable` — the law of a multi-row root's outcome as one table (batch SD, optimal multi-draft);
* :class:`PositionLaw` — no rounds: each draft decided where it is drafted (SPRINTER);
* :class:`AdaptiveLength` — each round's length decided while drafting (SpecDec++);
* :class:`DraftHead` — on real models, a head on the draft's hidden states read while drafting (SPRINTER,
  SpecDec++);
* :class:`RoundProbing` — a probe ``decode`` calls after every round, which ``compare`` reads (block verification);
* :class:`TreeDrafting` — each round drafts a token tree, and the round law reads the tree's node layout (the tree
  verifiers, :mod:`speculab.methods.tree`);
* :class:`DraftLaw` — drafts drawn from a law made from the draft model's, not from it (an engine's greedy
  drafting: the draft's most likely token, :mod:`speculab.methods.greedy_draft`).
"""

from __future__ import annotations

import numbers

from typing import Any, Protocol

__all__ = [
    "has",
    "reading",
    "root_table",
    "adaptive_verifier",
    "head_of",
    "head_probability",
    "Slotwise",
    "RootTable",
    "PositionLaw",
    "AdaptiveLength",
    "DraftHead",
    "RoundProbing",
    "TreeDrafting",
    "DraftLaw",
    "drafting_law",
    "drafting_instance",
]


class Slotwise(Protocol):
    """A round verified one slot at a time by a rule of [Yin] Algorithm 2: the root by the law of a one-slot round
    over the ``M`` rows, every later slot by that of a one-slot round on the followed row, and after a refusal the
    correction is the rule's rejection law at the slot, whatever the refused draft.

    The round law must be the chain law of the rule (:class:`~speculab.methods.ChainMethod` derives it so): the
    numpy engine reads the rule, the JAX engine tabulates the one-slot round law, the real-model backend and the
    enumeration of :mod:`speculab.testing` read the round law — a method whose two differ fails
    ``assert_counts_match_theory``."""

    def rule(self, p, q) -> Any:
        """The acceptance ``b`` and rejection law ``P`` at laws ``p``, ``q`` ``(..., V)`` (array API)."""

    def instance_rule(self, inst) -> Any:
        """The rule as ``(T, V, V)`` numpy arrays on a Markov instance."""


class RootTable(Protocol):
    """The law of a multi-row root's outcome as one table."""

    def root_outcome(self, p, q) -> Any:
        """``(..., 2V)`` from draft and target laws ``(..., V)`` at the root (array API): entry ``x < V``, the
        probability that the root accepts a draft equal to ``x`` and follows a row that drafted it; entry
        ``V + y``, that every row is refused and ``y`` is output. That is all a round's later slots and its counts
        depend on (the followed row's later drafts are fresh draws from ``p`` whichever row drafted ``x``), so an
        engine tabulates it per context once and draws the root with one uniform; without it engines evaluate the
        root's round law. The table-driven tests check it against the round law's root averaged over the drafts."""


class PositionLaw(Protocol):
    """No rounds: one token drafted per position and decided there."""

    def position_law(self, inst) -> Any:
        """``(free, called, correction, extra)`` on ``inst``: for the drafted token ``x`` at ``(t, a)``, the
        probability that ``x`` is output without a target call, ``(T, V, V)``, and after one, ``(T, V, V)``;
        otherwise a target call outputs a correction from the weights ``correction`` ``(T, V, V)`` (rows; broadcast
        views when the instance is compact); ``extra`` names the method's counts that grow by one at every position
        (e.g. ``verifier_calls``). Every position makes one draft call."""


class AdaptiveLength(Protocol):
    """Each round's length decided while drafting."""

    def adaptive_drafting(self, inst) -> Any:
        """Its :class:`~speculab.theory.AdaptiveDrafting` on ``inst``: the verifier (:class:`Slotwise`), the
        scores, the stopping rule and its parameters."""


class DraftHead(Protocol):
    """On real models, a head on the draft's hidden states, read while drafting.

    With a head (:attr:`draft_head` not ``None``), at each slot of each prompt the decoding loop stores
    ``read_head(head(hidden), uniform)``, stops drafting where :meth:`stop_drafting` says, passes the stored values
    to ``round_law`` as ``predictions`` (batched: an array shaped like the drafts, NaN where unread) and counts a
    target call where :meth:`target_called` says.
    """

    #: The parameter that takes the head (the command line's ``--head FILE`` loads a saved head into it).
    head_param: str
    #: Which hidden state the head reads at a slot: ``"token"``, the one after feeding the drafted token (the pass
    #: that computes the next slot's law), or ``"previous"``, the one before it (the pass that computed this slot's).
    head_reads: str

    @property
    def draft_head(self) -> Any:
        """The head this method runs on the draft's hidden states, or ``None`` (given no trained head)."""

    def read_head(self, score, uniform: float) -> float:
        """What the loop stores for a slot from the head's output ``score`` (``uniform``: the slot's own uniform
        from the prompt's stream, :func:`speculab.backends.streams.head_lane`, for a head read at random)."""

    def stop_drafting(self, predictions: list[float], remaining: int) -> bool:
        """Whether a round stops drafting after the slots whose stored values are ``predictions``."""

    def target_called(self, predictions: list[float]) -> bool:
        """Whether a round with these stored values calls the target."""


class RoundProbing(Protocol):
    """A probe the decoding loop calls after every round."""

    def round_probe(self) -> Any:
        """A :class:`~speculab.methods.RoundProbe`, read by ``compare_rows``; being a probe, it is journaled with
        the runs (a resumed ``compare`` decodes only what is left)."""


class TreeDrafting(Protocol):
    """Each round drafts a token tree (:mod:`speculab.methods.tree`): its round law takes the node layout, laws and
    tokens at every node of the tree, instead of rows of slots."""

    #: How the children of a node are drafted: ``"iid"`` (with replacement) or ``"distinct"`` (without).
    draws: str

    def round_tree(self, remaining: int) -> Any:
        """The :class:`~speculab.methods.tree.Tree` a round drafts when it may output at most ``remaining`` tokens."""


class DraftLaw(Protocol):
    """Drafts drawn from a law made from the draft model's, not from the draft's own law.

    Every engine — both simulators (through :func:`drafting_instance`), the decoding loops, ``certify`` and the
    enumerations of the tests — draws the drafts from ``draft_law(p)`` and hands that law, as ``p``, to the
    method's rule and round law: the rule verifies the law the drafts really came from. The map must be
    idempotent (``draft_law(draft_law(p)) == draft_law(p)``), so that a law passed through it twice is unchanged.
    """

    def draft_law(self, p) -> Any:
        """The law ``(..., V)`` the drafts are drawn from when the draft model's law is ``p`` ``(..., V)``
        (array API)."""


def drafting_law(method, p):
    """The law ``method`` draws its drafts from where the draft model's law is ``p`` (:class:`DraftLaw`): ``p``
    itself for a method without the capability."""
    return method.draft_law(p) if has(method, DraftLaw) else p


def drafting_instance(method, inst):
    """``inst`` with its draft kernels replaced by the law ``method`` drafts from (:class:`DraftLaw`), compact
    kernels kept compact; ``inst`` itself for a method without the capability."""
    if not has(method, DraftLaw):
        return inst
    from speculab.theory.instance import MarkovInstance, rowwise

    return MarkovInstance(rowwise(method.draft_law, inst.P), inst.Q, inst.rho, dtype=inst.dtype)


def _members(capability: type) -> list[str]:
    names = set(getattr(capability, "__annotations__", {}))
    names |= {n for n in vars(capability) if not n.startswith("_")}
    return sorted(names)


def has(method, capability: type) -> bool:
    """Whether ``method`` (a method or its class) has ``capability``: its class defines every member, not ``None``.

    Example:
      >>> from speculab.methods import SD, BatchSD, BlockVerification
      >>> has(SD(), Slotwise), has(BatchSD, RootTable), has(BlockVerification(2), Slotwise)
      (True, True, False)
    """
    cls = method if isinstance(method, type) else type(method)
    return all(getattr(cls, name, None) is not None for name in _members(capability))


def reading(method) -> str:
    """How the simulation engines run ``method`` — the first of its capabilities that says, in this order:
    ``"trees"`` (:class:`TreeDrafting`), ``"adaptive"`` (:class:`AdaptiveLength`), ``"slots"``
    (:class:`Slotwise`), ``"positions"`` (:class:`PositionLaw`), else ``"rounds"``: round by round from the core's
    round law. Both engines read it here, so a method runs the same way on either."""
    for capability, name in (
        (TreeDrafting, "trees"),
        (AdaptiveLength, "adaptive"),
        (Slotwise, "slots"),
        (PositionLaw, "positions"),
    ):
        if has(method, capability):
            return name
    return "rounds"


def adaptive_verifier(method, rule):
    """``rule.verifier`` of ``method``'s adaptive drafting, refused unless it is a slotwise method of one row (what
    both engines verify each draft with)."""
    verifier = rule.verifier
    if not has(verifier, Slotwise) or getattr(verifier, "rows", None) != 1:
        raise ValueError(f"{type(method).__name__}'s verifier must be a slotwise method of one row; got {verifier!r}")
    return verifier


def root_table(method, p, q):
    """``method.root_outcome(p, q)`` (:class:`RootTable`), refused unless it is a law over ``2V`` outcomes per row:
    shape ``(..., 2V)``, entries finite and non-negative, each row summing to 1 (to ``1e-9``, or ``64 V`` rounding
    units of a coarser float; array API)."""
    from array_api_compat import array_namespace

    table = method.root_outcome(p, q)
    V = p.shape[-1]
    shape = tuple(getattr(table, "shape", ()))
    if shape[-1:] != (2 * V,) or len(shape) != len(p.shape):
        raise ValueError(
            f"{type(method).__name__}.root_outcome must return a law over 2V = {2 * V} outcomes per row, "
            f"shape {(*p.shape[:-1], 2 * V)}; got {shape if shape else type(table).__name__}"
        )
    xp = array_namespace(table)
    tol = max(1e-9, 64 * V * float(xp.finfo(table.dtype).eps))
    ok = xp.all(table >= 0) & xp.all(xp.abs(xp.sum(table, axis=-1) - 1.0) <= tol)  # NaN fails both
    if not bool(ok):
        raise ValueError(f"{type(method).__name__}.root_outcome must return non-negative rows summing to 1 (no NaN)")
    return table


def head_of(method):
    """The head ``method`` runs on the draft's hidden states while drafting (:class:`DraftHead`), or ``None``."""
    return method.draft_head if has(method, DraftHead) else None


def head_probability(score, what: str) -> float:
    """A head's output as a float, refused unless it is a probability in ``[0, 1]`` (NaN included): ``what`` names
    the head in the message."""
    if hasattr(score, "tolist"):  # a one-value tensor or numpy scalar: its Python value (the host reads it here)
        score = score.tolist()
    if isinstance(score, bool) or not isinstance(score, numbers.Real) or not 0 <= score <= 1:
        raise ValueError(f"the {what} gave {score!r}; its output must be a probability in [0, 1] (one number)")
    return float(score)
