"""Evolve survival programs on the simulator: ``akv survival-search --evolve CONFIG --run-dir DIR``.

The generation loop both tracks share (``rsi.loop``: proposals saved before they are tuned, the
refusal record, the tuning-only arm) applied to tool-gap survival programs
(docs/survival-api.md), scored by the token-exact simulator (``evals.survival.simulate``):

- **Traces.** The config names train and held-out traces (kind x seed, generated and saved in
  ``RUN_DIR/traces/``); held-out traces must be other (kind, seed) pairs than train's, and a
  config should give held-out a kind train does not have.
- **Baselines.** Every built-in family is tuned on train by its own Optuna study over its own
  ``space`` (trial 0: its defaults) with the same trial budget as each evolved program; the best
  trial of each (lowest mean p95 resume TTFT, then fewest recompute tokens) is an expert.
- **Generation 0** tunes the seed programs (each family's program form, ``search_spaces/survival/seeds``).
- **Generations 1..G**: parents (the front, then the best on train) go to the mutation proposer
  (``rsi.survival.proposer``: the cache proposer's operators and UCB1 bandit; every edit is
  checked and smoke-run in the survival sandbox); each proposal is checked again (a refused one
  is archived as a failure with its reason) and tuned by the tuner both tracks share
  (``rsi.tuning.run_study`` with :class:`TraceScoring`; trial 0 = the program's ``DEFAULTS``, then
  its ``space``); the study's Pareto trials enter the archive.
- **Cascade.** A trial is first simulated on the first ``cascade_traces`` train traces; when the
  mean there is dominated by a front member's mean on the same traces it is pruned without
  simulating the rest (the shared tuner's two stages, with traces as units).
- **Held-out.** The front, every baseline and the best evolved candidate are simulated on the
  held-out traces. The headline (``headline.json``) compares the best evolved candidate (chosen on
  train) with the best tuned family (chosen on train) on held-out, paired over traces with 95%
  bootstrap intervals (``rsi.survival.archive.paired_over_traces``).
- **Outputs**: ``archive.json``, ``pareto.json``, ``headline.json``, ``evaluations.jsonl`` (every
  simulation, fsync'ed: a re-run in the same directory takes finished ones from it and replays
  the same decisions), ``proposals/g<N>.json``, ``programs/<sha>.py``, ``report.html`` with the
  front plot (``rsi.survival.report``) and MLflow runs (``rsi.survival.tracking``).
- **Ablation** (``ablation: true``): after the generations, the seed programs are tuned again in new
  studies (``rsi.loop.run_arm``) until that arm has asked for as many simulations as the
  generations did; its best on train is the expert ``tuning-only`` and the headline's ``ablation``
  compares the best evolved candidate with it on held-out, paired over traces (``ablation.json``:
  the budgets and the arm's candidates).
- ``--confirm-replay N``: the top ``N`` candidates on held-out are replayed on the real engine
  (``evals.survival.replay``) on the held-out traces; ``confirm.json`` sets replay beside simulation.

Everything is seeded: the same config in a new directory gives the same archive.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import optuna

from engine.errors import AKVError
from evals.survival import SimConfig, Trace, generate_trace, load_calibration, save_trace, simulate
from evals.survival.calibration import Calibration, assumed_gpu, default_calibration
from rsi.archive import Status, candidate_id
from rsi.loop import ARM, admit, generation, run_arm
from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.rundir import SURVIVAL, RunDir, RunDirError, write_json
from rsi.store import RowStore
from rsi.survival.archive import (
    RECOMPUTE,
    TTFT,
    SimScore,
    SurvivalArchive,
    SurvivalCandidate,
    paired_over_traces,
    score_of,
)
from rsi.survival.config import EvolveConfig, TraceSet
from rsi.survival.proposer import SurvivalLLMProposer, SurvivalMutationProposer, record_requests
from rsi.tuning import Direction, TuneResult, drawn, make_sampler, run_study, study_seed
from search_spaces.errors import ProgramFailure
from search_spaces.sandbox import CheckResult
from search_spaces.survival import (
    check_program,
    get_survival_family,
    make_survival_policy,
    suggest_survival_params,
    survival_seed_source,
)

log = logging.getLogger("akv.survival")
optuna.logging.set_verbosity(optuna.logging.ERROR)


def calibration_of(name: str) -> Calibration:
    """``assumed-gpu`` (stated GPU speeds), a file, or a model's stored calibration."""
    if name == "assumed-gpu":
        return assumed_gpu()
    if name.endswith(".json") or Path(name).is_file():
        return load_calibration(name)
    return default_calibration(name)


class CallBudget:
    """A survival policy that fails (``ProgramFailure``) once it has been asked more than ``limit``
    times in one run: a policy that re-decides every few milliseconds (a tiny TTL) would make one
    simulation take minutes; its trial fails with this reason instead, as a sandbox time limit would."""

    def __init__(self, inner: Any, limit: int) -> None:
        self.inner, self.limit, self.calls = inner, limit, 0
        self.name = str(inner.name)

    def decide(self, request: Any) -> Any:
        self.calls += 1
        if self.calls > self.limit:
            raise ProgramFailure(f"more than {self.limit} policy calls in one simulation (simulator."
                                 "max_calls_per_turn x turns); TTLs too short for this trace")
        return self.inner.decide(request)

    def close(self) -> None:
        self.inner.close()


# ---------------------------------------------------------------------------------------------- store


class SimStore(RowStore[dict[str, Any]]):
    """Every simulation of the run (key -> metrics) in ``rsi.store``'s checksummed, fsync'ed JSON lines;
    records of the older form (``{"key", "metrics"}``, no checksum) load unverified. ``simulated``
    counts the simulations this process ran."""

    LEGACY_ROW = "metrics"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.simulated = 0

    def encode(self, row: dict[str, Any]) -> dict[str, Any]:
        return dict(row)

    def decode(self, row: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(row, dict):
            raise TypeError("a simulation row is an object")
        return row


def policy_key(spec: str, program: str, params: Mapping[str, Any]) -> str:
    text = json.dumps([spec, program, dict(params)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


KEPT_METRICS = ("ok", "error", "status", TTFT, RECOMPUTE, "jct_mean_s", "jct_p95_s", "resume_ttft_p50_s",
                "peak_pool_bytes", "prefill_tokens", "evicted_tokens", "swap_out_bytes", "discarded_tokens", "actions")


# ---------------------------------------------------------------------------------------------- tuning


@dataclass(frozen=True)
class TraceScoring:
    """A parameter set's p95 resume TTFT and recompute tokens (both down) over the train traces
    (:class:`rsi.tuning.Scoring`): the first ``first`` traces, then the rest; ``front(k)`` gives the
    archive front's scores on the first ``k``."""

    units: int
    first: int
    run: Callable[[dict[str, Any], Sequence[int]], list[dict[str, Any]]]
    front: Callable[[int], list[SimScore]]
    unit: ClassVar[str] = "traces"
    directions: ClassVar[tuple[Direction, Direction]] = ("minimize", "minimize")

    def evaluate(self, params: dict[str, Any], start: int, stop: int) -> list[dict[str, Any]]:
        return self.run(params, range(start, stop))

    def score(self, results: Sequence[Mapping[str, Any]]) -> SimScore:
        return score_of(results)

    def refusal(self, results: Sequence[Mapping[str, Any]], score: SimScore, whole: bool) -> str | None:
        return None if score.ok else score.error

    def point(self, score: SimScore) -> tuple[float, float]:
        return score.resume_ttft_p95_s, -score.recompute_tokens

    def values(self, score: SimScore) -> tuple[float, float]:
        return score.resume_ttft_p95_s, score.recompute_tokens

    def reference(self, k: int) -> list[SimScore]:
        return self.front(k)


# ---------------------------------------------------------------------------------------------- the loop


@dataclass(frozen=True)
class ArmSummary:
    """What the tuning-only arm asked for (simulations), against the generations' budget, and its choice."""

    budget: int
    spent: int
    rounds: int
    choice: str | None


@dataclass
class EvolveResult:
    run_dir: Path
    archive: SurvivalArchive
    headline: dict[str, Any]
    seconds: float
    simulations: int = 0
    pruned: int = 0
    notes: list[str] = field(default_factory=list)


class SurvivalEvolution:
    """One run in ``run_dir`` (a re-run in the same directory reuses its stored simulations)."""

    def __init__(self, config: EvolveConfig, run_dir: str | Path, *, proposer: Proposer | None = None,
                 tracker: Any = None, say: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.files = RunDir(self.run_dir)
        if self.files.has_config() and self.files.raw_config() != config.to_dict():
            raise RunDirError(f"{self.run_dir} holds a run with another config; use a new run directory",
                              field="run_dir", value=str(self.run_dir))
        self.files.record_track(SURVIVAL)
        self.files.write("config.json", config.to_dict())
        for sub in ("programs", "proposals", "traces"):
            (self.run_dir / sub).mkdir(exist_ok=True)
        self.store = SimStore(self.run_dir / "evaluations.jsonl")
        self.sim = SimConfig(calibration=calibration_of(config.calibration), pool_tokens=config.pool_tokens,
                             host_tokens=config.host_tokens, max_batch=config.max_batch)
        self.train = self._make_traces("train", config.train)
        self.heldout = self._make_traces("heldout", config.heldout)
        self.archive = SurvivalArchive()
        self.seen: set[str] = set()
        self.pruned = 0
        self._proposer = proposer
        self.tracker = tracker
        self.say = say or (lambda text: None)
        self.ref = (1.0, 1.0)  # hypervolume reference (p95 TTFT, recompute), fixed once the baselines are tuned
        self.spent: dict[str, int] = {}  # phase -> simulations asked for (stored or not)
        self.phase = "baselines"
        self.arm: ArmSummary | None = None

    def _make_traces(self, split: str, spec: TraceSet) -> list[tuple[str, Trace]]:
        out = []
        for kind, seed in spec.ids():
            tr = generate_trace(kind, spec.sessions, seed=seed, time_scale=spec.time_scale,
                                token_scale=spec.token_scale)
            tid = f"{split}-{kind}-s{seed}"
            save_trace(tr, self.run_dir / "traces" / f"{tid}.jsonl")
            out.append((tid, tr))
        return out

    # ------------------------------------------------------------------ evaluation

    def _run(self, spec: str, program: str, source: str | None, params: Mapping[str, Any],
             traces: Sequence[tuple[str, Trace]]) -> list[dict[str, Any]]:
        pk = policy_key(spec, program, params)
        self.spent[self.phase] = self.spent.get(self.phase, 0) + len(traces)
        out = []
        for tid, tr in traces:
            key = f"{pk}/{tid}"
            m = self.store.get(key)
            if m is None:
                policy = ({"source": source, "params": dict(params)} if spec == "program"
                          else {"name": spec, "params": dict(params)})
                turns = sum(len(sess.turns) for sess in tr.sessions)
                try:
                    budget = CallBudget(make_survival_policy(policy, self.sim.limits),
                                        self.config.max_calls_per_turn * turns)
                except AKVError as err:  # a refused program or a parameter outside its DEFAULTS
                    full = {"ok": False, "error": str(err), "status": "invalid"}
                else:
                    full = simulate(tr, budget, self.sim)
                m = {k: full.get(k) for k in KEPT_METRICS}
                self.store.put(key, m)
                self.store.simulated += 1
            out.append(m)
        return out

    def _source(self, c: SurvivalCandidate) -> str | None:
        return self.files.program(c.program) if c.spec == "program" else None

    def runs(self, c: SurvivalCandidate, split: str) -> list[dict[str, Any]]:
        """``c``'s per-trace simulator metrics on ``split`` (``train`` or ``heldout``)."""
        return self._run(c.spec, c.program, self._source(c), c.params, self.train if split == "train" else self.heldout)

    def _reference(self, k: int) -> list[SimScore]:
        """The front's scores on the first ``k`` train traces (those that could be scored)."""
        scores = (score_of(self._run(c.spec, c.program, self._source(c), c.params, self.train[:k]))
                  for c in self.archive.front())
        return [s for s in scores if s.ok]

    def _tune(self, spec: str, program: str, source: str | None, label: str, cascade: int) -> TuneResult[SimScore]:
        """The shared study (``rsi.tuning.run_study``) of ``config.trials`` trials: trial 0 runs the
        defaults (a program's ``DEFAULTS``, a family's parameters), later ones draw from the space."""
        space: Callable[[optuna.Trial], dict[str, Any]]
        if spec == "program":
            assert source is not None

            def space(trial: optuna.Trial) -> dict[str, Any]:
                result = suggest_survival_params(source, trial)
                return drawn(result)

            defaults: dict[str, Any] = {}
        else:
            fam = get_survival_family(spec)
            space, defaults = fam.space, asdict(fam.params())

        def evaluate(params: dict[str, Any], idx: Sequence[int]) -> list[dict[str, Any]]:
            return self._run(spec, program, source, params, [self.train[i] for i in idx])

        name = f"{label}-{program[:8]}"
        scoring = TraceScoring(len(self.train), cascade, evaluate, self._reference)
        study = optuna.create_study(directions=list(scoring.directions),
                                    sampler=make_sampler("tpe", study_seed(self.config.seed, name)))
        result = run_study(study, self.config.trials, lambda t: dict(defaults) if t.number == 0 else space(t),
                           scoring)
        self.pruned += sum(t.state == "pruned" for t in result.trials)
        return result

    # ------------------------------------------------------------------ stages

    def run(self) -> EvolveResult:
        t0 = time.perf_counter()
        cfg = self.config
        if self.tracker is not None:
            self.tracker.start(cfg.to_dict() | {"name": cfg.name})
        self.say(f"survival-evolve {cfg.name}: {len(self.train)} train / {len(self.heldout)} held-out traces, "
                 f"{len(cfg.families)} families, {len(cfg.seeds)} seeds, {cfg.generations} generations, "
                 f"{cfg.trials} trials each; run dir {self.run_dir}")
        status = "FAILED"
        try:
            self._baselines()
            self.phase = "seeds"
            for name in cfg.seeds:
                self.tune_program(survival_seed_source(name), f"seed:{name}", 0, (), "seed")
            self.close_generation(0)
            proposer = self._proposer or self._make_proposer()
            self.phase = "generations"
            for g in range(1, cfg.generations + 1):
                generation(self, g, proposer)
            if cfg.ablation:
                self._tuning_arm()
            headline = self._heldout_and_headline()
            status = "FINISHED"
        finally:
            self._write_outputs()
            figures: list[Path] = []
            if status == "FINISHED":
                from rsi.survival.report import write_report

                figures = write_report(self.run_dir)
            if self.tracker is not None:
                self.tracker.finish(self.pareto_rows() if status == "FINISHED" else [], figures, status)
        seconds = time.perf_counter() - t0
        write_json(self.run_dir / "state.json", {"status": status.lower(), "seconds": seconds,
                                                 "simulations_this_run": self.store.simulated,
                                                 "simulations_stored": len(self.store), "pruned": self.pruned})
        return EvolveResult(self.run_dir, self.archive, headline, seconds, self.store.simulated, self.pruned)

    def _baselines(self) -> None:
        for fam in self.config.families:
            trials = self._tune(fam, fam, None, f"family:{fam}", 0).trials
            done = [t for t in trials if t.train is not None and t.state == "complete"]
            if not done:
                reason = next((t.reason for t in trials if t.reason), "every trial failed")
                c = SurvivalCandidate(candidate_id(fam, {}), fam, f"tuned:{fam}", {}, 0, (), "expert-tuned",
                                      status=Status.FAILED, reason=reason, expert=True, spec=fam)
            else:
                best = min(done, key=lambda t: (t.train.resume_ttft_p95_s, t.train.recompute_tokens, t.number))  # type: ignore[union-attr]
                c = SurvivalCandidate(candidate_id(fam, best.params), fam, f"tuned:{fam}", best.params, 0, (),
                                      "expert-tuned", train=best.train, expert=True, spec=fam)
            self.archive.add(c)
            self._track(c, None)
            if c.train is not None:
                self.say(f"  tuned:{fam:17s} p95 resume TTFT {c.train.resume_ttft_p95_s:.3f} s, recompute "
                         f"{c.train.recompute_tokens:.0f} tokens/trace")
        experts = self.archive.scored(experts=True)
        self.ref = (1.1 * max((c.train.resume_ttft_p95_s for c in experts if c.train), default=1.0),
                    1.1 * max([1.0] + [c.train.recompute_tokens for c in experts if c.train]))

    # ------------------------------------------------------------------ the Track of rsi.loop

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def per_generation(self) -> int:
        return self.config.per_generation

    @property
    def generations(self) -> int:
        return self.config.generations

    def proposed(self, proposals: Sequence[Proposal], proposer: Proposer) -> None:
        self.say(f"generation {len(self.archive.hv_history)}: {len(proposals)} proposals")

    def refused(self, sha: str, label: str, g: int, parents: tuple[str, ...], proposer: str, reason: str,
                source: str) -> None:
        c = self.archive.add(SurvivalCandidate(candidate_id(sha, {}), sha, label, {}, g, parents, proposer,
                                               status=Status.REFUSED, reason=reason))
        self._track(c, source)
        self.say(f"  {label:20s} refused: {reason}")

    def tune_program(self, source: str, label: str, g: int, parents: tuple[str, ...], proposer: str,
                     note: str = "") -> None:
        admitted = admit(self, source, label, g, parents, proposer)
        if admitted is None:
            return
        sha, _ = admitted
        result = self._tune("program", sha, source, label, self.config.cascade_traces)
        trials, best = result.trials, result.best
        if not best:
            reason = next((t.reason for t in trials if t.state == "failed"), "every trial was pruned")
            if any(t.state == "failed" for t in trials):
                c = self.archive.add(SurvivalCandidate(candidate_id(sha, {}), sha, label, {}, g, parents, proposer,
                                                       status=Status.FAILED, reason=reason))
                self._track(c, source)
            self.say(f"  {label:20s} no scored trial: {reason}")
            return
        for t in best:
            c = self.archive.add(SurvivalCandidate(candidate_id(sha, t.params), sha, label, t.params, g, parents,
                                                   proposer, train=t.train, reason=note))
            self._track(c, source)
        top = min(best, key=lambda t: (t.train.resume_ttft_p95_s, t.train.recompute_tokens))  # type: ignore[union-attr]
        assert top.train is not None
        self.say(f"  {label:20s} p95 resume TTFT {top.train.resume_ttft_p95_s:.3f} s, recompute "
                 f"{top.train.recompute_tokens:.0f} ({proposer}{': ' + note if note else ''})")

    def _make_proposer(self) -> Proposer:
        """The configured proposer; both check programs on decision points of a train simulation."""
        requests = record_requests(self.train[0][1], self.sim)
        if self.config.llm is not None:
            return SurvivalLLMProposer(self.config.llm, requests, self.ref, self.run_dir)
        return SurvivalMutationProposer(requests, self.ref)

    def check(self, source: str) -> CheckResult:
        return check_program(source)

    def parents(self) -> list[ParentView]:
        chosen = list(self.archive.front())
        for c in sorted(self.archive.scored(), key=lambda c: c.rank_key):
            if c not in chosen:
                chosen.append(c)
        baselines = {c.label: c.train.to_dict() for c in self.archive.candidates if c.expert and c.train is not None}
        views = []
        for c in chosen[:self.config.parents]:
            source = self._source(c)
            assert source is not None
            views.append(ParentView(c, source, {"train": c.train.to_dict() if c.train else None,
                                                "baselines": baselines}))
        return views

    def close_generation(self, g: int) -> None:
        front = self.archive.front()
        hv = self.archive.hypervolume(self.ref)
        self.archive.hv_history.append({"generation": g, "hypervolume": hv, "front_size": len(front),
                                        "candidates": len(self.archive.candidates), "ref": list(self.ref)})
        if self.tracker is not None:
            self.tracker.generation(g, {"hypervolume": hv, "front_size": float(len(front)),
                                        "failures": float(len(self.archive.failures()))})
        self._write_outputs()
        self.say(f"  generation {g} done: front {len(front)}, hypervolume {hv:.4f}")

    def _tuning_arm(self) -> None:
        """The tuning-only arm (``rsi.loop.run_arm``) with the simulations the generations asked for;
        its best on train joins the archive as the expert ``tuning-only`` (outside the evolved front)."""
        budget = self.spent.get("generations", 0)
        arm = SurvivalArchive([c for c in self.archive.candidates if c.generation == 0 and not c.expert])
        self.phase = ARM
        rounds = run_arm(self, self.config.seeds, survival_seed_source, arm, budget, lambda: self.spent.get(ARM, 0))
        best = arm.best()
        if best is not None:
            self.archive.add(replace(best, id=f"{ARM}:{best.id}", label=ARM, parents=(best.id,), proposer=ARM,
                                     expert=True, reason=f"the tuning-only arm's best on train: {best.label}"))
        self.arm = ArmSummary(budget, self.spent.get(ARM, 0), rounds, best.label if best else None)
        self.say(f"tuning-only arm: {self.arm.spent} simulations in {rounds} rounds (the generations asked for "
                 f"{budget}); its best: {self.arm.choice}")
        write_json(self.run_dir / "ablation.json", {**asdict(self.arm), "candidates": [c.to_dict() for c in
                                                                                       arm.candidates]})

    # ------------------------------------------------------------------ held-out, headline

    def _heldout_and_headline(self) -> dict[str, Any]:
        best = self.archive.best()
        targets = self.archive.front() + self.archive.scored(experts=True) + ([best] if best else [])
        for c in targets:
            if self.archive.get(c.id).heldout is None:
                self.archive.with_heldout(c.id, score_of(self.runs(c, "heldout")))
                if self.tracker is not None:
                    self.tracker.heldout(self.archive.get(c.id))
        headline = self.headline()
        write_json(self.run_dir / "headline.json", headline)
        return headline

    def headline(self) -> dict[str, Any]:
        """The best evolved candidate vs the best tuned family, both chosen on train, paired over held-out
        traces; with the tuning-only arm, ``ablation``: the same against that arm's best."""
        families = [c for c in self.archive.scored(experts=True) if c.proposer != ARM]
        family = min(families, key=lambda c: c.rank_key) if families else None
        out = self._paired(self.archive.best(), family, "best evolved vs best tuned family")
        arm = next((c for c in self.archive.scored(experts=True) if c.proposer == ARM), None)
        if arm is not None:
            out["ablation"] = self._paired(self.archive.best(), arm, "best evolved vs the tuning-only arm's best") | (
                {"budget": asdict(self.arm)} if self.arm is not None else {})
        return out

    def _paired(self, best: SurvivalCandidate | None, family: SurvivalCandidate | None, what: str) -> dict[str, Any]:
        """``best`` against ``family`` (both chosen on train), paired over the held-out traces."""
        if best is None or family is None:
            return {"comparison": None, "reason": "no evolved candidate" if best is None else "no tuned family scored"}
        a, b = self.runs(best, "heldout"), self.runs(family, "heldout")
        if not (score_of(a).ok and score_of(b).ok):
            return {"comparison": None, "reason": "a held-out simulation failed"}
        n, s = self.config.bootstrap_samples, self.config.seed
        metrics = {key: paired_over_traces([float(r[key]) for r in a], [float(r[key]) for r in b], samples=n,
                                           seed=s).to_dict() for key in (TTFT, RECOMPUTE)}
        return {"comparison": f"{what} (both chosen on train), held-out, paired over traces",
                "policy": best.label, "policy_id": best.id, "policy_proposer": best.proposer,
                "policy_is_seed": best.proposer == "seed", "versus": family.label, "versus_id": family.id,
                "heldout_traces": [tid for tid, _ in self.heldout], "bootstrap_samples": n, "seed": s,
                "unit": "trace", "metrics": metrics,
                "per_trace": {"policy": [{TTFT: r[TTFT], RECOMPUTE: r[RECOMPUTE]} for r in a],
                              "versus": [{TTFT: r[TTFT], RECOMPUTE: r[RECOMPUTE]} for r in b]}}

    # ------------------------------------------------------------------ outputs

    def pareto_rows(self) -> list[dict[str, Any]]:
        rows = []
        for c in self.archive.front() + self.archive.scored(experts=True):
            rows.append({"id": c.id, "label": c.label, "program": c.program, "params": c.params, "expert": c.expert,
                         "spec": c.spec, "generation": c.generation, "proposer": c.proposer,
                         "parents": list(c.parents),
                         "train": c.train.to_dict() if c.train else None,
                         "heldout": c.heldout.to_dict() if c.heldout else None,
                         "train_resume_ttft_p95_s": c.train.resume_ttft_p95_s if c.train else None,
                         "train_recompute_tokens": c.train.recompute_tokens if c.train else None,
                         "heldout_resume_ttft_p95_s": c.heldout.resume_ttft_p95_s if c.heldout else None,
                         "heldout_recompute_tokens": c.heldout.recompute_tokens if c.heldout else None})
        return rows

    def _write_outputs(self) -> None:
        self.archive.save(self.run_dir / "archive.json")
        write_json(self.run_dir / "pareto.json", self.pareto_rows())

    def _track(self, c: SurvivalCandidate, source: str | None) -> None:
        if self.tracker is not None:
            self.tracker.candidate(c, source, [])
