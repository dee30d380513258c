"""The search: recursive self-improvement of policy programs, and its runs.

Nothing is imported here (the modules load Optuna, MLflow and the engine on demand); use them
directly:

- ``rsi.search``: ``Search`` runs a config (``rsi.config``) in a run directory: seeds and
  proposals (``rsi.proposers``), Optuna tuning behind the evaluation cascade (``rsi.tuning``),
  the archive and its Pareto front (``rsi.archive``, ``rsi.pareto``, ``rsi.niches``), tuned
  experts (``rsi.expert_tuning``), the held-out headline with paired intervals (``rsi.headline``).
- ``rsi.executors``: where model evaluations run (in process, a local server, Ray replicas).
- ``rsi.store``, ``rsi.rundir``: the evaluation store and the run directory's atomic files;
  ``rsi.tracking``: MLflow; ``rsi.report``, ``rsi.dashboard``: the HTML report and dashboard.
- ``rsi.survival.evolve``, ``rsi.survival.search``: the same loop for tool-gap survival programs.
- ``rsi.export``: a run's chosen policy as a standalone module; ``rsi.cli``: the ``akv`` command.

docs/architecture.md maps the packages and the data flow.
"""
