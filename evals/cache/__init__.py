"""The cache-drop track of evals: how a cache policy is scored on recorded agent trajectories.

- ``evaluator``: ``Replay`` scores a ``PolicySpec`` on tasks with the model (exact cost from the
  engine's accounting, probes answered under the cache state the policy produced).
- ``fidelity``: ``ProxyReplay``, the zero-forward fidelity (exact cost, pass predicted from which
  evidence stays attended), and its check against the model.
- ``probes`` (how a probe is put to the model), ``probe_calibration`` (does a probe format separate
  evidence kept from evidence dropped; ``python -m evals.cache.probe_calibration_cli``),
  ``diagnostics`` (schedules that remove or keep only a probe's evidence).
- ``cost`` (token usage times a rate table), ``scoring`` (answer matching, pass rates).
- ``live``: live-agent episodes against an OpenAI-compatible endpoint; ``cli``: ``akv eval``.

The task suites these score are ``evals.tasks``; the survival track is ``evals.survival``.
"""
