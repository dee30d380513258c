"""Policies served by model name: ``MODEL@NAME`` resolved, run under a time limit, counted.

``create_app(policies=...)`` takes :class:`engine.served_policy.ServedPolicy` objects (built by the
command line: ``akv serve --policy NAME=SPEC``). A request that names ``MODEL@NAME`` (``MODEL``:
any name the app serves) gets the schedule the policy computes from its messages and the served
model's token counts (``engine.server.prepare.prepare_chat``); a request for plain ``MODEL`` is
served as without policies.

A policy that fails never fails the request: an exception, a time-out (the policy's own, or
:attr:`Policies.time_limit_s` here), or a schedule the engine refuses serves the request with no
new drops (the schedule of the last request point the policy decided; the full cache where there
is none), reports it in ``usage.akv_policy`` and the ``X-AKV-Policy`` header, and is counted per
policy in ``/metrics`` (``akv_policy_requests_total{policy, outcome}``).

Not for: deciding (the policies live above the engine), nor the route itself.
"""

from __future__ import annotations

import concurrent.futures
import re
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from engine.errors import AKVError
from engine.served_policy import PolicyFailure, PolicyOutcome, PolicyReport, ServedPolicy

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""What a policy's name may be (it follows ``@`` in a model id)."""
REASON_CHARS = 300
"""Longest failure reason reported (one line)."""


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class Decided:
    """A policy's answer for one request: the wire schedule to serve (``None``: no drops) and the report."""

    wire: Mapping[str, Any] | None
    report: PolicyReport


class Policies:
    """The policies one app serves, by name.

    Args:
        policies: the served policies (names unique, :data:`NAME`'s characters).
        time_limit_s: the longest the server waits for one request's schedule (the policy's own
            limits, e.g. the sandbox's, come first); past it the request is served without drops.
        workers: threads that run policies (a policy that never returns keeps one).

    Raises:
        AKVError: a bad or repeated name.
    """

    def __init__(self, policies: Sequence[ServedPolicy] = (), time_limit_s: float = 30.0, workers: int = 4) -> None:
        self._by_name: dict[str, ServedPolicy] = {}
        for p in policies:
            if NAME.fullmatch(p.name) is None:
                raise AKVError(f"policy name {p.name!r}: use 1 to 64 letters, digits, '_', '.' or '-'",
                               field="policy", value=p.name)
            if p.name in self._by_name:
                raise AKVError(f"policy name {p.name!r} is given twice", field="policy", value=p.name)
            self._by_name[p.name] = p
        if not time_limit_s > 0:
            raise AKVError(f"the policy time limit must be positive, got {time_limit_s}", field="policy_timeout",
                           value=time_limit_s)
        self.time_limit_s = time_limit_s
        self._workers = workers
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, PolicyOutcome]] = Counter()

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, name: str) -> ServedPolicy:
        """The policy called ``name`` (``KeyError`` when none is)."""
        return self._by_name[name]

    def __bool__(self) -> bool:
        return bool(self._by_name)

    def model_ids(self, base: str) -> list[str]:
        """The model ids ``base@NAME`` of every policy."""
        return [f"{base}@{n}" for n in self._by_name]

    def split(self, model: str | None, served: frozenset[str]) -> tuple[bool, ServedPolicy | None]:
        """Whether ``model`` is served here, and its policy: ``(True, None)`` for a plain name of
        ``served`` (or no name), ``(True, policy)`` for ``NAME@POLICY``, ``(False, None)`` otherwise."""
        if model is None or model in served:
            return True, None
        base, at, name = model.rpartition("@")
        if at and base in served and name in self._by_name:
            return True, self._by_name[name]
        return False, None

    def decide(self, policy: ServedPolicy, messages: Sequence[Any], token_counts: Sequence[int]) -> Decided:
        """``policy``'s schedule for a request (call it on a pool thread): never raises for what the
        policy does; its failure is the report's."""
        future = self._pool().submit(policy.schedule, messages, token_counts)
        try:
            wire = future.result(timeout=self.time_limit_s)
            report = PolicyReport(policy.name)
        except concurrent.futures.TimeoutError:
            future.cancel()
            wire = None
            report = PolicyReport(policy.name, PolicyOutcome.TIMEOUT,
                                  f"no schedule within the server's {self.time_limit_s:g} s", "full")
        except PolicyFailure as err:
            wire = err.fallback
            report = PolicyReport(policy.name, err.outcome, one_line(str(err)),
                                  "previous" if err.fallback is not None else "full")
        except Exception as err:  # noqa: BLE001 -- a policy that breaks its contract is still its failure, never a 500
            wire = None
            report = PolicyReport(policy.name, PolicyOutcome.ERROR, one_line(f"{type(err).__name__}: {err}"), "full")
        return Decided(wire, report)

    def count(self, report: PolicyReport) -> None:
        """Count one served request under its policy and outcome (once per request)."""
        with self._lock:
            self.counts[(report.name, report.outcome)] += 1

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(self._workers, thread_name_prefix="akv-policy")
            return self._executor

    def close(self) -> None:
        """Stop the policy threads (those still running a policy end when it returns)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


class PolicyCollector(Collector):
    """``akv_policy_requests_total{policy, outcome}``: requests served by each policy, by outcome."""

    def __init__(self, policies: Policies) -> None:
        self.policies = policies

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("akv_policy_requests", "Chat requests served by a policy, by outcome "
                                     "(ok, or error/timeout/refused: served without new drops)",
                                     labels=["policy", "outcome"])
        counts = dict(self.policies.counts)
        for name in self.policies.names:
            for outcome in PolicyOutcome:
                family.add_metric([name, outcome.value], counts.get((name, outcome), 0))
        yield family
