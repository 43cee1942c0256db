"""The one check every function of a Markov instance makes first: that it was given one."""

from __future__ import annotations

import functools
import inspect
from typing import Callable, TypeVar

from speculab.theory.instance import MarkovInstance

__all__ = ["takes_instance"]

F = TypeVar("F", bound=Callable)

#: What a refusal says, before the type it got.
MESSAGE = "inst must be a MarkovInstance (from MarkovInstance.random or .load)"


def takes_instance(f: F) -> F:
    """Refuse, with a one-line ``ValueError`` naming it, an argument ``inst`` of ``f`` that is not a
    :class:`~speculab.theory.MarkovInstance` (a string or an array would otherwise fail deep inside, as an
    ``AttributeError``). The signature, name and docstring are ``f``'s.

    Example:
      >>> @takes_instance
      ... def horizon(inst):
      ...     return inst.T
      >>> horizon("inst.npz")
      Traceback (most recent call last):
      ...
      ValueError: inst must be a MarkovInstance (from MarkovInstance.random or .load); got str
    """
    at = list(inspect.signature(f).parameters).index("inst")
    missing = object()

    @functools.wraps(f)
    def checked(*args, **kwargs):
        inst = args[at] if len(args) > at else kwargs.get("inst", missing)
        if inst is not missing and not isinstance(inst, MarkovInstance):  # missing: f's own TypeError
            raise ValueError(f"{MESSAGE}; got {type(inst).__name__}")
        return f(*args, **kwargs)

    return checked
