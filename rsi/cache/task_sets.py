"""The tasks of a search, read from its suite (``data``): the train tasks the model evaluates, the
guide tasks the proposer reads at zero forwards (``data.guide_tasks``: train-split tasks after the
evaluated ones) and the held-out tasks (``data.heldout_tasks`` after ``data.heldout_offset``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from evals.tasks import load_suite, select_tasks
from evals.tasks.logs import is_log_task
from evals.tasks.schema import Task
from rsi.cache.config import SearchConfig
from rsi.config import ConfigError

log = logging.getLogger("akv.search")


@dataclass(frozen=True)
class SearchTasks:
    train: list[Task]
    guide: list[Task]
    heldout: list[Task]


def load_tasks(config: SearchConfig) -> SearchTasks:
    """The train, guide and held-out tasks of ``config`` (in that order; see the module docstring).

    Raises:
        ConfigError: the guide tasks or the held-out offset leave no task, or a setting needs probes
            that a suite of agent logs does not have.
    """
    train = select_tasks(suite(config, "train"), config.data.train_tasks)
    guide = guide_tasks(config, train)
    heldout = heldout_tasks(config)
    check_log_suite(config, train + heldout)
    return SearchTasks(train, guide, heldout)


def suite(config: SearchConfig, split: str) -> list[Task]:
    tasks = load_suite(config.data.suite, split)
    cap = config.data.max_task_tokens
    if cap:
        tasks = [t for t in tasks if t.n_tokens is None or t.n_tokens <= cap]
    return tasks


def guide_tasks(config: SearchConfig, train: list[Task]) -> list[Task]:
    """``data.guide_tasks`` train-split tasks after the evaluated ones (``select_tasks`` order)."""
    n = config.data.guide_tasks
    if n == 0:
        return []
    pool = suite(config, "train")
    if len(pool) <= len(train):
        raise ConfigError(f"data.guide_tasks: the train split has {len(pool)} tasks and data.train_tasks uses "
                          "them all; lower train_tasks or set guide_tasks to 0", field="data.guide_tasks", value=n)
    guide = select_tasks(pool, n, len(train))
    if len(guide) < n:
        log.warning("data.guide_tasks: %d asked, the train split has %d after the evaluated tasks", n, len(guide))
    return guide


def heldout_tasks(config: SearchConfig) -> list[Task]:
    """``data.heldout_tasks`` held-out tasks after the first ``data.heldout_offset`` (``select_tasks``).

    Raises:
        ConfigError: the offset leaves no held-out task.
    """
    pool, data = suite(config, "heldout"), config.data
    try:
        return select_tasks(pool, data.heldout_tasks, data.heldout_offset)
    except ValueError as err:
        raise ConfigError(f"data.heldout_offset: {err}", field="data.heldout_offset",
                          value=data.heldout_offset) from None


def check_log_suite(config: SearchConfig, tasks: list[Task]) -> None:
    """A suite of agent logs (imported sessions, judged by fidelity: ``eval.fidelity_bound``) has no
    evidence for the zero-forward screen, the oracle or guide tasks: refuse those settings by name."""
    if not any(is_log_task(t) for t in tasks):  # (the replay's test, one place)
        return
    cfg = config
    for on, key, value in ((cfg.cascade.enabled, "cascade.enabled", "false"),
                           (cfg.oracle.feedback != "none", "oracle.feedback", "none"),
                           (cfg.oracle.heldout, "oracle.heldout", "false"),
                           (cfg.data.guide_tasks > 0, "data.guide_tasks", "0")):
        if on:
            raise ConfigError(f"{key}: the suite {cfg.data.suite!r} is agent logs without probes (judged by "
                              f"fidelity); set {key}: {value}", field=key, value=cfg.data.suite)
