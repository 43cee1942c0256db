"""Real draft/target language models: loading, decoding with KV caches, per-step records.

Convention: ``p`` = draft, ``q`` = target. Requires the ``torch`` extra
(``pip install torch==2.13.0 transformers`` on CPU machines, or your own torch).
"""

from speculab.backends.decode import KIND_NAMES, DecodeResult, RoundInfo, RoundRecord, RunRecord, decode
from speculab.backends.models import HFModel, HistoryModel, NGramModel, PromptLookupModel
from speculab.backends.pair import ModelPair, load_pair, ngram_draft, resolve_device
from speculab.methods.probe import RoundProbe
from speculab.backends.warp import Sampling

__all__ = [
    "DecodeResult",
    "HFModel",
    "KIND_NAMES",
    "ModelPair",
    "NGramModel",
    "HistoryModel",
    "PromptLookupModel",
    "RoundInfo",
    "RoundProbe",
    "RoundRecord",
    "RunRecord",
    "Sampling",
    "decode",
    "load_pair",
    "ngram_draft",
    "resolve_device",
]
