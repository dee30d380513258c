"""The engine's KV bookkeeping: which KV exists, where it lives, and what a request reuses.

- :mod:`engine.cache.radix`: the history-aware radix tree (LRU and drop-aware eviction, host tier).
- :mod:`engine.cache.kvstore`: the payloads tree nodes hold (tensors, or sizes only for dry runs).
- :mod:`engine.cache.plan`: a request planned against the tree (reuse / compute / skip, exact
  usage) and committed to it.
- :mod:`engine.cache.accounting`: dry-run usage, the same decisions as the engine without a model.
- :mod:`engine.cache.session_accountant`: a whole session compiled once, accounted request by request.

Nothing here runs a model; the engine (:mod:`engine.engine`) fills the payloads.
"""
