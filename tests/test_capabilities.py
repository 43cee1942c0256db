"""Capabilities beyond the core protocol: declared by defining their members, checked by one function."""

import dataclasses
from typing import ClassVar

import pytest

from speculab.methods import REGISTRY, SD, BatchSD, Sprinter, SpecDecPP
from speculab.methods.capabilities import (
    AdaptiveLength,
    DraftHead,
    DraftLaw,
    PositionLaw,
    RootTable,
    RoundProbing,
    Slotwise,
    TreeDrafting,
    has,
    head_of,
)

CAPABILITIES = (Slotwise, RootTable, PositionLaw, AdaptiveLength, DraftHead, RoundProbing, TreeDrafting, DraftLaw)

#: Each registered method's capabilities, written by hand (docs/methods.md carries the same table).
EXPECTED = {
    "ar": set(),
    "sd": {Slotwise},
    "batch": {Slotwise, RootTable},
    "rejection": {Slotwise},
    "biased": {Slotwise},
    "fuzzy": {Slotwise},
    "typical": {Slotwise},
    "sprinter": {PositionLaw, DraftHead},
    "specdecpp": {AdaptiveLength, DraftHead},
    "block": {RoundProbing},
    "optimal-batch": {Slotwise, RootTable},
    "rrs": {TreeDrafting},
    "traversal": {TreeDrafting},
    "greedy-draft": {Slotwise, DraftLaw},
    "synthetic": {DraftLaw},
}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_registered_method_has_the_capabilities_it_declares(name):
    cls = REGISTRY[name]
    assert {c for c in CAPABILITIES if has(cls, c)} == EXPECTED[name]


def test_a_capability_needs_every_member_and_a_member_set_to_none_opts_out():
    @dataclasses.dataclass(frozen=True)
    class HalfAHead(SD):  # a head's reading without its stopping rule or its parameter: not a DraftHead
        head_reads: ClassVar[str] = "token"

        def read_head(self, score, uniform):
            return score

    @dataclasses.dataclass(frozen=True)
    class NoRoot(BatchSD):
        root_outcome = None

    assert not has(HalfAHead, DraftHead) and not has(HalfAHead(), DraftHead)
    assert has(BatchSD(2), RootTable) and not has(NoRoot(2), RootTable) and has(NoRoot(2), Slotwise)


def test_a_head_is_read_only_from_a_method_that_has_one():
    """``head_of``: the head a method runs on the draft's hidden states — none for a method without the capability,
    none for one that has it but was given no trained head (an oracle, a function of the Markov instance)."""
    assert head_of(SD()) is None
    assert head_of(SpecDecPP(0.5)) is None and head_of(Sprinter(0.9, 0.1)) is None

    class Head:
        reads_hidden_states = True

        def __call__(self, hidden):
            return 0.5

    head = Head()
    assert head_of(SpecDecPP(0.5, head=lambda t, a, x: a)) is None  # a function of (t, prev, x) reads no hidden state
    assert head_of(Sprinter(verifier=head)) is head


def test_the_documented_table_is_the_code():
    """docs/methods.md's table of capabilities: each row's members are the protocol's, and its methods those of the
    registry that have it (``every ChainMethod``: the Algorithm 2 family, each a ChainMethod)."""
    import re
    from pathlib import Path

    from speculab.methods import ChainMethod, capabilities

    text = (Path(__file__).resolve().parents[1] / "docs" / "methods.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \| (.+?) \| .+ \|$", text, re.M)
    assert [name for name, _, _ in rows] == [c.__name__ for c in CAPABILITIES]
    for name, members, who in rows:
        capability = getattr(capabilities, name)
        assert sorted(re.findall(r"`(\w+)`", members)) == capabilities._members(capability), name
        have = sorted(cls.__name__ for cls in REGISTRY.values() if has(cls, capability))
        if who == "every `ChainMethod`":
            assert have == sorted(cls.__name__ for cls in REGISTRY.values() if issubclass(cls, ChainMethod)), name
        else:
            assert sorted(re.findall(r"`(\w+)`", who)) == have, name


def test_a_root_table_is_a_law_to_the_precision_of_its_float():
    """``root_table`` accepts a float32 table (the JAX engine's) whose rows miss 1 by float32 rounding, and refuses
    a float64 one that misses it by 1e-8 — the tolerance is ``1e-9`` or ``64 V`` rounding units of the table's float,
    whichever is larger."""
    import numpy as np

    from speculab.methods.capabilities import root_table

    class Table:
        def __init__(self, table):
            self.table = table

        def root_outcome(self, p, q):
            return self.table

    p = np.full((2, 3), 1 / 3)
    good32 = np.full((2, 6), 1 / 6, dtype=np.float32)
    good32[:, 0] += np.float32(3e-7)  # 3e-7 off: within 64 · 3 · 1.2e-7
    assert root_table(Table(good32), p.astype(np.float32), p.astype(np.float32)) is good32
    bad64 = np.full((2, 6), 1 / 6)
    bad64[1, 0] += 1e-8
    with pytest.raises(ValueError, match="non-negative rows summing to 1"):
        root_table(Table(bad64), p, p)
