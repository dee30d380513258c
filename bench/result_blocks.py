"""The rendered blocks: each reads result files and writes markdown; :data:`BLOCKS` names them.

A block is a :class:`Block` in :data:`BLOCKS`: the files it reads and a function from :class:`Results`
to text. The blocks of README.md and docs/results.md are here; those of the other docs are
``bench.doc_blocks.DOC_BLOCKS``, merged in. The words a claim gets follow its interval
(:func:`goal_words`, :func:`difference_words`): a goal is "met" only when the whole 95% interval
clears it; "at the point estimate" when only the point does. ``bench.render_results`` puts each
block between its markers and checks the committed text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.doc_blocks import DOC_BLOCKS
from bench.result_files import Block, Results, ResultsError, need, source, table

__all__ = ["BLOCKS", "STATUS_BLOCKS", "Block", "Results", "ResultsError", "need", "source", "table"]


# --- numbers and words -------------------------------------------------------------------------------

def pct(v: float) -> str:
    return f"{v:+.1f}%"


def ci(v: Sequence[float], fmt: str = "+.1f") -> str:
    return f"[{format(v[0], fmt)}, {format(v[1], fmt)}]"


def points(v: float) -> str:
    return f"{v:+.3f}"


def sign_words(interval: Sequence[float], below: str, above: str) -> str:
    """A paired difference in words that follow its interval: ``below`` when it lies under 0,
    ``above`` when over, else that no difference is shown."""
    if interval[1] < 0:
        return below
    if interval[0] > 0:
        return above
    return "no difference shown (interval includes 0)"


def difference_words(cost_ci: Sequence[float]) -> str:
    """A paired cost difference in words that follow its interval."""
    return sign_words(cost_ci, "cheaper", "more expensive")


NON_INFERIOR = -0.05
"""A pass difference whose interval's lower end is at least this is non-inferior (the project's margin)."""


def pass_words(pass_ci: Sequence[float], margin: float = NON_INFERIOR) -> str:
    """A paired pass difference in words that follow its interval."""
    if pass_ci[0] >= margin:
        return "non-inferior"
    if pass_ci[1] < 0:
        return "loses"
    return f"may lose (interval reaches {pass_ci[0]:+.3f})"


def words(c: Mapping[str, Any]) -> str:
    """A comparison's cost and pass in words."""
    return f"{difference_words(c['cost_delta_ci95'])}; pass {pass_words(c['pass_delta_ci95'])}"


def goal_words(cost: float, cost_ci: Sequence[float], goal_pct: float, pass_ci: Sequence[float],
               margin: float = NON_INFERIOR) -> str:
    """A cost goal (``goal_pct`` or cheaper, pass non-inferior) in words: "met" only when both
    intervals clear it; "at the point estimate" when the point does and the interval does not."""
    if cost_ci[1] <= goal_pct and pass_ci[0] >= margin:
        return "**met**"
    if cost <= goal_pct:
        reach = f"the cost interval reaches {cost_ci[1]:+.1f}%" if cost_ci[1] > goal_pct else \
            f"the pass interval reaches {pass_ci[0]:+.3f}"
        return f"at the point estimate ({reach}): not met"
    return "**not met**"



# --- search claims -----------------------------------------------------------------------------------

COMPARATORS = {"random": "random programs", "hillclimb": "hill climbing", "expert:read_drop": "hand rule `read_drop`",
               "tuning-only": "tuning-only", "expert:rolling_drop(keep_tool_responses=12)": "rolling drop K=12",
               "expert:full": "full cache", "expert:standard": "Standard (summarize)"}
ARMS = ("random", "hillclimb", "expert:read_drop", "tuning-only", "expert:rolling_drop(keep_tool_responses=12)",
        "expert:full")
"""The comparators of a run with baseline arms, in the order the tables show them."""
BASELINES = ("random", "hillclimb", "expert:read_drop")
"""The stronger baselines at equal budget the search's goal names."""
GOAL_PCT = -10.0


def _comparisons(data: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c["versus"]: c for c in need(data, "comparisons")}


def comparison(comps: Mapping[str, Mapping[str, Any]], versus: str, name: str) -> Mapping[str, Any]:
    if versus not in comps:
        raise ResultsError(f"{name}: no comparison with {versus!r} (it has {', '.join(comps)})")
    return comps[versus]


def arms_table(name: str) -> Callable[[Results], str]:
    def render(r: Results) -> str:
        data = r(name)
        rows = []
        comps = _comparisons(data)
        for key in ARMS:
            c, label = comparison(comps, key, name), COMPARATORS[key]
            per_run = " / ".join(pct(x["cost_delta_pct"]) + ("" if x["significant"] else " (CI incl. 0)")
                                 for x in c["runs"])
            rows.append([label, per_run, f"**{pct(c['cost_delta_pct'])}** {ci(c['cost_delta_ci95'])}",
                         f"{points(c['pass_delta'])} {ci(c['pass_delta_ci95'], '+.3f')}",
                         words(c)])
        n = comps["expert:full"]["heldout_tasks"]
        return (table(["the search's choice vs", "per run: cost", f"pooled, {n} tasks: cost [95% CI]",
                       "pass [95% CI]", "in words"], rows)
                + f"\n\n{_runs_line(data)} {source(name)}")
    return render


def _runs_line(data: Mapping[str, Any]) -> str:
    prov = data.get("provenance", {})
    configs = ", ".join(f"`{k}`" + (f" (committed in {v[:7]})" if v else " (not committed)")
                        for k, v in (prov.get("configs") or {}).items())
    judge = prov.get("judge") or "not recorded"
    return f"Runs: {len(data['runs'])}, configs {configs or 'not recorded'}; judge: {judge}."


def search_goal(r: Results) -> str:
    rows = []
    for suite, name in (("`mixed`", "ablation-mixed-arms.json"), ("`horizon`", "ablation-horizon-arms.json")):
        comps = _comparisons(r(name))
        closest = max(BASELINES, key=lambda k: comparison(comps, k, name)["cost_delta_pct"])
        c = comps[closest]
        rows.append([suite, COMPARATORS[closest], f"{pct(c['cost_delta_pct'])} {ci(c['cost_delta_ci95'])}",
                     f"{points(c['pass_delta'])} {ci(c['pass_delta_ci95'], '+.3f')}",
                     goal_words(c["cost_delta_pct"], c["cost_delta_ci95"], GOAL_PCT, c["pass_delta_ci95"])])
    return table(["suite", "closest baseline (of random, hill climbing, hand rule)", "cost [95% CI]",
                  "pass [95% CI]", f"goal: {GOAL_PCT:.0f}% or cheaper, pass non-inferior"], rows)


EARLIER = (("ablation-mixed.json", "`mixed`, synthesis (3 runs)"),
           ("ablation-mixed-guided.json", "`mixed`, with guide tasks"),
           ("ablation-mixed-table.json", "`mixed`, the table operator"),
           ("ablation-mixed-guarded.json", "`mixed`, under the frame guard"),
           ("ablation-horizon.json", "`horizon`, base-seed programs"),
           ("ablation-horizon-guided.json", "`horizon`, with guide tasks"))


def earlier_pools(r: Results) -> str:
    rows = []
    for name, what in EARLIER:
        c = comparison(_comparisons(r(name)), "tuning-only", name)
        rows.append([what, str(len(r(name)["runs"])), str(c["heldout_tasks"]),
                     f"{pct(c['cost_delta_pct'])} {ci(c['cost_delta_ci95'])}",
                     f"{points(c['pass_delta'])} {ci(c['pass_delta_ci95'], '+.3f')}",
                     words(c), f"`{name}`"])
    return table(["blind pool, the search's choice vs tuning-only", "runs", "held-out tasks", "cost [95% CI]",
                  "pass [95% CI]", "in words", "file"], rows)


# --- transfer ----------------------------------------------------------------------------------------

def rejudged(r: Results) -> str:
    name = "rejudge-mixed-qwen-judged1-qwen2.5-coder-1.5b-both.json"
    data = r(name)
    rows = []
    for c in need(data, "comparisons"):
        rows.append([COMPARATORS.get(c["versus"], c["versus"]), c["scoring"], str(c["tasks"]),
                     f"{pct(c['cost_delta_pct'])} {ci(c['cost_delta_ci95'])}",
                     f"{points(c['pass_delta'])} {ci(c['pass_delta_ci95'], '+.3f')}",
                     words(c)])
    return (table([f"{data['run']}'s choice {rows and data['comparisons'][0]['policy']} vs, judged by "
                   f"{data['judge']} ({data['dtype']})", "scoring", "tasks", "cost [95% CI]", "pass [95% CI]",
                   "in words"], rows)
            + f"\n\nOne blind run (the search judged by {data['run_judge']}), its six held-out tasks judged again. "
            + source(name))


def _live_table(first: str, versus: str, policies: Sequence[Mapping[str, Any]]) -> str:
    """``bench.live_compare``'s rows (one per run, paired with the first) as a table."""
    rows = []
    for p in policies:
        vs = "" if "versus" not in p else f"{pct(p['cost_delta_pct'])} {ci(p['cost_delta_ci95'])}"
        dp = "" if "versus" not in p else f"{points(p['pass_delta'])} {ci(p['pass_delta_ci95'], '+.3f')}"
        rows.append([p["policy"], f"{p['pass_rate']:.3f} {ci(p['pass_ci95'], '.2f')}", str(p["episodes"]),
                     f"{p['tool_calls']} ({p['invalid_calls']})", f"{p['cost_cents_mean']:.4f}c", vs, dp])
    return table([first, "pass [95% Wilson]", "episodes", "tool calls (invalid)", "cost / episode",
                  f"vs {versus}: cost [95% CI]", "pass difference"], rows)


def live(r: Results) -> str:
    name = "live-qwen2.5-coder-1.5b-pages-end.json"
    return (_live_table("policy (live, qwen2.5-coder-1.5b bfloat16)", "full", need(r(name), "policies"))
            + "\n\n" + source(name))


def framework(r: Results) -> str:
    name = "framework-agent-qwen2.5-coder-1.5b-pages-end.json"
    data = r(name)
    c = need(data, "resend_check")
    return (_live_table("agent (qwen2.5-coder-1.5b bfloat16, keep 12 tool outputs)", "akv live",
                        need(data, "policies"))
            + f"\n\n{data['framework']}'s agent, unchanged but for base URL, key and model name: drops in "
            f"{data['requests_with_drops']} of its {data['requests']} requests ({data['dropped_tokens']} tokens); "
            f"each request resent to plain `{c['model']}` with the schedule computed client-side: {c['equal']} of "
            f"{c['requests']} replies equal ({c['different']} different). " + source(name))


def log_check(r: Results) -> str:
    name = "log-search-logs-default1-probe-check.json"
    data = r(name)
    rows = [[k, f"{v['pass_rate']:.3f} ({v['probes']} probes)", f"{v['cost_cents_mean']:.4f}c"]
            for k, v in need(data, "policies").items()]
    return (table(["policy (held-out conversations of the log search)", "probes passed", "cost"], rows)
            + f"\n\n{len(data['tasks'])} held-out conversations; judge: {data['judge']}. " + source(name))


# --- speed -------------------------------------------------------------------------------------------

def _goal_key(measure: str) -> str:
    for marker in (" at 512", " at 2048", " at 4096"):
        if marker in measure:
            return measure.replace(marker, " at N")
    return measure


def speed(r: Results) -> str:
    name = "speed-summary.json"
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in need(r(name), "rows"):
        groups.setdefault(_goal_key(row["measure"]), []).append(row)
    goals, others = [], []
    for key, rows in groups.items():
        shown = " / ".join(x["shown"] for x in rows)
        where = " / ".join(x["measure"].split(" at ")[-1].split(" ")[0] for x in rows) if len(rows) > 1 else ""
        label = key.replace(" at N", f" at {where}") if where else key
        if rows[0]["goal"] == "(no goal)":
            others.append([label, shown, "no goal", f"`{Path(rows[0]['source']).name}`"])
            continue
        met = [x["met"] for x in rows]
        words = "**met**" if all(met) else "**not met**" if not any(met) else \
            "not met (met at " + ", ".join(w for w, m in zip(where.split(" / "), met, strict=True) if m) + ")"
        goals.append([label, shown, rows[0]["goal"], words, f"`{Path(rows[0]['source']).name}`"])
    qwen = "engine-qwen2.5-coder-1.5b.json"
    for key, goal, test in (("prefill_vs_llama_cpp", ">= 1x", lambda v: v >= 1.0),
                            ("decode_vs_llama_cpp", ">= 0.5x", lambda v: v >= 0.5)):
        rows = need(r(qwen), "speed", "rows")
        vals = [x[key] for x in rows]
        met = [test(v) for v in vals]
        words = "**met**" if all(met) else "**not met**" if not any(met) else "not met at every length"
        goals.append([f"qwen2.5-coder-1.5b {key.split('_')[0]} vs llama.cpp at "
                      + " / ".join(str(x["context"]) for x in rows) + " tokens",
                      " / ".join(f"{v:.2f}x" for v in vals), goal, words, f"`{qwen}`"])
    met_count = sum(1 for g in goals if g[3] == "**met**")
    return (table(["goal (gemma-3-270m unless named)", "value", "goal", "status", "file"], goals)
            + f"\n\n{met_count} of {len(goals)} speed goals met (a goal at several lengths is met when every "
              "length meets it). Measured without a goal:\n\n"
            + table(["measure", "value", "goal", "file"], others))


# --- fidelity and survival ---------------------------------------------------------------------------

STAT_LABELS = {"mean_delta": "mean per-turn change of log-likelihood per token",
               "worst_delta": "worst turn (mean over tasks)", "bound_pass": "share of tasks within the bound"}


def first_fidelity(r: Results) -> str:
    """The first validation (one suite, 30 policies from three runs): its Spearman table, and what the
    rows say about ties and range (counted here from its stored rows)."""
    name = "fidelity-validation-mixed.json"
    data = r(name)
    rows = [[STAT_LABELS[k], f"{v['spearman']:+.2f} {ci(v['ci95'], '+.2f')}", f"{v['spearman_cells']:+.2f}"]
            for k, v in need(data, "correlations").items()]
    policies = need(data, "rows")
    at_one = sum(1 for p in policies if p["probe_pass"] == 1.0)
    lo = min(policies, key=lambda p: p["mean_delta"])
    hi = max(policies, key=lambda p: p["mean_delta"])
    losing = [p for p in policies if p["probe_pass"] < 1.0]
    return (table(["fidelity statistic", f"Spearman with probe pass over {len(policies)} policies [95% CI]",
                   "over (policy, task) cells"], rows)
            + f"\n\n{at_one} of {len(policies)} policies pass every probe, so ties at 1.0 decide much of this "
            f"statistic. The mean change ranges over all policies from {lo['mean_delta']:+.3f} ({lo['policy']}, "
            f"probe pass {lo['probe_pass']:.2f}) to {hi['mean_delta']:+.3f} ({hi['policy']}, probe pass "
            f"{hi['probe_pass']:.2f}); the {len(losing)} probe-losing policies range from "
            f"{min(p['mean_delta'] for p in losing):+.3f} to {max(p['mean_delta'] for p in losing):+.3f}. "
            f"Suite `{data['suite']}`, {len(data['tasks'])} train tasks, fidelity in {data['dtype']}, probes "
            f"in {data['probe_dtype']} as the runs stored them. " + source(name))


def _num(v: Any, fmt: str) -> str:
    return "n/a" if v is None or v != v else format(v, fmt)  # NaN: an undefined correlation


def _ends(rng: Mapping[str, Any], fmt: str) -> str:
    def side(which: str) -> str:
        names = rng[f"{which}_policies"]
        more = f" and {len(names) - 2} more" if len(names) > 2 else ""
        return f"{_num(rng[which], fmt)} ({', '.join(names[:2])}{more})"
    return f"{side('min')} to {side('max')}"


def spread_fidelity(r: Results) -> str:
    """The validation over a spread of policies (``bench.fidelity_validation --suites``): per suite and
    pooled, each statistic's Spearman and Kendall with intervals, the ties, the full ranges."""
    name = "fidelity-validation.json"
    data = r(name)
    rows, notes = [], []
    for group, g in need(data, "groups").items():
        ties = need(g, "ties", "probe_pass")
        for stat, c in need(g, "correlations").items():
            rows.append([group, str(g["policies"]), str(len(g["tasks"])), STAT_LABELS[stat],
                         f"{_num(c['spearman'], '+.2f')} [{_num(c['ci95'][0], '+.2f')}, {_num(c['ci95'][1], '+.2f')}]",
                         f"{_num(c['kendall_tau_b'], '+.2f')}",
                         f"{ties['at_top']:.0%} at {ties['top']:.2f}; {ties['pairs_tied']:.0%} of pairs tied"])
        ranges = need(g, "ranges")
        notes.append(f"- `{group}`: probe pass from {_ends(ranges['probe_pass'], '.2f')}; mean change per token "
                     f"from {_ends(ranges['mean_delta'], '+.3f')}; worst turn from "
                     f"{_ends(ranges['worst_delta'], '+.3f')}.")
    return (table(["suite", "policies", "train tasks", "fidelity statistic", "Spearman with probe pass [95% CI]",
                   "Kendall tau-b", "probe-pass ties"], rows)
            + "\n\nThe full range of each measure over every policy (the policies at each end):\n\n"
            + "\n".join(notes)
            + f"\n\nModel {data['model']}, probes in {data['probe_dtype']}, fidelity in {data['dtype']}, frame guard "
              f"{'on' if need(data, 'eval', 'frame_guard') else 'off'}; {data['sources']}. " + source(name))


BFCL_RUNS = ("bfcl-long-heldout-qwen2.5-coder-1.5b.json", "bfcl-long-heldout-qwen2.5-coder-1.5b-required.json")


def _misses(data: Mapping[str, Any]) -> str:
    """The checker's reasons for the missed turns, most frequent first."""
    misses: dict[str, int] = {}
    for task in need(data, "tasks"):
        for turn in task["turns"]:
            if not turn["passed"]:
                reason = turn["reason"] or "?"
                kind = reason.split(":")[1] if ":" in reason else reason
                misses[kind] = misses.get(kind, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(misses.items(), key=lambda kv: -kv[1]))


def bfcl(r: Results) -> str:
    """BFCL multi-turn judged by its own checker: each run's turn and task accuracy, its misses by the
    checker's reason, and the runs' turns passed on the tasks they share."""
    runs = [r(name) for name in BFCL_RUNS]

    def rate(x: Mapping[str, Any] | None) -> str:
        return "-" if not x or x["ci95"] is None else f"{x['rate']:.3f} {ci(x['ci95'], '.2f')} (n={x['n']})"

    rows = [[p["policy"], need(d, "config", "tool_choice"), rate(p["turn_accuracy"]), rate(p["task_accuracy"]),
             str(p["failed"])] for d in runs for p in need(d, "policies")]
    first = runs[0]
    lines = [f"{name}: {need(d, 'note')}; at most {d['config']['max_steps']} replies a turn; turns missed, by the "
             f"checker's reason: {_misses(d)}." for name, d in zip(BFCL_RUNS, runs, strict=True)]
    shared = set.intersection(*({t["task_id"] for t in need(d, "tasks")} for d in runs))
    passed = [sum(t["passed"] for task in d["tasks"] if task["task_id"] in shared for t in task["turns"]) for d in runs]
    turns = sum(len(task["turns"]) for task in first["tasks"] if task["task_id"] in shared)
    return (table([f"policy ({first['model']} {first['dtype']}, {first['suite']} {first['split']})", "tool_choice",
                   "turn accuracy [95% CI]", "task accuracy [95% CI]", "failed"], rows)
            + f"\n\nJudge: {first['judge']}. " + " ".join(lines)
            + f" On the {len(shared)} tasks both runs judged ({turns} turns): "
            + ", ".join(f"tool_choice {need(d, 'config', 'tool_choice')} passed {n}" for d, n in zip(runs, passed,
                                                                                                    strict=True))
            + ". " + source(*BFCL_RUNS))


BFCL_CALIBRATION = ("bfcl-base-train-calibration-qwen2.5-coder-1.5b.json",
                    "bfcl-base-train-evidence-qwen2.5-coder-1.5b.json",
                    "bfcl-long-train-evidence-qwen2.5-coder-1.5b.json")
"""Calibration and controls on BFCL's train split (``bench.bfcl_result`` stores each ``akv eval`` run)."""


def _same_turns(base: Mapping[str, Any], long: Mapping[str, Any], policy: str = "full") -> str:
    """``policy``'s verdicts on the turns both runs judged, paired by task number and turn
    (``multi_turn_base_N`` and ``multi_turn_long_context_N``: BFCL builds the long category from the base
    tasks, the same questions over larger backend states)."""
    def verdicts(data: Mapping[str, Any]) -> dict[tuple[str, int], bool]:
        return {(t["task_id"].rsplit("_", 1)[1], turn["turn"]): bool(turn["passed"])
                for t in need(data, "tasks") if t["policy"] == policy for turn in t["turns"]}

    a, b = verdicts(base), verdicts(long)
    keys = sorted(set(a) & set(b))
    both = sum(a[k] and b[k] for k in keys)
    return (f"On the {len(keys)} turns both {base['suite']} and {long['suite']} judged (same task number and "
            f"turn), the {policy} cache passed {sum(a[k] for k in keys)} in {base['suite']} and "
            f"{sum(b[k] for k in keys)} in {long['suite']} ({both} in both).")


def bfcl_calibration(r: Results) -> str:
    """BFCL on train with the judge model: per run and policy, turn and task accuracy, accuracy on the
    turns with evidence, and the paired turn-accuracy difference with the full cache."""
    def rate(x: Mapping[str, Any] | None) -> str:
        return "-" if not x or x["ci95"] is None else f"{x['rate']:.3f} {ci(x['ci95'], '.2f')} (n={x['n']})"

    rows, notes = [], []
    for name in BFCL_CALIBRATION:
        d = r(name)
        config = need(d, "config")
        turns = config.get("turns", "all")
        for p in need(d, "policies"):
            vs = p.get("vs_full")
            rows.append([f"{d['suite']} {d['split']}", turns, p["policy"], rate(p["turn_accuracy"]),
                         "-" if turns != "all" else rate(p["task_accuracy"]), rate(p.get("evidence_turn_accuracy")),
                         "-" if not vs else f"{vs['diff']:+.3f} {ci(vs['ci95'], '+.2f')}, {vs['lost']} lost, "
                                            f"{vs['gained']} gained",
                         "-" if not vs else sign_words(vs["ci95"], "loses turns", "gains turns")])
        notes.append(f"{name}: {need(d, 'note')}; {d['model']} {d['dtype']} ({d.get('weights', 'dense')} weights), "
                     f"tool_choice {config['tool_choice']}, at most {config['max_steps']} replies of "
                     f"{config['max_tokens']} tokens a turn; wall {d.get('wall') or 'not recorded'}; turns missed, by "
                     f"the checker's reason: {_misses(d)}.")
    return (table(["suite", "turns answered", "policy", "turn accuracy [95% CI]", "task accuracy [95% CI]",
                   "on turns with evidence [95% CI]", "turn accuracy vs full, same turns [95% CI]", "in words"], rows)
            + "\n\n" + " ".join(notes) + " " + _same_turns(r(BFCL_CALIBRATION[1]), r(BFCL_CALIBRATION[2])) + " "
            + source(*BFCL_CALIBRATION))


def qwen_gguf(r: Results) -> str:
    """The 1.5B model with decode weights in the GGUF's own bits against bfloat16, measured in one run."""
    name = "engine-qwen2.5-coder-1.5b-gguf.json"
    data = r(name)
    exact = need(data, "exact")
    forms = [k for k in exact if k == "bfloat16" or k.startswith("gguf_")]
    rows = [[k, f"{exact[k]['rel_l2']:.4f}", f"{exact[k]['rel_max']:.4f}", f"{exact[k]['top1_agreement']:.1%}",
             str(exact[k]["positions"]),
             "-" if k == "bfloat16" else ("**met**" if exact[k]["meets_bar"] else "**not met**")] for k in forms]
    out = table(["form (vs float32 transformers)", "relative L2 error of the logits", "max error / max logit",
                 "top-1 agreement", "positions", "bar: no further than bfloat16 on all three"], rows)
    if "speed" in data:
        sp = data["speed"]
        speed_rows = [[str(x["context"]), *(f"{x['decode_tok_s'][k]:.2f}" for k in sp["decode_weights_gb"]),
                       *(f"{x[k + '_vs_bfloat16']:.2f}x" for k in sp["decode_weights_gb"] if k != "bfloat16")]
                      for x in sp["rows"]]
        forms_sp = list(sp["decode_weights_gb"])
        out += "\n\n" + table(["context", *(f"decode tok/s, {k} ({sp['decode_weights_gb'][k]:.2f} GB a token)"
                                             for k in forms_sp), *(f"{k} vs bfloat16" for k in forms_sp[1:])],
                               speed_rows)
    if "memory" in data:
        mem = data["memory"]
        label = {"dense": "gguf_q6k_dense"}
        out += "\n\n" + table(["one evaluation process", "RSS after load", "peak RSS", "decode-only footprint",
                                 "evaluation of one task"],
                                [[label.get(k, k), f"{m['rss_after_load_gb']:.2f} GB", f"{m['peak_rss_gb']:.2f} GB",
                                  f"{m['decode_only_footprint_gb']:.2f} GB",
                                  f"{m['eval_s']:.1f} s, {m['tokens']} tokens, {m['passed']}/{m['probes']} probes"]
                                 for k, m in mem.items()])
    load = need(data, "load_average_start")
    return (out + f"\n\nLoad average at start {load[0]:.2f}; llama.cpp: "
            f"{data.get('speed', {}).get('llama_cpp', 'not measured')}. " + source(name))


THROUGHPUT_RUNS = ("engine-qwen2.5-coder-1.5b-throughput.json", "engine-qwen2.5-coder-1.5b-throughput-gguf.json")


def throughput(r: Results) -> str:
    """Batched decode of the 1.5B model: tokens/s at each batch size against the copy-bandwidth ceiling."""
    rows, goals = [], []
    for name in THROUGHPUT_RUNS:
        data = r(name)
        t = need(data, "throughput")
        form = f"{data['weights']} ({data['dtype']})"
        for row in t["rows"]:
            rows.append([form, str(row["batch"]), f"{row['decode_tok_s']:.2f}", _x(row["speedup_vs_1"]),
                         f"{row['ceiling_tok_s']:.1f}", f"{100 * row['share_of_ceiling']:.0f}%",
                         f"{row['step_weight_bytes'] / 1e9:.2f}"])
        g = t["goal"]
        goals.append(f"{form}: {g['batch']} sequences {_x(g['speedup'])} the tokens/s of {g['vs_batch']} (goal >= "
                     f"{_x(g['speedup_at_least'])}: {'met' if g['met'] else 'not met'}; copy bandwidth "
                     f"{t['copy_bandwidth_gb_s']:.1f} GB/s)")
    first = r(THROUGHPUT_RUNS[0])
    return (table([f"{first['model']} weights", "sequences", "decode tokens/s", "vs 1", "ceiling tokens/s",
                   "share of ceiling", "weights read a step (GB)"], rows)
            + f"\n\n{first['throughput']['decode_steps']} greedy decode steps after prompts of about "
              f"{first['prompt_tokens_target']} tokens each, medians of {first['repeats']}; the ceiling is the "
              "bandwidth of a plain copy (bytes read plus written) over the weight bytes a step reads, times the "
              "sequences, KV reads ignored: the memory-bound rate as an estimate, not a hard bound. "
            + "; ".join(goals) + ". " + source(*THROUGHPUT_RUNS))


LIVE_THROUGHPUT = "live-throughput-qwen2.5-coder-1.5b.json"


def live_throughput(r: Results) -> str:
    """Live episodes per hour: ``akv live`` against ``akv serve`` per weight form and concurrency."""
    data = r(LIVE_THROUGHPUT)
    arms = need(data, "arms")
    first = arms[0]
    rows = []
    for a in arms:
        v = a.get("versus_first")
        rows.append([f"{a['weights']}, {a['concurrency']} at once", str(a["episodes"]), f"{a['wall_s'] / 60:.1f}",
                     f"{a['episodes_per_hour']:.1f}", _x(a["episodes_per_hour"] / first["episodes_per_hour"]),
                     f"{a['pass_rate']:.3f} {ci(a['pass_ci95'], '.2f')}",
                     "-" if not v else f"{v['answers_differ']} answers, {v['verdicts_differ']} verdicts, "
                                       f"{v['turns_differ']} of {v['turns']} replies ({v['tokens_differ']} tokens)"])
    g, w = need(data, "goal"), need(data, "workload")
    verdict = {True: "met", False: "not met", None: "not measured"}[g["met"]]
    best = "" if g["speedup"] is None else f", best {g['best_arm']} at {_x(g['speedup'])}"
    return (table([f"{data['model']} ({data['dtype']}) decode weights, episodes in flight", "episodes", "wall (min)",
                   "episodes per hour", "vs first", "pass [95% CI]", "differing from the first arm"], rows)
            + f"\n\nPolicy {w['policy']}, `{w['suite']}` ({w['split']}, {w['limit']} tasks, at most {w['max_steps']} "
              f"replies of {w['max_tokens']} tokens); each arm on a fresh server, the first arm the reference. Goal "
              f"{g['target']}: {verdict}{best}" + (f" ({g['reason']})" if g["reason"] else "")
            + f". Load average at start {need(data, 'load_average_start')[0]:.2f}. Command: `{data['command']}`. "
            + source(LIVE_THROUGHPUT))


def survival(r: Results) -> str:
    name = "ablation-survival.json"
    rows = []
    for c in need(r(name), "comparisons"):
        for metric, m in c["metrics"].items():
            rows.append([c["what"], metric, str(m["n_traces"]), f"{pct(m['delta_pct'])} {ci(m['delta_pct_ci95'])}",
                         "lower" if m["delta_pct_ci95"][1] < 0 else "higher" if m["delta_pct_ci95"][0] > 0 else
                         "no difference shown (interval includes 0)"])
    return (table(["the evolved program vs", "metric (lower is better)", "held-out traces", "change [95% CI]",
                   "in words"], rows) + "\n\n" + source(name))


# --- README ------------------------------------------------------------------------------------------

def _x(v: float) -> str:
    return f"{v:.2f}x"


def readme_bench(r: Results) -> str:
    """The README's benchmark table: one row per benchmark, its command and its figures."""
    engine, qwen = r("engine-gemma-3-270m.json"), r("engine-qwen2.5-coder-1.5b.json")
    tp = need(engine, "throughput")
    lengths = " / ".join(str(x["context"]) for x in tp)
    shares = " / ".join(f"{100 * x['prefill_share_of_peak']:.0f}%" for x in tp)
    restore = need(engine, "restore")
    load = need(r("server-load.json"), "ratios_cold_over_reuse")
    lim = {x["scenario"]: x for x in need(r("server-limits-gemma-3-270m.json"), "rows")}
    idle = lim["idle"]["small_p50_s"]
    attacks = " / ".join(_x(x["ratio_vs_idle"]) for k, x in lim.items() if k != "idle")
    ev = {x["share"]: x for x in need(r("eval-throughput.json"), "rows")}
    ray = need(r("ray-executor.json"), "rows")
    two = {x["routing"]: x for x in ray if x["replicas"] == 2}
    screen = r("screen-speed-gemma-3-270m-horizon.json")
    wf = r("weight-formats-gemma-3-270m.json")
    bf = need(wf, "evaluation")
    qs = need(qwen, "speed", "rows")
    rows = [
        ["prefill and decode vs transformers", "`python -m bench.engine_speed --peak --only throughput restore`",
         f"prefill {' / '.join(_x(x['prefill_ratio']) for x in tp)}, decode "
         f"{' / '.join(_x(x['decode_ratio']) for x in tp)} at {lengths} tokens; prefill "
         f"{shares} of the measured fp32 "
         f"GEMM peak ({need(engine, 'peak', 'peak_gflops'):.0f} GFLOP/s)"],
        ["restore a session after drops", "`python -m bench.engine_speed`",
         f"{_x(restore['speedup_vs_reference'])} the step-by-step reference; "
         f"{restore['ratio_to_plain_prefill']:.2f}x the time of a plain prefill"],
        ["server, 4 sessions x 6 turns", "`python -m bench.server_load`",
         f"TTFT p50 {_x(load['ttft_p50_s'])} lower with reuse than full recompute"],
        ["small request while hostile ones are refused (gemma-3-270m)",
         "`python -m bench.server_limits --model gemma-3-270m --requests 8`",
         f"idle p50 {idle:.2f} s; during 10 MB bodies / 3 MB prompts / 100k-message bodies: {attacks}"],
        ["evaluator, radix sharing", "`python -m bench.eval_speed --max-task-tokens 2500`",
         f"{ev[True]['evals_per_min']:.1f} vs {ev[False]['evals_per_min']:.1f} evaluations/min with vs without"],
        ["Ray, 2 replicas", "`python -m bench.ray_scaling`",
         f"{two['affinity']['evals_per_min']:.1f} evals/min with task affinity vs "
         f"{two['round_robin']['evals_per_min']:.1f} round-robin"],
        ["screening a program per policy-task", "`python -m bench.screen_speed --model-policies 2`",
         f"{screen['ms_per_policy_task']:.2f} ms, {screen['ratio']:,.0f}x faster than the model's "
         f"{need(screen, 'model_fidelity', 'median_s'):.1f} s"],
        ["bfloat16 weights (opt-in)", "`python -m bench.weight_formats`",
         f"evaluations {_x(bf['speedup'])} float32's, {bf['probes_flipped']} of {bf['probes']} probes changed"],
        ["qwen2.5-coder-1.5b vs llama.cpp on the same GGUF", "`python -m bench.qwen_engine`",
         f"prefill {' / '.join(_x(x['prefill_vs_llama_cpp']) for x in qs)}, decode "
         f"{' / '.join(_x(x['decode_vs_llama_cpp']) for x in qs)} at {' / '.join(str(x['context']) for x in qs)} "
         "tokens"],
    ]
    return (table(["what", "command", "result"], rows)
            + "\n\nEach row's file, date and load are in docs/results.md, Sources; the speed goals are there too.")


# --- the blocks ----------------------------------------------------------------------------------------

def sources(r: Results) -> str:
    """Every result file a block read, its provenance and whether it is stale (not compared by --check)."""
    read = sorted({s for b in BLOCKS.values() for s in b.sources})
    rows = []
    for name in read:
        prov = r.provenance(name)
        state, cleared = r.staleness(name)
        if not state.known:
            status = "provenance unknown (no commit to compare with)"
        elif state.stale:
            status = (f"stale: {len(state.changes)} commit(s) to {', '.join(prov.measures)} since "
                      f"{state.since[:7] if state.since else '?'}")
        else:
            status = "current" + (f" (rerun found the same: `{cleared}`)" if cleared else "")
        at = f"ran at {prov.commit[:7]}{' with uncommitted changes' if prov.dirty else ''}" if prov.commit else \
            f"stored in {prov.recorded_in[:7]}" if prov.recorded_in else "commit unknown"
        unknown = f"; unknown: {', '.join(prov.unknown)}" if prov.unknown else ""
        rows.append([f"`{name}`", f"`{prov.command.strip()}`" if prov.command else "not recorded",
                     f"{at}, {(prov.date or '?')[:10]}{unknown}", status])
    return table(["file", "command", "provenance", "status"], rows)


def _quick(r: Results) -> Mapping[str, Any]:
    return r("quickstart.json")


def quickstart(r: Results) -> str:
    data = _quick(r)
    rows = [[COMPARATORS.get(c["versus"], c["versus"]), f"{pct(c['cost_delta_pct'])} {ci(c['cost_delta_ci95'])}",
             f"{points(c['pass_delta'])} {ci(c['pass_delta_ci95'], '+.3f')}", str(c["heldout_tasks"]),
             words(c)] for c in need(data, "headline")]
    return (table([f"quickstart's choice {data['choice']} vs (a demonstration)", "cost [95% CI]", "pass [95% CI]",
                   "held-out tasks", "in words"], rows)
            + f"\n\nWall time {data['wall']} ({data['dtype_resolved']}; {data['timing']}), peak RSS "
              f"{data['peak_rss_gb']:.1f} GB. "
            + source("quickstart.json"))


def readme_quickstart(r: Results) -> str:
    data = _quick(r)
    full = next(c for c in need(data, "headline") if c["versus"] == "expert:full")
    return (f"Measured here: {data['wall']} after the install ({data['dtype_resolved']}; {data['timing']}); its "
            f"choice is "
            f"{pct(full['cost_delta_pct'])} {ci(full['cost_delta_ci95'])} in cost against the full cache over "
            f"{full['heldout_tasks']} held-out tasks that every run of it reuses, so that is a demonstration, not a "
            "blind result (docs/results.md has the blind pooled ones).")


BLOCKS: dict[str, Block] = {
    "quickstart": Block(("quickstart.json",), quickstart),
    "readme-quickstart": Block(("quickstart.json",), readme_quickstart),
    "search-goal": Block(("ablation-mixed-arms.json", "ablation-horizon-arms.json"), search_goal),
    "search-mixed": Block(("ablation-mixed-arms.json",), arms_table("ablation-mixed-arms.json")),
    "search-horizon": Block(("ablation-horizon-arms.json",), arms_table("ablation-horizon-arms.json")),
    "search-earlier": Block(tuple(n for n, _ in EARLIER), earlier_pools),
    "transfer-judge": Block(("rejudge-mixed-qwen-judged1-qwen2.5-coder-1.5b-both.json",), rejudged),
    "transfer-live": Block(("live-qwen2.5-coder-1.5b-pages-end.json",), live),
    "transfer-bfcl": Block(BFCL_RUNS, bfcl),
    "bfcl-calibration": Block(BFCL_CALIBRATION, bfcl_calibration),
    "serve-framework": Block(("framework-agent-qwen2.5-coder-1.5b-pages-end.json",), framework),
    "transfer-log": Block(("log-search-logs-default1-probe-check.json",), log_check),
    "speed": Block(("speed-summary.json", "engine-qwen2.5-coder-1.5b.json"), speed),
    "fidelity": Block(("fidelity-validation.json",), spread_fidelity),
    "fidelity-first": Block(("fidelity-validation-mixed.json",), first_fidelity),
    "throughput": Block(THROUGHPUT_RUNS, throughput),
    "qwen-gguf": Block(("engine-qwen2.5-coder-1.5b-gguf.json",), qwen_gguf),
    "live-throughput": Block((LIVE_THROUGHPUT,), live_throughput),
    "survival": Block(("ablation-survival.json",), survival),
    "readme-bench": Block(("engine-gemma-3-270m.json", "engine-qwen2.5-coder-1.5b.json", "server-load.json",
                           "server-limits-gemma-3-270m.json", "eval-throughput.json", "ray-executor.json",
                           "screen-speed-gemma-3-270m-horizon.json", "weight-formats-gemma-3-270m.json"),
                          readme_bench),
    **DOC_BLOCKS,
    "sources": Block((), sources),
}
STATUS_BLOCKS = frozenset({"sources"})
"""Blocks whose text depends on the code's history, not the result files: ``--check`` does not compare them."""
