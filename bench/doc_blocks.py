"""The rendered blocks of the docs other than README.md and docs/results.md.

docs/survival.md (calibration, real vs simulator, simulator speed), docs/live.md (the paged suite on
Qwen2.5-Coder-1.5B) and docs/tasks.md (probe calibrations, BFCL turns as probes): each block reads its
result files under ``bench/results/`` and writes the figures the prose used to quote. ``bench.result_blocks`` merges
:data:`DOC_BLOCKS` into its ``BLOCKS``; ``bench.render_results`` puts each between its markers.

Not for: the figures of README.md and docs/results.md (``bench.result_blocks``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from bench.result_files import Block, Results, need, source, table


def _span(values: Iterable[float], fmt: str, unit: str = "") -> str:
    """``lo-hi`` (or one value when they print alike) of ``values`` formatted with ``fmt``."""
    vals = sorted(values)
    lo, hi = format(vals[0], fmt), format(vals[-1], fmt)
    return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"


def _share(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


# --- docs/survival.md ----------------------------------------------------------------------------------

def survival_calibration(r: Results) -> str:
    """The calibration of gemma-3-270m on this machine: its grid points, in words."""
    name = "survival-calibration-gemma-3-270m.json"
    data = r(name)
    m = need(data, "machine")
    pre = {(p["context"], p["new"]): p["seconds"] for p in need(data, "points", "prefill")}
    dec = need(data, "points", "decode")
    one = [p["seconds"] for p in dec if p["batch"] == 1 and p["forward"]]
    four = [p["seconds"] for p in dec if p["batch"] == 4 and p["forward"]]
    last = [p["seconds"] for p in dec if not p["forward"]]
    probe = need(m, "probe_s")
    worst = need(data, "points", "max_rel_error")
    return (f"Measured on this machine, {data['model']}, {m['dtype']}, {m['device'].upper()}, {m['threads']} threads, "
            f"load average {m['load_before']:.1f} before ({m['seconds']:.0f} s): a 512-token prefill from scratch "
            f"{pre[0, 512]:.2f} s (~{512 / pre[0, 512]:,.0f} tokens/s), 512 new tokens after 2,048 stored "
            f"{pre[2048, 512]:.2f} s, a 16-token start after 2,048 stored {pre[2048, 16]:.2f} s; a decode step of one "
            f"sequence {_span((1000 * s for s in one), '.0f', ' ms')} (~{1 / statistics.fmean(one):.0f} tokens/s), "
            f"four sequences {_span((1000 * s for s in four), '.0f', ' ms')}, a last step without forward pass "
            f"{_span((1000 * s for s in last), '.0f', ' ms')}; wake-up {1000 * need(data, 'timing', 'wake_s'):.0f} ms; "
            f"the probe request {_share(probe[1] / probe[0] - 1)} slower at the end than at the start; worst relative "
            f"fit residual {_share(worst['prefill'])} (prefill) and {_share(worst['decode'])} (decode). "
            + source(name))


def _conformance_rows(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[list[str]]:
    out = []
    for x in sorted(rows, key=lambda x: (x["kind"], x["sessions"], x["family"])):
        trace = f"{x['kind']}-{x['sessions']}"
        if not x["ok"]:
            out.append([trace, f"`{x['family']}`", "failed", *([""] * (len(keys) + 2))])
            continue
        real_rc = statistics.fmean(y["recompute_tokens"] for y in x["real"])
        real_pf = statistics.fmean(y["prefill_tokens"] for y in x["real"])
        band = x.get("sim_timing_band", {}).get("recompute_tokens")
        out.append([trace, f"`{x['family']}`", *(f"{_share(x['error'][k])} ({_share(x['noise'][k])})" for k in keys),
                    f"{real_rc:.0f} / {x['sim']['recompute_tokens']}" + (f" [{band[0]}-{band[1]}]" if band else ""),
                    f"{real_pf:.0f} / {x['sim']['prefill_tokens']}", "yes" if x["within_goal"] else "no"])
    return out


def conformance(name: str) -> Callable[[Results], str]:
    """``bench.survival_conformance``'s rows: per trace and family, the simulator's error on each time
    against the replays' mean (their own spread beside it), the token metrics, and a summary."""
    def render(r: Results) -> str:
        data = r(name)
        rows, keys, goal = need(data, "rows"), need(data, "time_keys"), need(data, "goal")
        ran = [x for x in rows if x["ok"]]
        misses = [f"{x['kind']}-{x['sessions']} `{x['family']}`" for x in ran if not x["within_goal"]]
        equal = sum(all(v == 0 for v in x["token_diff"].values()) for x in ran)
        reals = [y for x in ran for y in x["real"]]
        settings = {(s["time_scale"], s["token_scale"], s["replays"]) for s in (x["setting"] for x in ran)}
        setting = "; ".join(f"time scale {t:g}, token scale {k:g}, {n} replays per cell"
                            for t, k, n in sorted(settings))
        head = ["trace", "family", *(f"{k} err (noise)" for k in keys), "recompute real / sim [band]",
                "prefill real / sim", f"within {goal:.0%}"]
        return (table(head, _conformance_rows(rows, keys))
                + f"\n\n{data['model']}; {setting}; load average before each replay "
                  f"{_span((y['load_before'] for y in reals), '.2f')}. **{len(ran)} cells of {len(rows)} ran: "
                  f"{len(ran) - len(misses)} within {goal:.0%} on the three times, {len(misses)} not**"
                + (f" ({', '.join(misses)})" if misses else "")
                + f". Token metrics equal to the replays' in {equal} of {len(ran)} cells. Inside the replays, the "
                  f"engine's calls against the calibration (`in_situ`): starts "
                  f"{_span((y['in_situ']['start_ratio'] for y in reals), '.2f', 'x')}, decode steps "
                  f"{_span((y['in_situ']['step_ratio'] for y in reals), '.2f', 'x')}. " + source(name))
    return render


def survival_sim_speed(r: Results) -> str:
    """``bench.survival_sim_speed``: the simulator's speed per kind and family, and what it measured
    at cluster scale under the assumed speeds."""
    name = "survival-sim-speed.json"
    data = r(name)
    s = need(data, "setting")
    rows = [x for x in need(data, "rows") if x["ok"]]
    kinds = list(dict.fromkeys(x["kind"] for x in rows))
    turns = ", ".join(f"{next(x['turns'] for x in rows if x['kind'] == k):,} turns {k}" for k in kinds)
    walls = " and ".join(f"{_span((x['wall_s'] for x in rows if x['kind'] == k), '.1f', ' s')} ({k})" for k in kinds)
    body = [[x["kind"], f"`{x['family']}`", f"{x['wall_s']:.1f}", f"{x['turns_per_s']:,.0f}",
             f"{x['recompute_tokens'] / 1e6:.2f} M", f"{x['jct_mean_s']:.0f}", f"{x['evicted_tokens']:,}"]
            for x in rows]
    return (f"{s['sessions']:,} sessions per kind ({turns}; arrivals {s['arrival_rate_per_s']:g}/s, pool "
            f"{s['pool_tokens']:,} tokens, host {s['host_tokens']:,}, batches of {s['max_batch']}) simulate in "
            f"{walls} per family on one core of this machine, "
            f"{_span((x['turns_per_s'] for x in rows), ',.0f')} turns/s. Speeds {s['speeds']}.\n\n"
            + table(["kind", "family", "wall s", "turns/s", "recompute tokens", "jct_mean s", "evicted tokens"], body)
            + "\n\n" + source(name))


# --- docs/live.md --------------------------------------------------------------------------------------

LIVE_LABELS = {"full": "with the full cache", "rolling_drop-keep_tool_responses=12": "keeping 12 tool responses",
               "rolling_drop-keep_tool_responses=4": "keeping 4"}


def live_pages(r: Results) -> str:
    """The paged question-at-end suite on Qwen2.5-Coder-1.5B: passes per policy, in words."""
    name = "live-qwen2.5-coder-1.5b-pages-end.json"
    pol = {p["policy"]: p for p in need(r(name), "policies")}
    full = pol["full"]
    passed = ", ".join(f"{round(pol[k]['pass_rate'] * pol[k]['episodes'])} of {pol[k]['episodes']} {label}"
                       for k, label in LIVE_LABELS.items() if k in pol)
    return (f"{full['tool_calls']} calls in {full['episodes']} episodes with the full cache "
            f"({full['invalid_calls']} invalid, {full['steps_mean']:.0f} replies an episode on average), passing "
            f"{passed}. " + source(name))


# --- docs/tasks.md -------------------------------------------------------------------------------------

def _fam(x: Mapping[str, Any], key: str, target: Callable[[float], bool]) -> str:
    v = x[key]
    return f"**{v:.2f}**" if not target(v) else f"{v:.2f}"


def probe_calibration(train: str, heldout: str, greedy: bool) -> Callable[[Results], str]:
    """``evals.cache.probe_calibration_cli`` on both splits: per family, multiple choice (and greedy
    exact match) with the full cache and with the evidence dropped; bold misses a target."""
    def render(r: Results) -> str:
        t, h = r(train), r(heldout)
        tg = need(t, "targets")

        def cells(x: Mapping[str, Any] | None) -> list[str]:
            if x is None:
                return ["-", "-"] if greedy else ["-"]
            full = _fam(x, "full_mc", lambda v: v >= tg["full_mc"])
            drop = _fam(x, "drop_mc", lambda v: v <= x["chance"] + tg["drop_mc_over_chance"])
            if not greedy:
                return [f"{full} / {drop}"]
            return [f"{full} / {_fam(x, 'full_gen', lambda v: v >= tg['full_gen'])}",
                    f"{drop} / {_fam(x, 'drop_gen', lambda v: v <= tg['drop_gen'])}"]

        tf = {x["family"]: x for x in need(t, "families")}
        hf = {x["family"]: x for x in need(h, "families")}
        rows = [[f, *cells(tf.get(f)), *cells(hf.get(f))] for f in dict.fromkeys([*tf, *hf])]
        rows.append([f"all ({t['total']['probes']} / {h['total']['probes']} probes)", *cells(t["total"]),
                     *cells(h["total"])])
        head = (["family", "train full MC / greedy", "train dropped MC / greedy", "held-out full MC / greedy",
                 "held-out dropped MC / greedy"] if greedy else
                ["family", "train full / dropped", "held-out full / dropped"])
        return (table(head, rows) + f"\n\n{t['model']}, {t['template']} template, {t['suite']} suite; "
                f"{t['seconds']:,.0f} s and {h['seconds']:,.0f} s. Bold misses a target. " + source(train, heldout))
    return render


def _at_most(limit: float) -> Callable[[float], bool]:
    return lambda v: v <= limit


def horizon_v3(r: Results) -> str:
    """The probe calibration of horizon v3's new held-out tasks, one line."""
    name = "calibration-horizon-v3-heldout-new.json"
    data = r(name)
    tg = need(data, "targets")
    fams = ", ".join(f"{x['family']} {_fam(x, 'full_mc', lambda v: v >= tg['full_mc'])} / "
                     f"{_fam(x, 'drop_mc', _at_most(x['chance'] + tg['drop_mc_over_chance']))}"
                     for x in need(data, "families"))
    tot = need(data, "total")
    return (f"full / dropped: {fams}; all ({tot['probes']} probes) {tot['full_mc']:.2f} / {tot['drop_mc']:.2f} "
            f"({data['seconds']:.0f} s). " + source(name))


def bfcl_evidence(r: Results) -> str:
    """``bench.bfcl_evidence``: the turns with evidence per suite and split, and each suite's train
    headroom by the project's accounting (cost only)."""
    name = "bfcl-evidence.json"
    data = r(name)
    suites = need(data, "suites")
    rows = []
    for suite, splits in suites.items():
        for split, c in splits.items():
            rows.append([f"`{suite}`", split, str(c["tasks"]), str(c["turns"]),
                         f"{c['turns_with_evidence']} ({_share(c['turns_with_evidence_share'])})",
                         f"{c['evidence_per_turn_mean']:.2f}", f"{c['tool_outputs_per_task_mean']:.1f}",
                         f"{c['drop_other_short_turns']} ({c['drop_other_empty_turns']})"])
    out = table(["suite", "split", "tasks", "turns", "turns with evidence", "evidence outputs per such turn",
                 "tool outputs per task", "drop_other short of the evidence (drops none)"], rows)
    heads = [(suite, splits["train"]["headroom"]) for suite, splits in suites.items()
             if "headroom" in splits.get("train", {})]
    if heads:
        names = [x["schedule"] for x in heads[0][1]["rows"]]
        body = []
        for n in names:
            cells = []
            for _, h in heads:
                x = next(x for x in h["rows"] if x["schedule"] == n)
                cells.append(f"{0.0 - x['saving_vs_full_pct']:+.1f}% / {x['evidence_turns_attended']} of "
                             f"{h['evidence_turns']}")
            body.append([f"`{n}`: {heads[0][1]['rows'][names.index(n)]['what']}", *cells])
        out += (f"\n\nTrain split: cost by the project's accounting (tokens of `{data['tokenizer']}` under "
                f"`{data['template']}`, rates `{data['rates']}`); **the pass is not measured** (it needs the model "
                "and the judge). An evidence turn is attended when every value of it has an output holding it "
                "still attended at the turn.\n\n"
                + table(["schedule", *(f"`{s}`: cost vs full / evidence turns attended" for s, _ in heads)], body))
    return out + "\n\n" + source(name)


DOC_BLOCKS: dict[str, Block] = {
    "survival-calibration": Block(("survival-calibration-gemma-3-270m.json",), survival_calibration),
    "survival-conformance": Block(("survival-conformance-gemma-3-270m.json",),
                                  conformance("survival-conformance-gemma-3-270m.json")),
    "survival-conformance-tiny": Block(("survival-conformance-tiny-random.json",),
                                       conformance("survival-conformance-tiny-random.json")),
    "survival-sim-speed": Block(("survival-sim-speed.json",), survival_sim_speed),
    "live-pages": Block(("live-qwen2.5-coder-1.5b-pages-end.json",), live_pages),
    "calibration-horizon": Block(("calibration-horizon-train.json", "calibration-horizon-heldout.json"),
                                 probe_calibration("calibration-horizon-train.json",
                                                   "calibration-horizon-heldout.json", greedy=False)),
    "calibration-horizon-v3": Block(("calibration-horizon-v3-heldout-new.json",), horizon_v3),
    "calibration-mixed": Block(("calibration-mixed-train.json", "calibration-mixed-heldout.json"),
                               probe_calibration("calibration-mixed-train.json", "calibration-mixed-heldout.json",
                                                 greedy=False)),
    "calibration-default": Block(("calibration-train.json", "calibration-heldout.json"),
                                 probe_calibration("calibration-train.json", "calibration-heldout.json", greedy=True)),
    "bfcl-evidence": Block(("bfcl-evidence.json",), bfcl_evidence),
}
"""The blocks of docs/survival.md, docs/live.md and docs/tasks.md, by name."""
