"""Prometheus metrics of a server: engine counters read at scrape time, plus a latency histogram."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from engine.server.scheduler import Scheduler


class _EngineCollector(Collector):
    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        eng = self.scheduler.engine
        st, tree = eng.stats, eng.tree
        counters = {
            "akv_requests": ("Chat requests completed", st.requests),
            "akv_tokens_reused": ("Prompt tokens read from the radix tree (cached_tokens)", st.cached_tokens),
            "akv_tokens_prefilled": ("Prompt tokens computed (prefill_tokens)", st.prefill_tokens),
            "akv_tokens_drop_skipped": ("Dropped prompt tokens neither computed nor read", st.drop_skipped_tokens),
            "akv_tokens_repositioned": ("Keys rotated by reposition events", st.repos_tokens),
            "akv_tokens_generated": ("Completion tokens", st.completion_tokens),
            "akv_evicted_tokens": ("Tokens whose KV was evicted from the pool", tree.stats.evicted_tokens),
            "akv_freed_dropped_tokens": ("Tokens freed by drop-aware eviction", tree.stats.freed_dropped_tokens),
            "akv_swap_outs": ("Nodes swapped out to the host tier", tree.stats.swap_outs),
            "akv_swap_ins": ("Nodes swapped back into the pool", tree.stats.swap_ins),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(name, doc, value=value)
        gauges = {
            "akv_pool_bytes_used": ("KV bytes resident in the pool", tree.pool_used),
            "akv_pool_bytes_budget": ("KV pool budget in bytes", tree.pool_bytes),
            "akv_host_bytes_used": ("KV bytes in the host tier", tree.host_used),
            "akv_queue_depth": ("Requests waiting or generating", self.scheduler.depth),
            "akv_running": ("Generations in flight", len(self.scheduler.active)),
        }
        survival = getattr(self.scheduler, "survival", None)
        if survival is not None:
            c = survival.counters
            gauges["akv_survival_paused_sessions"] = ("Sessions paused on a tool", len(survival.paused))
            for name, (doc, value) in {
                "akv_survival_pauses": ("Sessions paused on a tool call", c.pauses),
                "akv_survival_swap_out_bytes": ("KV bytes swapped out by survival decisions", c.swap_out_bytes),
                "akv_survival_discarded_tokens": ("Tokens discarded by survival decisions", c.discarded_tokens),
                "akv_survival_policy_errors": ("Survival policy calls that failed", c.policy_errors),
            }.items():
                yield CounterMetricFamily(name, doc, value=value)
        for name, (doc, value) in gauges.items():
            yield GaugeMetricFamily(name, doc, value=value)


class Metrics:
    """A registry per server (so several servers can live in one process, e.g. in tests)."""

    def __init__(self, scheduler: Scheduler):
        self.registry = CollectorRegistry()
        self.registry.register(_EngineCollector(scheduler))
        self.latency = Histogram("akv_request_latency_seconds", "Chat request latency (seconds)",
                                 buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
                                 registry=self.registry)
        self.ttft = Histogram("akv_time_to_first_token_seconds", "Time to first streamed token (seconds)",
                              buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
