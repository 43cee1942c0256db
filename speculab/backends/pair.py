"""Draft/target model pairs: loading, tokenizer checks, vocabulary cropping, the offline ``"tiny"`` pair."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from speculab.backends.models import HFModel, HistoryModel, NGramModel

__all__ = [
    "ModelPair",
    "check_pair",
    "load_pair",
    "resolve_device",
    "TINY_DIR",
    "ngram_draft",
    "training_ngram_draft",
    "default_prompts",
]

#: Where the shipped tiny pair lives (``speculab models build-tiny`` writes it).
TINY_DIR = Path(__file__).parent / "tiny"


@dataclass
class ModelPair:
    """A draft ``p`` and a target ``q`` over one tokenizer.

    Attributes:
      draft, target: adapters (:class:`HFModel` or :class:`NGramModel`).
      tokenizer: the shared Hugging Face tokenizer.
      vocab_size: the shared vocabulary (logits of both models are cropped to it).
      name: a label for reports.
    """

    draft: Any
    target: Any
    tokenizer: Any
    vocab_size: int
    name: str = ""

    @property
    def device(self) -> torch.device:
        return self.target.device

    def synchronize(self) -> None:
        """Wait until the models' device has finished the work queued on it (CUDA; nothing elsewhere): what a
        clock reading must follow to time that work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @property
    def eos_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int | None:
        lengths = [m.max_length for m in (self.draft, self.target) if m.max_length]
        return min(lengths) if lengths else None


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` → CUDA when present, else CPU; any other name must be a torch device this machine has."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N' (a torch device); got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device {device!r}: CUDA is not available here (torch {torch.__version__}); use 'cpu' or 'auto'"
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if dev.type not in ("cpu", "cuda") and not _available(dev.type):
        why = "it holds no values to decode with" if dev.type == "meta" else f"torch {torch.__version__} has none here"
        here = "'auto', 'cpu'" + (", 'cuda'" if torch.cuda.is_available() else "")
        raise ValueError(f"device must be one this machine has ({here}); got {device!r}: {why}")
    return dev


def _available(kind: str) -> bool:
    """Whether torch has a device of ``kind`` here (``mps``, ``xpu``, …: its backend says so)."""
    is_available = getattr(getattr(torch, kind, None), "is_available", None)
    return callable(is_available) and bool(is_available())


#: The weights' dtypes a pair loads in, by name (``p`` and ``q`` are formed in float64 from the logits whatever these).
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def as_model_dtype(dtype) -> torch.dtype:
    """``dtype`` as one of :data:`DTYPES` (a ``torch.dtype`` or its name); anything else is refused by name."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    names = ", ".join(f"torch.{name}" for name in DTYPES)
    raise ValueError(f"dtype must be a floating dtype the models can load in ({names}, or its name); got {dtype!r}")


def _path(name: str) -> str:
    """Model path or hub name; ``tiny-draft`` / ``tiny-target`` are the shipped pair. A local path (one that exists,
    or is written as a path: absolute, ``./``, ``../``, ``~``) must be a model folder with a ``config.json``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a model must be named by a hub name or a local folder; got {name!r}")
    if name in ("tiny-draft", "tiny-target"):
        folder = TINY_DIR / name.split("-")[1]
        if not (folder / "config.json").exists():
            raise ValueError(f"the tiny pair is not built at {TINY_DIR}; run `speculab models build-tiny`")
        return str(folder)
    local = Path(name).expanduser()
    if local.exists() or local.is_absolute() or name.startswith(("./", "../", "~")):
        if not local.is_dir():
            raise ValueError(f"no model folder at {name}" + (" (a file, not a folder)" if local.exists() else ""))
        if not (local / "config.json").is_file():
            raise ValueError(f"{name} is not a model folder: it has no config.json (save one with save_pretrained)")
        return str(local)
    return name


#: Seconds to wait for the hub's host before a model that is neither a local folder nor in the cache is refused.
HUB_TIMEOUT = 3.0


def _hub_reachable() -> bool:
    """Whether the Hugging Face hub answers an HTTP(S) request within :data:`HUB_TIMEOUT` seconds — any answer, an
    error status too — through the proxy the environment names, as transformers would reach it. A host that accepts
    the connection and then fails it (a TLS handshake that a firewall or a captive portal breaks) is unreachable, as
    is one that refuses it or stays silent."""
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    try:
        urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=HUB_TIMEOUT).close()
    except urllib.error.HTTPError:
        return True  # the hub answered, with an error status: it is there
    except (OSError, ValueError):  # URLError, a TLS failure, a time-out; ValueError: an endpoint that is no URL
        return False
    return True


def _cached_only(path: str) -> bool:
    """For a hub name: whether to load it from the local cache only (the hub is offline or unreachable and the
    cache has it). Refused at once, in one line, when neither the cache nor the hub has it — rather than after
    transformers' retries (about 50 s offline). A local folder: ``False``."""
    from huggingface_hub import constants, try_to_load_from_cache

    if Path(path).is_dir():
        return False
    cached = isinstance(try_to_load_from_cache(path, "config.json"), str)
    if constants.HF_HUB_OFFLINE or not _hub_reachable():
        if not cached:
            where = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"{constants.ENDPOINT} cannot be reached"
            raise ValueError(
                f"{path!r} is not a local model folder nor in the Hugging Face cache ({constants.HF_HUB_CACHE}), and "
                f"{where}: download it where there is a network, or give a local folder"
            )
        return True
    return False


def _hub(what: str, name: str, load):
    """``load()``, with a failure to find or read the model (a hub name offline, a folder missing its weights or
    tokenizer) said in one line that names it. Quiet: transformers' "Loading weights" bars are off while it loads."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return load()
    except (OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(
            f"could not load the {what} of {name!r} (a local model folder, or a hub name — the hub may "
            f"be unreachable): {first}"
        ) from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _load_tokenizer(path: str, cached_only: bool = False):
    from transformers import AutoTokenizer

    return _hub(
        "tokenizer",
        path,
        lambda: AutoTokenizer.from_pretrained(path, trust_remote_code=False, local_files_only=cached_only),
    )


def check_pair(pair) -> ModelPair:
    """``pair``, refused unless a :class:`ModelPair` — a pair's name (``"tiny"``) is refused, naming
    :func:`load_pair`, which loads it (once: a call that took a name would load the models again each time)."""
    if not isinstance(pair, ModelPair):
        hint = f"; load it first: pair = load_pair({pair!r})" if isinstance(pair, str) else ""
        raise ValueError(
            f"pair must be a ModelPair (speculab.backends.load_pair); got {type(pair).__name__} {pair!r}{hint}"
        )
    return pair


def _same_tokenizer(a, b) -> bool:
    return a.get_vocab() == b.get_vocab() and a.eos_token_id == b.eos_token_id


def _load_model(
    path: str, device: torch.device, dtype: torch.dtype, allow_pickle: bool = False, cached_only: bool = False
):
    from transformers import AutoModelForCausalLM

    model = _hub(
        "model",
        path,
        lambda: AutoModelForCausalLM.from_pretrained(
            path,
            dtype=dtype,
            use_safetensors=None if allow_pickle else True,
            trust_remote_code=False,
            local_files_only=cached_only,
        ),
    )
    return model.to(device).eval()


def _embedding_rows(model) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def load_pair(
    draft: str | Any = "tiny",
    target: str | None = None,
    *,
    device: str | torch.device = "auto",
    dtype: torch.dtype = torch.float32,
    use_cache: bool = True,
    allow_pickle: bool = False,
) -> ModelPair:
    """Load a draft/target pair of causal LMs that share a tokenizer.

    Args:
      draft: a Hugging Face hub name or local path of the draft model, ``"tiny"``
        for the offline default pair (then ``target`` is omitted), or a ready
        adapter such as an :class:`NGramModel` (then ``target`` names the target).
      target: hub name or local path of the target model.
      device: ``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"``, …
      dtype: model dtype, one of :data:`DTYPES` or its name; float32 by default (greedy equivalence is exact only
        in fp32).
      use_cache: use KV caches (``False`` recomputes every prefix — for checking).
      allow_pickle: also load weights stored as pickles (``pytorch_model.bin``), which can run code when read;
        by default only safetensors weights load. Remote code is never run.

    Refuses pairs whose tokenizers differ; vocabularies that differ only by padding
    rows in the embedding (e.g. Pythia's 50304 rows for 50277 tokens) are cropped
    to the tokenizer's ids.
    """
    dev = resolve_device(device)
    dtype = as_model_dtype(dtype)
    if isinstance(draft, str) and draft == "tiny":
        if target not in (None, "tiny"):
            raise ValueError("'tiny' names the whole pair; give no target with it")
        draft, target = "tiny-draft", "tiny-target"
    if target is None:
        raise ValueError("target must name a model (hub name or local path)")
    if target == "tiny":
        target = "tiny-target"  # e.g. an n-gram draft with the tiny target
    t_path = _path(target)
    t_cached = _cached_only(t_path)
    tokenizer = _load_tokenizer(t_path, t_cached)
    vocab = len(tokenizer)
    target_model = _load_model(t_path, dev, dtype, allow_pickle, t_cached)
    if _embedding_rows(target_model) < vocab:
        raise ValueError(
            f"target {target!r} has {_embedding_rows(target_model)} output rows for a {vocab}-token tokenizer"
        )
    if isinstance(draft, str):
        d_path = _path(draft)
        d_cached = _cached_only(d_path)
        d_tokenizer = _load_tokenizer(d_path, d_cached)
        if not _same_tokenizer(tokenizer, d_tokenizer):
            raise ValueError(
                f"draft {draft!r} and target {target!r} use different tokenizers "
                f"({len(d_tokenizer)} vs {vocab} tokens); speculative decoding needs one shared vocabulary"
            )
        draft_model = _load_model(d_path, dev, dtype, allow_pickle, d_cached)
        if _embedding_rows(draft_model) < vocab:
            raise ValueError(
                f"draft {draft!r} has {_embedding_rows(draft_model)} output rows for a {vocab}-token tokenizer"
            )
        draft_adapter = HFModel(draft_model, vocab, use_cache=use_cache)
    else:
        draft_adapter = draft
        on_host = isinstance(draft_adapter, HistoryModel)  # computed from the token history on the host, any target
        if not on_host and hasattr(draft_adapter, "device") and torch.device(draft_adapter.device).type != dev.type:
            raise ValueError(f"the draft adapter is on {draft_adapter.device}; the target will be on {dev}")
        if getattr(draft_adapter, "vocab_size", None) != vocab:
            raise ValueError(
                f"draft adapter has vocab_size {getattr(draft_adapter, 'vocab_size', None)}; the target's tokenizer "
                f"has {vocab}"
            )
    name = (
        "tiny" if target == "tiny-target" else f"{draft if isinstance(draft, str) else type(draft).__name__} → {target}"
    )
    return ModelPair(draft_adapter, HFModel(target_model, vocab, use_cache=use_cache), tokenizer, vocab, name)


def ngram_draft(tokenizer, texts: list[str], n: int = 3, *, alpha: float = 0.1) -> NGramModel:
    """An n-gram draft model counted on ``texts`` (a list of strings) tokenized with the pair's tokenizer."""
    if isinstance(texts, str):
        raise ValueError(
            "texts must be a list of strings (one per document); got one string, which would be read "
            "one character per document"
        )
    texts = list(texts)  # read once: a generator is checked and counted alike
    bad = [type(t).__name__ for t in texts if not isinstance(t, str)]
    if bad:
        raise ValueError(f"texts must be a list of strings (one per document); got a {bad[0]} among them")
    ids: list[int] = []
    for t in texts:
        ids.extend(tokenizer.encode(t))
        if tokenizer.eos_token_id is not None:
            ids.append(tokenizer.eos_token_id)
    return NGramModel(ids, n, len(tokenizer), alpha=alpha)


def training_ngram_draft(tokenizer, n: int = 3, *, alpha: float = 0.01) -> NGramModel:
    """An n-gram draft fitted on the tiny pair's training text (about 2.8 million tokens, ~10 s).

    The text is rebuilt as ``speculab models build-tiny`` built it (docstrings of the
    installed standard library, numpy and scipy, :func:`speculab.backends.tiny.build.corpus`);
    with other versions of those than the shipped pair's it differs (the draft is still
    exact: its ``p`` is whatever it counted). ``provenance`` on the result says whether the
    text's SHA-256 equals the one in the pair's ``metrics.json``.
    """
    import json

    import numpy as np

    from speculab.backends.tiny.build import BuildConfig, corpus

    train, _, prov = corpus(BuildConfig().seed)
    ids = tokenizer(train)["input_ids"]
    eos = tokenizer.eos_token_id
    flat = np.concatenate([np.asarray(t + ([eos] if eos is not None else []), dtype=np.int64) for t in ids])
    model = NGramModel(flat, n, len(tokenizer), alpha=alpha)
    shipped = json.loads((TINY_DIR / "metrics.json").read_text())["corpus"]["sha256"]
    model.provenance = {
        "tokens": int(flat.size),
        "sha256": prov["sha256"],
        "same_as_shipped_pair": prov["sha256"] == shipped,
    }
    return model


def default_prompts() -> list[str]:
    """Held-out prompts shipped with the tiny pair (openings of held-out docstrings)."""
    import json

    path = TINY_DIR / "prompts.json"
    if not path.exists():
        raise ValueError(f"no prompts at {path}; run `speculab models build-tiny` or pass prompts")
    return json.loads(path.read_text())
