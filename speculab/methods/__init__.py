"""Decoding methods, one module each, behind one protocol (:mod:`speculab.methods.base`).

Every method is a small frozen dataclass (``SD(K=4)``, ``BatchSD(M=4)``,
``Biased(eps=0.1)``, …) that owns its verification rule (array API), its
exact expectations and its registration; ``simulate``,
``decode``, ``compare`` and the CLI find it through :data:`REGISTRY`.
Convention: ``p`` = draft, ``q`` = target.

Adding a method is one module plus one line below (see the README, "Add your own method").
"""

from speculab.methods.base import REGISTRY, Method, RoundLaw, build, get, names, param, register, sample_round
from speculab.methods.capabilities import has
from speculab.methods.chain import ChainMethod, Rule
from speculab.methods.probe import RoundProbe

# The registry: importing a method module registers it (its @register decorator), one line each.
from speculab.methods.autoregressive import Autoregressive
from speculab.methods.sd import SD
from speculab.methods.batch import BatchSD
from speculab.methods.rejection import RejectionDecoding
from speculab.methods.biased import Biased
from speculab.methods.fuzzy import Fuzzy
from speculab.methods.typical import Typical
from speculab.methods.sprinter import Sprinter
from speculab.methods.specdecpp import SpecDecPP
from speculab.methods.block import BlockVerification
from speculab.methods.optimal import OptimalMultiDraft
from speculab.methods.rrs import RRS
from speculab.methods.traversal import Traversal
from speculab.methods.tree import Tree
from speculab.methods.greedy_draft import GreedyDraft
from speculab.methods.synthetic import Synthetic

__all__ = [
    "Method",
    "RoundLaw",
    "ChainMethod",
    "Rule",
    "has",
    "REGISTRY",
    "register",
    "get",
    "names",
    "build",
    "param",
    "sample_round",
    "RoundProbe",
    "Autoregressive",
    "SD",
    "BatchSD",
    "RejectionDecoding",
    "Biased",
    "Fuzzy",
    "Typical",
    "Sprinter",
    "SpecDecPP",
    "BlockVerification",
    "OptimalMultiDraft",
    "RRS",
    "Traversal",
    "Tree",
    "GreedyDraft",
    "Synthetic",
]
