"""Which module a decoding cache belongs to.

A cache holds state computed with one module's weights (a Weird-attention scan cache even
holds its layer's ``log_w``), so stepping another module of the same class over it gives
wrong outputs without an error.  :func:`own` stamps a cache with a weak reference to the
module that made it, and :func:`check_owner` refuses any other module: one attribute read
and one identity test per call, no tensor work.

The stamp survives what caches support: in-place ``reorder`` and ``start_document``, and
``copy.copy`` / ``copy.deepcopy`` (a weak reference is copied as itself, so a copied cache
still belongs to its module; a deep copy of the *module* is another module and refuses the
original's caches).
"""

from __future__ import annotations

import weakref

OWNER = "_owner"


def own(cache, module):
    """Stamp ``cache`` as made by ``module``; returns ``cache``."""
    setattr(cache, OWNER, weakref.ref(module))
    return cache


def owner_of(cache):
    """The module whose ``init_cache`` made ``cache``, or None (none, or gone)."""
    ref = getattr(cache, OWNER, None)
    return None if ref is None else ref()


def check_owner(cache, module) -> None:
    """ValueError, naming ``module``'s class, unless ``cache`` was made by ``module``'s
    ``init_cache``."""
    ref = getattr(cache, OWNER, None)
    if ref is None or ref() is not module:
        name = type(module).__name__
        raise ValueError(f"this cache was made by another {name} (or not by init_cache()); "
                         f"a cache decodes only with the {name} whose init_cache() made it")
