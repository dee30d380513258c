"""The six kinds of the ``mixed`` suite: one agent workload each, with its own evidence pattern.

Every kind writes ``b.n_rounds`` rounds or more and returns two probes asked at the end. A probe's
answer is a value the task prints once, in its evidence (``evals.tasks.mixed.world``); its line
names what is asked before the answer, so a small model can complete it by copying when the
evidence is attended, and nowhere else says it.

======================= ===========================================================================
coding-superseded-reads files are read, changed by a pull and read again (the same call); the
                        answer is a key only the latest read of its file has; test runs are long
research-redundant-pages long, overlapping search result pages; the answer is in one fetched page,
                        which the agent names afterwards
ops-long-logs           long logs; the answer is one line of one log, whose host the agent then
                        describes
multi-hop-chain         order -> warehouse -> carrier across two lookups, the second called with
                        what the first returned; long order lists around them
evidence-in-reasoning   the answer is a decision in the agent's own reasoning; tool outputs are long
                        tables and dashboards that never hold it
parallel-tool-batch     batches of parallel status checks; the answer is the outlier's line in an
                        old batch, which the agent names in the next reasoning
======================= ===========================================================================

Evidence sits in the older part of the rounds (15-60%), so keeping the last 12 tool responses
misses it, while what a rule could use to keep it differs per kind (a later read of the same
file, a mention by the agent, its own reasoning).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

from evals.tasks.mixed.builder import Call, MixedBuilder, ProbeSpec, Ref

Kind = Callable[[MixedBuilder], list[ProbeSpec]]


def _spots(b: MixedBuilder, k: int, low: float = 0.15, high: float = 0.55, gap: int = 3) -> list[int]:
    """``k`` distinct rounds in the ``[low, high)`` share of the task, at least ``gap`` apart, sorted."""
    n = b.n_rounds
    lo, hi = max(2, int(n * low)), max(int(n * low) + k * gap + 1, int(n * high))
    for _ in range(200):
        picks = sorted(b.rng.sample(range(lo, hi), k))
        if all(y - x >= gap for x, y in itertools.pairwise(picks)):
            return picks
    return [lo + i * gap for i in range(k)]


def _pct(rng: random.Random) -> str:
    return f"{rng.randint(1, 9)}.{rng.randint(0, 9)}%"


def _clock(rng: random.Random) -> str:
    return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"


def _day(b: MixedBuilder) -> str:
    return f"2026-{b.rng.randint(1, 12):02d}-{b.rng.randint(1, 28):02d}"


# ---------------------------------------------------------------------------------------- coding

SUFFIXES = (("timeout_ms", "ms"), ("window_ms", "ms"), ("cooldown_ms", "ms"), ("ttl_ms", "ms"),
            ("max_inflight", "count"), ("queue_depth", "count"), ("burst_limit", "count"), ("flush_bytes", "count"))
NEW_SUFFIXES = (("drain_grace_ms", "ms"), ("probe_interval_ms", "ms"), ("spill_threshold", "count"),
                ("admission_cap", "count"))
TEST_NAMES = ("backoff_grows", "window_rolls", "drain_waits", "limits_apply", "cache_expires", "retry_stops",
              "pool_refills", "queue_sheds", "ttl_resets", "quota_blocks", "breaker_opens", "flush_batches")


def _file_text(path: str, values: dict[str, str], version: str) -> str:
    lines = [f"# {path} @ {version}"] + [f"{k}: {v}" for k, v in values.items()]
    return "\n".join(lines)


def coding(b: MixedBuilder) -> list[ProbeSpec]:
    from evals.tasks.mixed.world import MODULES, SERVICES
    from evals.tasks.pools import alternate

    w, rng = b.world, b.rng
    services = rng.sample(alternate(SERVICES, b.split), 3)
    paths: list[str] = []
    while len(paths) < 6:
        p = f"services/{rng.choice(services)}/{rng.choice(alternate(MODULES, b.split))}.yaml"
        if p not in paths:
            paths.append(p)
    files: dict[str, dict[str, str]] = {}
    for p in paths:
        module = p.rsplit("/", 1)[1][:-5]
        keys = rng.sample(SUFFIXES, rng.randint(5, 7))
        files[p] = {f"{module}_{s}": w.number(unit) for s, unit in keys}

    def version() -> str:
        return f"{rng.getrandbits(28):07x}"

    def read(p: str, why: str) -> int:
        return b.add(why, Call("read_file", {"path": p}, _file_text(p, files[p], version())))

    def tests() -> int:
        target = rng.choice(services)
        names = rng.sample(TEST_NAMES, rng.randint(7, 11))
        lines = [f"===== test session starts ===== collected {len(names)} items", f"tests/{target}/"]
        for i, name in enumerate(names):
            state = "FAILED" if rng.random() < 0.15 else "PASSED"
            lines.append(f"test_{target}.py::test_{name} {state} [{100 * (i + 1) // len(names):3d}%] "
                         f"({rng.randint(0, 9)}.{rng.randint(10, 99)}s)")
            if state == "FAILED":
                lines.append(f"    AssertionError: expected {name.split('_')[0]} to settle, got "
                             f"{rng.choice(['timeout', 'retry storm', 'stale read', 'empty queue'])}")
        lines.append(f"===== {sum('FAILED' in ln for ln in lines)} failed, {len(names)} run in "
                     f"{rng.randint(2, 9)}.{rng.randint(10, 99)}s =====")
        return b.add(rng.choice([f"Running the {target} tests to see where it breaks.",
                                 f"Let me rerun the {target} suite after that change.",
                                 f"Checking the {target} tests again."]),
                     Call("run_tests", {"target": target}, "\n".join(lines)))

    def grep(p: str) -> int:
        key = rng.choice(list(files[p]))
        hits = [f"{p}:{rng.randint(2, 9)}: {key}: {files[p][key]}"]
        hits += [f"src/{rng.choice(services)}/client.py:{rng.randint(10, 99)}: cfg.get('{key}')"
                 for _ in range(rng.randint(1, 3))]
        return b.add(f"Where is {key} used?", Call("grep", {"pattern": key}, "\n".join(hits)))

    def pull(changed: Sequence[str]) -> int:
        lines = [f"Updating {version()}..{version()}", "Fast-forward"]
        lines += [f" {p} | {rng.randint(1, 4)} {'+' * rng.randint(1, 3)}{'-' * rng.randint(0, 2)}" for p in changed]
        lines.append(f" {len(changed)} files changed")
        return b.add("Pulling the latest changes before I edit anything.", Call("git_pull", {}, "\n".join(lines)))

    b.add("Let me see what configuration this service has.",
          Call("list_dir", {"path": "services/"}, "\n".join(paths)))
    for p in paths:
        read(p, f"Reading {p} first.")
    probed = rng.sample(paths, 2)
    spots = _spots(b, 2, 0.2, 0.5, gap=4)
    evidence: dict[str, tuple[int, str, str, str]] = {}
    while b.next_round < b.n_rounds or len(evidence) < 2:
        r = b.next_round
        due = [p for p, s in zip(probed, spots) if s <= r and p not in evidence]
        if due:  # a pull changes the probed file; its re-read adds a key that only this version has
            p = due[0]
            others = [q for q in paths if q not in probed and rng.random() < 0.4]
            pull([p, *others])
            module = p.rsplit("/", 1)[1][:-5]
            suffix, unit = rng.choice(NEW_SUFFIXES)
            key, value = f"{module}_{suffix}", w.number(unit)
            old = rng.choice(list(files[p]))
            files[p][old] = w.number("ms" if old.endswith("_ms") else "count")
            files[p][key] = value
            rr = read(p, f"The pull touched {p}; reading it again.")
            evidence[p] = (rr, key, value, unit)
            continue
        roll = rng.random()
        if roll < 0.35:
            tests()
        elif roll < 0.55:
            grep(rng.choice(paths))
        elif roll < 0.75 and r > 8:
            free = [q for q in paths if q not in probed]
            q = rng.choice(free)
            if rng.random() < 0.5:
                pull([q])
                old = rng.choice(list(files[q]))
                files[q][old] = w.number("ms" if old.endswith("_ms") else "count")
            read(q, f"Re-reading {q} to check the current values.")
        else:
            p = rng.choice(paths)
            key = rng.choice(list(files[p]))
            b.add(f"Checking how {key} is documented.",
                  Call("read_file", {"path": f"docs/{p.split('/')[1]}.md"},
                       f"## {p.split('/')[1]}\n{key} is read at start-up; see {p}. Changes need a restart of "
                       f"the {p.split('/')[1]} workers."))
    out = []
    for p in probed:
        rr, key, value, unit = evidence[p]
        out.append(ProbeSpec("fact", f"What is {key} set to in {p}?", f"{key}:", value, unit, (Ref(rr, 0),)))
    return out


# -------------------------------------------------------------------------------------- research

METRICS = {"train": (("setup time", "minutes"), ("recovery time", "seconds"), ("queue wait", "seconds"),
                     ("onboarding time", "minutes")),
           "heldout": (("repair time", "minutes"), ("approval delay", "seconds"), ("handover time", "minutes"),
                       ("restock lag", "seconds"))}
STUDIES = ("survey", "benchmark", "field study", "audit")


def _search_page(b: MixedBuilder, sources: Sequence[tuple[str, str]], metrics: Sequence[tuple[str, str]]) -> str:
    rng, w = b.rng, b.world
    lines = []
    for k, (name, url) in enumerate(rng.sample(list(sources), rng.randint(3, min(5, len(sources)))), 1):
        metric, unit = rng.choice(metrics)
        lines.append(f"{k}. {name}: {rng.choice(STUDIES)} notes on {metric}")
        lines.append(f"   {url}")
        if rng.random() < 0.5:
            lines.append(f"   ... teams in the sample reported a {metric} around {w.number('ms')} {unit} once the "
                         f"new process settled; see the {rng.choice(['appendix', 'methods', 'summary table'])} ...")
        else:
            lines.append(f"   ... how {rng.choice(['mid-size', 'regional', 'enterprise'])} teams changed their "
                         f"{metric} after adopting the {rng.choice(['checklist', 'rota', 'tooling'])} ...")
    return "\n".join(lines)


def _page(b: MixedBuilder, name: str, metrics: Sequence[tuple[str, str]], key: str = "", study: str = "") -> str:
    rng, w = b.rng, b.world
    parts = [f"{name} - {(study or rng.choice(STUDIES)).title()} {rng.randint(2021, 2025)}",
             f"This report covers {rng.randint(12, 90)} teams across {rng.randint(3, 9)} regions."]
    for _ in range(rng.randint(3, 5)):
        metric, unit = rng.choice(metrics)
        parts.append(rng.choice([
            f"In the pilot group the {metric} dropped to {w.number('ms')} {unit} after two quarters.",
            f"Respondents outside the pilot saw a {metric} of about {w.number('ms')} {unit}.",
            f"The slowest decile still waited {w.number('ms')} {unit} for the same step.",
            f"Across regions the spread of {metric} was wide, from {w.number('ms')} to {w.number('ms')} {unit}."]))
    if key:
        parts.insert(rng.randint(2, len(parts)), key)
    return "\n".join(parts)


def research(b: MixedBuilder) -> list[ProbeSpec]:
    rng, w = b.rng, b.world
    metrics = METRICS[b.split]
    sources = []
    for _ in range(8):
        name = w.source()
        sources.append((name, f"https://{name.split()[0].lower()}.example.org/{rng.randint(10, 99)}"))
    probed = rng.sample(sources, 2)
    asked = rng.sample(list(metrics), 2)
    spots = _spots(b, 2, 0.15, 0.5, gap=4)
    done: list[tuple[int, str, str, str, str]] = []
    fetched_late: set[str] = set()
    while b.next_round < b.n_rounds or len(done) < 2:
        r = b.next_round
        j = len(done)
        if j < 2 and spots[j] <= r:
            (name, url), (metric, unit) = probed[j], asked[j]
            value = w.number("ms")
            study = rng.choice(STUDIES)
            line = f"The {name} {study} reports a median {metric} of {value} {unit}."
            rr = b.add(f"Opening the {name} page, it looks like a primary source.",
                       Call("fetch_page", {"url": url}, _page(b, name, metrics, line, study)))
            b.add(f"The {name} {study} is the number I need for the {metric}; I will cite it.",
                  Call("web_search", {"query": f"{metric} {rng.choice(['median', 'benchmark', 'typical'])}"},
                       _search_page(b, [s for s in sources if s not in probed], metrics)))
            done.append((rr, name, study, metric, value))
            continue
        roll = rng.random()
        if roll < 0.55:
            metric, _ = rng.choice(metrics)
            b.add(rng.choice([f"Searching for more sources on {metric}.", "Another search, phrased differently.",
                              f"Looking for recent numbers on {metric}."]),
                  Call("web_search", {"query": f"{metric} {rng.choice(['2025', 'study', 'report', 'teams'])}"},
                       _search_page(b, [s for s in sources if s not in probed], metrics)))
        else:
            name, url = rng.choice([s for s in sources if s not in probed])
            why = rng.choice([f"The {name} page might have the methodology.", f"Skimming {name} for context."])
            if name in fetched_late and rng.random() < 0.5:
                why = f"Looking at {name} again."
            fetched_late.add(name)
            b.add(why, Call("fetch_page", {"url": url}, _page(b, name, metrics)))
    # the agent names what it keeps, and some of what it does not, near the end
    for _, name, study, metric, _ in done:
        other = rng.choice([s for s in sources if s not in probed])[0]
        b.add(f"Cross-checking the {name} figures against {other}; the {name} {study} stays my reference.",
              Call("web_search", {"query": f"{metric} {name.split()[0]}"},
                   _search_page(b, [s for s in sources if s not in probed], metrics)))
    return [ProbeSpec("fact", f"What median {metric} does the {name} {study} report?",
                      f"The {name} {study} reports a median {metric} of", value, "ms", (Ref(rr, 0),))
            for rr, name, study, metric, value in done]


# ------------------------------------------------------------------------------------------- ops

EVENTS = {"train": (("replication lag reached", "ms before failover"), ("pool wait peaked at", "ms under load"),
                    ("gc pause hit", "ms during compaction"), ("queue drain took", "ms after the deploy")),
          "heldout": (("lock wait climbed to", "ms before the abort"), ("fsync stalled for", "ms on the journal"),
                      ("handshake took", "ms after the cert rotation"), ("snapshot upload ran", "ms over budget"))}
OTHER_ERRORS = ("upstream timeout after {v} ms", "retry budget spent, last attempt {v} ms",
                "health probe failed, {v} ms without a reply", "slow commit of {v} ms, flushing")
NOISE = ("request served path=/v1/{p} status=200 took={t}ms", "cache refresh done entries={c}",
         "health check ok upstream={u}", "rotated log segment seq={c}", "slow query took={t}ms table={p}",
         "retrying call attempt=2 upstream={u}", "config reloaded by {u}")


def _log(b: MixedBuilder, inst: str, hosts: Sequence[str], lines: int, special: str = "") -> tuple[str, str]:
    """A log of ``lines`` lines, the ``special`` event (an ERROR line) among them; returns the text and
    the ERROR line's start (its timestamp, level, instance and host)."""
    rng, w = b.rng, b.world
    day = _day(b)
    out, head = [], ""
    at = rng.randint(0, lines - 1) if special else -1
    stamps = sorted(_clock(rng) for _ in range(lines))
    for i in range(lines):
        stamp = f"{day}T{stamps[i]}Z"
        host = rng.choice(hosts)
        if i == at:
            head = f"{stamp} ERROR {inst} host={host}:"
            out.append(f"{head} {special}")
            continue
        took = w.number("ms") if rng.random() < 0.3 else str(rng.randint(2, 99))
        text = rng.choice(NOISE).format(p=rng.choice(["orders", "users", "items", "ledger", "quotes"]),
                                        t=took, c=rng.randint(2, 99), u=rng.choice(hosts))
        out.append(f"{stamp} {rng.choice(['INFO', 'INFO', 'WARN'])} {inst} host={host}: {text}")
    return "\n".join(out), head


def ops(b: MixedBuilder) -> list[ProbeSpec]:
    rng, w = b.rng, b.world
    instances = [w.instance() for _ in range(7)]
    hosts = [w.host() for _ in range(9)]
    probed = rng.sample(instances, 2)
    events = rng.sample(list(EVENTS[b.split]), 2)
    spots = _spots(b, 2, 0.15, 0.5, gap=4)
    done: list[tuple[int, str, str, str]] = []
    while b.next_round < b.n_rounds or len(done) < 2:
        r = b.next_round
        j = len(done)
        if j < 2 and spots[j] <= r:
            inst, (event, tail) = probed[j], events[j]
            value = w.number("ms")
            host = rng.choice(hosts)
            text, head = _log(b, inst, [host], rng.randint(8, 13), f"{event} {value} {tail}")
            rr = b.add(f"Pulling the last hour of {inst} logs.",
                       Call("query_logs", {"service": inst, "window": "1h"}, text))
            b.add(f"{inst} shows the problem on {host}; describing that host.",
                  Call("describe_host", {"host": host},
                       f"{host}: {rng.randint(4, 64)} vCPU, zone {rng.choice('abc')}, kernel 6.{rng.randint(1, 9)}, "
                       f"uptime {rng.randint(2, 90)} days, load {rng.randint(1, 9)}.{rng.randint(0, 9)}"))
            done.append((rr, inst, f"{head} {event}", value))
            continue
        roll = rng.random()
        if roll < 0.4:
            inst = rng.choice([i for i in instances if i not in probed])
            hs = rng.sample(hosts, 2)
            special = rng.choice(OTHER_ERRORS).format(v=w.number("ms")) if rng.random() < 0.5 else ""
            text, _ = _log(b, inst, hs, rng.randint(5, 11), special)
            b.add(rng.choice([f"Checking the {inst} logs too.", f"Let me look at {inst}.",
                              "Widening the search to a neighbouring service."]),
                  Call("query_logs", {"service": inst, "window": "1h"}, text))
            if rng.random() < 0.4:
                host = hs[0]
                b.add(f"{inst} runs on {host}; describing it.",
                      Call("describe_host", {"host": host}, f"{host}: {rng.randint(4, 64)} vCPU, zone "
                           f"{rng.choice('abc')}, uptime {rng.randint(2, 90)} days"))
        elif roll < 0.7:
            inst = rng.choice(instances)
            b.add(f"Metrics for {inst}.", Call("get_metrics", {"service": inst},
                                                f"{inst}: p50 {rng.randint(2, 99)}ms, errors {_pct(rng)}, "
                                                f"saturation {_pct(rng)}"))
        else:
            alerts = [f"[{rng.choice(['P2', 'P3', 'P4'])}] {rng.choice(instances)} "
                      f"{rng.choice(['latency', 'error rate', 'disk', 'restarts'])} above threshold since "
                      f"{_clock(rng)}" for _ in range(rng.randint(3, 7))]
            b.add("Listing the open alerts.", Call("list_alerts", {}, "\n".join(alerts)))
    return [ProbeSpec("fact", f"What does the {inst} error line say ({lead.split(': ', 1)[1]})?", lead, value,
                      "ms", (Ref(rr, 0),)) for rr, inst, lead, value in done]


# ------------------------------------------------------------------------------------- multi-hop

def chain(b: MixedBuilder) -> list[ProbeSpec]:
    from evals.tasks.mixed.world import CARRIERS, WAREHOUSES

    rng, w = b.rng, b.world
    warehouses = [w.name("warehouse", WAREHOUSES) for _ in range(8)]
    carriers = {h: f"{w.name('carrier', CARRIERS)} Freight" for h in warehouses}
    w.printed["carrier"] = list(carriers.values())  # the candidates of a carrier answer
    orders = {w.number("id"): rng.choice(warehouses) for _ in range(26)}
    probed_orders = rng.sample(list(orders), 2)
    while orders[probed_orders[0]] == orders[probed_orders[1]]:
        orders[probed_orders[1]] = rng.choice(warehouses)
    probed_houses = {orders[o] for o in probed_orders}
    spots = _spots(b, 2, 0.15, 0.45, gap=5)
    done: list[tuple[int, int, str, str, str]] = []
    looked: set[str] = set()

    def order_text(o: str) -> str:
        return (f"Order {o}: {w.number('kb')} kg, status {rng.choice(['delayed', 'packed', 'held'])}.\n"
                f"Order {o} is allocated to warehouse {orders[o]}.")

    def house_text(h: str) -> str:
        if h in probed_houses:  # the probed line's wording is its own: its lead-in matches one place
            line = f"Warehouse {h} ships through carrier {carriers[h]}."
        else:
            line = rng.choice([f"Outbound freight from {h} goes with {carriers[h]}.",
                               f"{h} dispatch partner: {carriers[h]}.", f"Pickups at {h} are run by {carriers[h]}."])
        return f"Warehouse {h}: dock {rng.randint(1, 9)}, capacity {rng.randint(40, 99)}%.\n{line}"

    while b.next_round < b.n_rounds or len(done) < 2:
        r = b.next_round
        j = len(done)
        if j < 2 and spots[j] <= r:
            o = probed_orders[j]
            h = orders[o]
            r1 = b.add(f"Looking up order {o}.", Call("lookup_order", {"order_id": o}, order_text(o)))
            r2 = b.add(f"Order {o} sits at {h}; checking that warehouse.",
                       Call("lookup_warehouse", {"name": h}, house_text(h)))
            looked.add(h)
            done.append((r1, r2, o, h, carriers[h]))
            continue
        roll = rng.random()
        free_orders = [o for o in orders if o not in probed_orders]
        if roll < 0.3:
            listed = rng.sample(free_orders, rng.randint(10, 16))
            b.add("Listing the delayed orders.", Call("search_orders", {"status": "delayed"}, "\n".join(
                f"{o} | {rng.randint(1, 40)} items | {rng.choice(['delayed', 'held', 'packed'])} | "
                f"due {_day(b)}" for o in listed)))
        elif roll < 0.6:
            o = rng.choice(free_orders)
            b.add(f"Looking up order {o}.", Call("lookup_order", {"order_id": o}, order_text(o)))
        elif roll < 0.85:
            h = rng.choice([x for x in warehouses if x not in probed_houses])
            looked.add(h)
            b.add(f"Checking warehouse {h}.", Call("lookup_warehouse", {"name": h}, house_text(h)))
        else:
            h = rng.choice([x for x in warehouses if x not in probed_houses])
            c = carriers[h]
            b.add(f"What does {c} charge?", Call("lookup_carrier", {"name": c},
                                                 f"{c}: base rate {rng.randint(2, 9)}.{rng.randint(10, 99)} per kg, "
                                                 f"pickup {rng.choice(['daily', 'twice a week', 'on demand'])}"))
    for h in warehouses:  # every other carrier is shown before the probe (the candidates)
        if h not in looked:
            b.add(f"Checking warehouse {h}.", Call("lookup_warehouse", {"name": h}, house_text(h)))
    return [ProbeSpec("multi_hop", f"Which carrier ships order {o}?", f"Warehouse {h} ships through carrier", c,
                      "carrier", (Ref(r1, 0), Ref(r2, 0))) for r1, r2, o, h, c in done]


# ------------------------------------------------------------------------------------- reasoning

DECISIONS = {"train": ("backfill batch size", "retry budget", "export window", "worker pool"),
             "heldout": ("reindex chunk size", "sync interval", "purge window", "prefetch depth")}


def reasoning(b: MixedBuilder) -> list[ProbeSpec]:
    rng, w = b.rng, b.world
    things = rng.sample(list(DECISIONS[b.split]), 2)
    spots = _spots(b, 2, 0.2, 0.55, gap=4)
    done: list[tuple[int, str, str]] = []
    tables = ("orders", "events", "sessions", "invoices", "shipments")

    def table() -> str:
        cols = rng.sample(["rows", "p95_ms", "size_kb", "lag_ms", "errors"], 3)
        lines = [" | ".join(["shard", *cols])]
        for s in range(rng.randint(6, 10)):
            lines.append(" | ".join([f"s{s:02d}", *(w.number("count") if c == "rows" else str(rng.randint(2, 99))
                                                     for c in cols)]))
        return "\n".join(lines)

    def dashboard() -> str:
        return "\n".join(f"{rng.choice([*things, 'queue depth', 'write rate', 'cpu'])} panel: "
                         f"{w.number('count')} (7d avg {w.number('count')})" for _ in range(rng.randint(6, 10)))

    while b.next_round < b.n_rounds or len(done) < 2:
        r = b.next_round
        j = len(done)
        if j < 2 and spots[j] <= r:
            thing = things[j]
            value = w.number("count")
            rr = b.add(f"Given those numbers, Decision: I will cap the {thing} at {value} for this migration, "
                       f"and revisit it after the first shard.",
                       Call("run_query", {"sql": f"SELECT * FROM {rng.choice(tables)}_stats LIMIT 14"}, table()))
            done.append((rr, thing, value))
            continue
        observation = rng.choice([f"The {rng.choice(tables)} shard looks heavy at {w.number('count')} rows.",
                                  "Nothing unusual there.", f"Write rate peaked near {w.number('count')}.",
                                  "That matches the last run."])
        if rng.random() < 0.55:
            b.add(f"{observation} Querying the next table.",
                  Call("run_query", {"sql": f"SELECT * FROM {rng.choice(tables)}_stats LIMIT 14"}, table()))
        else:
            b.add(f"{observation} Reading the dashboard.",
                  Call("read_dashboard", {"name": rng.choice(["migration", "storage", "traffic"])}, dashboard()))
    return [ProbeSpec("fact", f"What did the agent decide to cap the {thing} at?",
                      f"Decision: I will cap the {thing} at", value, "count", (Ref(rr),))
            for rr, thing, value in done]


# -------------------------------------------------------------------------------- parallel batch

def batch(b: MixedBuilder) -> list[ProbeSpec]:
    rng, w = b.rng, b.world
    instances = [w.instance() for _ in range(14)]
    probed = rng.sample(instances, 2)
    done: list[tuple[int, int, str, str]] = []
    free = [i for i in instances if i not in probed]
    spots = _spots(b, 2, 0.25, 0.6, gap=4)

    def status(inst: str, latency: str) -> str:
        k = rng.randint(3, 8)
        ready = k - rng.randint(0, 1)
        if inst in probed:  # the probed line's wording is its own: its lead-in matches one place
            return f"Service {inst}: p99 latency {latency} ms, error rate {_pct(rng)}, {ready} of {k} pods ready."
        return rng.choice([f"{inst} ok: tail={latency}ms errors={_pct(rng)} pods={ready}/{k}",
                           f"status of {inst}: {ready}/{k} pods up, slowest requests {latency} ms, {_pct(rng)} errors",
                           f"{inst}: worst 1% at {latency} ms; error rate {_pct(rng)}; {ready} pods ready"])

    def checks(batch_of: Sequence[str], special: dict[str, str]) -> list[Call]:
        return [Call("check_service", {"name": i}, status(i, special.get(i) or w.number("ms"))) for i in batch_of]

    while b.next_round < b.n_rounds or len(done) < 2:
        r = b.next_round
        j = len(done)
        if j < 2 and spots[j] <= r:
            inst = probed[j]
            group = rng.sample(free, rng.randint(2, 4))
            pos = rng.randint(0, len(group))
            group.insert(pos, inst)
            value = w.number("ms")
            rr = b.add("Checking this group of services in parallel.", *checks(group, {inst: value}))
            b.add(f"{inst} is the outlier of that batch; pulling its dependencies.",
                  Call("get_dependencies", {"name": inst}, ", ".join(rng.sample(free, 3))))
            done.append((rr, pos, inst, value))
            continue
        roll = rng.random()
        if roll < 0.45:
            group = rng.sample(free, rng.randint(3, 5))
            b.add(rng.choice(["Another round of status checks.", "Checking the next group in parallel.",
                              "Re-checking a few services."]), *checks(group, {}))
        elif roll < 0.7:
            inst = rng.choice(free)
            b.add(f"What does {inst} depend on?", Call("get_dependencies", {"name": inst},
                                                       ", ".join(rng.sample(free, 3))))
        else:
            steps = ("Check the upstream", "Drain one pod", "Compare with the last deploy", "Page the owner",
                     "Scale out by one replica")
            b.add("Reading the runbook for degraded services.",
                  Call("read_runbook", {"topic": rng.choice(["latency", "errors", "capacity"])}, "\n".join(
                      f"{k + 1}. {rng.choice(steps)} if the p99 stays high for {rng.randint(2, 15)} minutes."
                      for k in range(rng.randint(5, 9)))))
    return [ProbeSpec("fact", f"What p99 latency did {inst} report in its batch check?",
                      f"Service {inst}: p99 latency", value, "ms", (Ref(rr, pos),)) for rr, pos, inst, value in done]


KINDS: dict[str, tuple[Kind, float]] = {
    "coding-superseded-reads": (coding, 170.0),
    "research-redundant-pages": (research, 230.0),
    "ops-long-logs": (ops, 260.0),
    "multi-hop-chain": (chain, 150.0),
    "evidence-in-reasoning": (reasoning, 230.0),
    "parallel-tool-batch": (batch, 190.0),
}
"""Kind name -> (how it writes its rounds, mean gemma tokens per round: sets the number of rounds)."""
