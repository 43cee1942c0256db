"""Speculative decoding, [Yin] Algorithm 1: ``b = min(1, q/p)``, ``P = [q − p]_+``; unbiased.

With finite ``K``, a round whose ``K`` drafts are all accepted ends with a bonus
token drawn from the target's next distribution, which the same oracle call
already computed. Exact counts: [Yin] Thm 1 for ``K = ∞``, the exact lookahead
chain (SPEC L) for any ``K``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from array_api_compat import array_namespace

from speculab import kernels
from speculab.counts import Estimate, Expected
from speculab.methods.base import RoundLaw, check_lookahead, param, register
from speculab.methods.chain import ChainMethod, Rule, chain_law
from speculab.rows import Row
from speculab.theory.lookahead import iid_tokens_per_round
from speculab.theory._checks import takes_instance

__all__ = ["SD", "sd_rule"]


def sd_rule(p, q) -> Rule:
    r"""Speculative decoding's rule: :math:`b = \min(1, q/p)`, :math:`P = [q - p]_+` (array API).

    Rows whose residual has no mass (``p = q`` up to round-off: nothing is ever
    rejected there) fall back to ``q``.
    """
    return Rule(kernels.sd_acceptance(p, q), kernels.sd_rejection(p, q))


@register
@dataclass(frozen=True)
class SD(ChainMethod):
    """Speculative decoding, [Yin] Algorithm 1: ``b = min(1, q/p)``, ``P = [q − p]_+``.

    Args:
      K: lookahead (drafts per round). ``None`` means ``K = ∞`` (draft to the
        end, as in [Yin]'s theory). With finite ``K``, when all ``K`` drafts are
        accepted a bonus token is drawn from the target's next distribution,
        which the same oracle call already computed.

    Example:
      >>> from speculab.theory import MarkovInstance
      >>> inst = MarkovInstance.context_free([0.5, 0.5], [0.8, 0.2], T=10)
      >>> round(SD().expected(inst).rejections, 12)   # [Yin] Thm 1: T · TV(p, q)
      3.0
    """

    name: ClassVar[str] = "sd"
    K: int | None = param(None, help="lookahead: drafts per round (default ∞, to the end)", type=int)

    def __post_init__(self):
        check_lookahead(self.K)

    @property
    def unbiased(self) -> bool:
        return True

    def rule(self, p, q) -> Rule:
        return sd_rule(p, q)

    def round_law(self, p, q, x, *, bonus: bool) -> RoundLaw:
        r"""The chain law of :func:`sd_rule` in closed form, in a third of the generic law's passes over the
        vocabulary (six, not seventeen: this is the real-model loop's hot path). ``b = min(1, q/p)`` is needed
        only at the drafts, the refusal probability :math:`\sum (1 - b)\,p = \mathrm{TV}(p, q)` is the residual's
        mass :math:`\sum (q - p)_+` (equal for laws that sum to 1; a few ulps apart in floating point), and the
        correction weights are the residual's unnormalised :math:`(q - p)_+` (``q`` where it has no mass, as in
        the rule). ``tests/test_methods.py`` holds it to :func:`~speculab.methods.chain.chain_round_law` of
        :func:`sd_rule`.
        """
        xp = array_namespace(p, q)
        qs = q[..., :-1, :]
        w = kernels.excess(qs, p)  # (..., M, L, V)
        mass = xp.sum(w, axis=-1)
        weights = w + xp.astype(mass <= 0, w.dtype)[..., None] * qs  # exact: adds 0.0 where the residual has mass
        a = kernels.sd_acceptance(kernels.gather(p, x), kernels.gather(qs, x))  # elementwise: b at the drafts only
        return chain_law(a, mass, weights, q, bonus=bonus)

    @takes_instance
    def expected(self, inst) -> Expected:
        from speculab.theory.lookahead import lookahead_counts

        source = "[Yin] Thm 1" if self.K is None or self.K >= inst.T else "exact lookahead counts (SPEC L)"
        return Expected.from_counts(lookahead_counts(inst, self.K), source=source)

    def compare_rows(self, ctx) -> list:
        rej = Estimate.of(ctx.result.counts.rejections)
        t1 = ctx.t1
        if self.K is None:
            return [
                Row(
                    "E[N_rej]  (Thm 1: Σ_n E_q[TV(p_n,q_n)])",
                    t1.mean,
                    rej.mean,
                    t1.se,
                    rej.se,
                    note="two-sample: target samples vs SD runs",
                )
            ]
        bound = Row(
            "E[N_rej] ≤ T1 (finite K has bonus positions)",
            t1.mean,
            rej.mean,
            t1.se,
            rej.se,
            note="one-sided: measured ≤ theory",
            upper_bound=True,
        )
        tv_all = ctx.tv_along_result()
        if tv_all.size == 0:  # nothing was drafted (e.g. prompt lookup without a match): no acceptance rate to model
            return [bound]
        alpha = 1.0 - float(tv_all.mean())
        per_round = iid_tokens_per_round(alpha, self.K)
        tokens = float(ctx.result.counts.tokens.mean())
        calls = Estimate.of(ctx.result.counts.oracle_calls)
        return [
            Row(
                f"target calls per run (Leviathan i.i.d., α={alpha:.3f})",
                tokens / per_round,
                calls.mean,
                0.0,
                calls.se,
                note="model check: assumes i.i.d. acceptance, no horizon",
            ),
            bound,
        ]
