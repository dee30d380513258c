"""The tool-gap survival track of the search: survival programs evolved through the same loop as
cache policies (``akv survival-search``).

- ``search``: one Optuna study per built-in family on the simulator (``--evolve`` for evolution);
  ``evolve``: proposer-driven evolution of survival programs (cascade, tuned baselines, paired
  intervals, held-out traces, confirmation by real-engine replay).
- ``config`` (the evolution's YAML, checked), ``confirm`` (``--confirm-replay``: the best on
  held-out replayed on the real engine), ``cli`` (the commands; the only module here that prints).
- ``proposer`` (mutation and LLM proposers of survival programs), ``archive`` (candidates and the
  front over resume TTFT p95 vs recompute), ``report``, ``tracking`` (MLflow), ``export``
  (``akv export`` of a survival program).

The cache track's search is ``rsi.cache.search`` and the modules beside it.
"""
