"""The search: recursive self-improvement of policy programs, and its runs.

Nothing is imported here (the modules load Optuna, MLflow and the engine on demand); use them
directly:

- ``rsi.cache``: the cache track (``rsi.cache.search.Search`` runs a config of ``rsi.cache.config`` in a
  run directory: experts, seeds and proposals, the held-out headline, headroom and ablation; its
  archive and metrics, ``rsi.cache.archive`` and ``rsi.cache.metrics``; its executors, report and
  export);
- ``rsi.survival``: the tool-gap survival track (``rsi.survival.evolve``, ``rsi.survival.search``);
- shared by both: ``rsi.loop`` (the generation loop and the tuning-only arm), ``rsi.proposers``,
  ``rsi.tuning`` (the Optuna tuner: one two-stage study per program), ``rsi.archive`` (the record and
  archive each track types with its metrics) and ``rsi.pareto``, ``rsi.store`` and ``rsi.rundir`` (the
  evaluation store and the run directory's atomic files), ``rsi.tracking`` (MLflow), ``rsi.reporting``
  (what both reports draw), ``rsi.dashboard``, ``rsi.cli`` (``akv``).

docs/architecture.md maps the packages and the data flow.
"""
