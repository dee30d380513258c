"""The cache track of the search: which history the model stops attending to, and when positions move.

Its candidates are ``archive``'s (``Candidate``, ``Archive``: the shared ``rsi.archive`` record and archive
with ``metrics``' ``Metrics``, a candidate's cost and pass rate aggregated from task results).

``rsi.cache.search.Search`` runs a config (``config``) in a run directory through the shared
generation loop (``rsi.loop``), with its parts passed explicitly: the model evaluations and their
budget ledger (``evaluations``), experts and tuned experts (``expert_tuning``), the evaluation cascade
(``cascade``, over the screen of ``tuning``), each program's tuning (``program_tuning``, ``tuning``), the
proposer's feedback (``feedback``), the tasks (``task_sets``), the outputs (``outputs``) and the
frozen picks' held-out scoring (``protocol``); behaviour fingerprints (``fingerprint``), diversity
niches (``niches``), the tuning-only arm (``ablation``), the held-out headroom (``headroom``) and the
headline with paired intervals (``headline``; ``pooling`` pools several runs'). ``executors`` run
model evaluations (in process, a local server, Ray replicas), ``progress`` draws the bar, ``report``
and ``proposer_report`` write the HTML report, ``export`` writes a chosen policy as a module.

Nothing is imported here (the modules load Optuna, MLflow and the engine on demand).
"""
