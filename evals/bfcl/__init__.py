"""BFCL v4 multi-turn (``base``, ``long_context``) as suites of the project, judged by BFCL's checker.

Public surface::

    from evals.bfcl import load_bfcl_suite, judge, summarize
    tasks = load_bfcl_suite("bfcl-long", "heldout")      # list[Task]; needs bfcl-eval (make bfcl)
    results = judge(engine, tasks, [PolicySpec("full"), PolicySpec("rolling_drop")])
    rows = summarize(results, ["full", "rolling_drop"])  # turn / task accuracy, retention, 95% intervals
    episodes = run_bfcl_live(remote_engine, [(None, "full")], tasks, "runs/x")  # live: the model's own calls
    probed = as_probe_task(tasks[0])                       # each turn's evidence as probes (turn_evidence)

Modules: :mod:`~evals.bfcl.data` (BFCL's files -> tasks, the split), :mod:`~evals.bfcl.calls`
(model replies parsed into calls, never evaluated), :mod:`~evals.bfcl.backends` (the backends run
by the project), :mod:`~evals.bfcl.judge` (turn by turn, BFCL's checker; replies batched across
jobs), :mod:`~evals.bfcl.responders` (who writes a reply), :mod:`~evals.bfcl.judgement` (its options
and results), :mod:`~evals.bfcl.live` (the model acting through an endpoint, as BFCL runs it),
:mod:`~evals.bfcl.export` (its episodes as agent logs), :mod:`~evals.bfcl.store` (results on disk
as they finish), :mod:`~evals.bfcl.report`, :mod:`~evals.bfcl.evidence` (each turn's evidence
among the earlier outputs; the turns as probes), :mod:`~evals.bfcl.controls` (``drop_evidence`` and
``drop_other`` per turn, in the judge), :mod:`~evals.bfcl.headroom` (what schedules cost on a suite,
no model).
bfcl-eval is imported only when a BFCL suite is used; see docs/tasks.md, "BFCL multi-turn".
"""

from evals.bfcl.backends import Backends, Executed
from evals.bfcl.calls import Call, ParsedCalls, Refused, parse_python_calls, parse_reply
from evals.bfcl.controls import TurnControl, TurnDrops, turn_drops
from evals.bfcl.data import BFCL_VERSION, INSTALL_COMMAND, SPLIT_RULE, SUITES, Entry, load_bfcl_suite, split_of
from evals.bfcl.evidence import TurnEvidence, ValueMatch, as_probe_task, evidence_turns, turn_evidence
from evals.bfcl.export import export_episodes
from evals.bfcl.headroom import SuiteHeadroom, keep_evidence_schedule, suite_headroom
from evals.bfcl.judge import judge, judge_task
from evals.bfcl.judgement import JudgeConfig, TaskJudgement, TurnResult
from evals.bfcl.live import BfclLiveConfig, LiveEpisode, live_summary, run_bfcl_episode, run_bfcl_live
from evals.bfcl.report import summarize
from evals.bfcl.responders import GoldResponder
from evals.bfcl.store import ResultLog

__all__ = [
    "BFCL_VERSION",
    "INSTALL_COMMAND",
    "SPLIT_RULE",
    "SUITES",
    "Backends",
    "BfclLiveConfig",
    "Call",
    "Entry",
    "Executed",
    "GoldResponder",
    "JudgeConfig",
    "LiveEpisode",
    "ParsedCalls",
    "Refused",
    "ResultLog",
    "SuiteHeadroom",
    "TaskJudgement",
    "TurnControl",
    "TurnDrops",
    "TurnEvidence",
    "TurnResult",
    "ValueMatch",
    "as_probe_task",
    "evidence_turns",
    "export_episodes",
    "judge",
    "judge_task",
    "keep_evidence_schedule",
    "live_summary",
    "load_bfcl_suite",
    "parse_python_calls",
    "parse_reply",
    "run_bfcl_episode",
    "run_bfcl_live",
    "split_of",
    "suite_headroom",
    "summarize",
    "turn_drops",
    "turn_evidence",
]
