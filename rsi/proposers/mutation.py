"""The offline proposer: edits programs at the AST level, seeded, no LLM needed.

Operators (one per proposal, chosen at random):

- ``constant``: scale or shift a numeric literal (thresholds, defaults, space bounds);
- ``compare``: turn a comparison around (``<`` / ``<=``, ``>`` / ``>=``, ``==`` / ``!=``);
- ``boolop``: ``and`` <-> ``or``;
- ``arith``: ``+`` <-> ``-``, or swap the terms of a subtraction (scoring terms);
- ``drop_rule``: remove one statement from a block (a rule) that has others;
- ``reorder``: swap two adjacent statements (rule order);
- ``crossover``: replace a function with the same-named function of a second parent, or take
  some of its ``DEFAULTS``;
- ``fragment``: splice in a rule from the fragment library (``search_spaces.cache.fragments``: keep
  mentioned tool responses, drop superseded records, protect the task, reposition after N dropped
  tokens) -- a structural edit that creates behaviour the parent does not have.

The operator of each proposal is chosen by a UCB1 bandit (``rsi.proposers.bandit``) rebuilt at
every call from the archive: each earlier offspring's reward (scored, entered the front,
hypervolume gain) is credited to the operator that made it. Within one call, an edit that does
not apply or is refused counts as a pull with reward 0, and a proposal as a pull at the arm's
current mean (0.5 for a new arm), so one generation spreads over the promising operators.

Each result must pass ``check_program`` and a smoke run in the sandbox on a real trajectory
before it is proposed; invalid edits are retried and counted, so the validity rate is reported.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import random
from collections.abc import Sequence
from typing import Any

from rsi.archive import ArchiveView, Record
from rsi.proposers.bandit import UCB1, bandit_from_archive, ref_cost_of
from rsi.proposers.base import ParentView, Proposal, Proposer
from search_spaces import Episode, check_program, run_program
from search_spaces.cache.fragments import FRAGMENTS, compose, missing

OPERATORS = ("constant", "compare", "boolop", "arith", "drop_rule", "reorder", "crossover", "fragment")
_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _numbers(tree: ast.AST) -> list[ast.Constant]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) in (int, float)]


def _blocks(tree: ast.AST) -> list[list[ast.stmt]]:
    out = []
    for node in ast.walk(tree):
        for name in ("body", "orelse"):
            block = getattr(node, name, None)
            if (isinstance(block, list) and block and isinstance(block[0], ast.stmt)
                    and not isinstance(node, ast.Module)):
                out.append(block)
    return out


def _mutate(tree: ast.Module, op: str, rng: random.Random, other: ast.Module | None) -> str | None:
    """Apply ``op`` to ``tree`` in place; returns a one-line note, or None if it does not apply."""
    if op == "constant":
        nums = _numbers(tree)
        if not nums:
            return None
        n = rng.choice(nums)
        old = n.value
        if isinstance(old, int):
            n.value = rng.choice([old + 1, max(0, old - 1), old * 2, max(1, old // 2)])
        else:
            n.value = round(float(old) * rng.choice([0.5, 0.8, 1.25, 2.0]), 6)  # type: ignore[arg-type]
        return f"constant {old!r} -> {n.value!r}" if n.value != old else None
    if op == "compare":
        comps = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)
                 and any(type(o) in _FLIP for o in n.ops)]
        if not comps:
            return None
        c = rng.choice(comps)
        i = rng.choice([i for i, o in enumerate(c.ops) if type(o) in _FLIP])
        old_op = type(c.ops[i])
        c.ops[i] = _FLIP[old_op]()
        return f"comparison {old_op.__name__} -> {type(c.ops[i]).__name__}"
    if op == "boolop":
        bools = [n for n in ast.walk(tree) if isinstance(n, ast.BoolOp)]
        if not bools:
            return None
        bo = rng.choice(bools)
        bo.op = ast.Or() if isinstance(bo.op, ast.And) else ast.And()
        return f"boolean operator -> {type(bo.op).__name__}"
    if op == "arith":
        bins = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add | ast.Sub)]
        if not bins:
            return None
        b = rng.choice(bins)
        if isinstance(b.op, ast.Sub) and rng.random() < 0.5:
            b.left, b.right = b.right, b.left
            return "swapped the terms of a subtraction"
        b.op = ast.Sub() if isinstance(b.op, ast.Add) else ast.Add()
        return f"arithmetic -> {type(b.op).__name__}"
    if op == "drop_rule":
        blocks = [blk for blk in _blocks(tree) if len(blk) >= 2]
        cands = [(blk, i) for blk in blocks for i, st in enumerate(blk)
                 if not isinstance(st, ast.Return | ast.FunctionDef)]
        if not cands:
            return None
        blk, i = rng.choice(cands)
        del blk[i]
        return f"removed a rule (statement {i} of a block)"
    if op == "reorder":
        blocks = [blk for blk in _blocks(tree) if len(blk) >= 2]
        pairs = [(blk, i) for blk in blocks for i in range(len(blk) - 1)
                 if not isinstance(blk[i + 1], ast.Return) and not isinstance(blk[i], ast.Return)]
        if not pairs:
            return None
        blk, i = rng.choice(pairs)
        blk[i], blk[i + 1] = blk[i + 1], blk[i]
        return f"reordered statements {i} and {i + 1} of a block"
    if op == "crossover" and other is not None:
        mine = {f.name: i for i, f in enumerate(tree.body) if isinstance(f, ast.FunctionDef)}
        theirs = {f.name: f for f in other.body if isinstance(f, ast.FunctionDef)}
        shared = sorted(set(mine) & set(theirs) - {"space"})
        if shared and rng.random() < 0.7:
            name = rng.choice(shared)
            tree.body[mine[name]] = copy.deepcopy(theirs[name])
            return f"crossover: took {name}() from the second parent"
        d_mine = _defaults(tree)
        d_theirs = _defaults(other)
        if d_mine is not None and d_theirs is not None:
            keys = {ast.literal_eval(k): i for i, k in enumerate(d_mine.keys) if isinstance(k, ast.Constant)}
            changed = []
            for k, v in zip(d_theirs.keys, d_theirs.values):
                if isinstance(k, ast.Constant) and k.value in keys and rng.random() < 0.5:
                    d_mine.values[keys[k.value]] = copy.deepcopy(v)
                    changed.append(k.value)
            if changed:
                return f"crossover: took DEFAULTS {', '.join(map(str, changed))} from the second parent"
    return None


def _defaults(tree: ast.Module) -> ast.Dict | None:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "DEFAULTS" and isinstance(node.value, ast.Dict)):
            return node.value
    return None


class MutationProposer(Proposer):
    """AST mutation and crossover (see the module docstring).

    Args:
        smoke: trajectories used to smoke-test each edit in the sandbox.
        max_attempts: edits tried per proposal before giving up.
    """

    name = "mutation"
    operators: tuple[str, ...] = OPERATORS

    def __init__(self, smoke: Sequence[Episode], max_attempts: int = 12):
        super().__init__()
        self.smoke = list(smoke)
        self.max_attempts = max_attempts
        self.bandit: UCB1 | None = None  # the last call's bandit (for inspection and reports)

    def propose(self, parents: Sequence[ParentView], archive: ArchiveView[Record[Any]], n: int,
                rng: random.Random, seen: set[str]) -> list[Proposal]:
        if not parents:
            return []
        bandit = self.bandit = self._bandit(archive)
        out: list[Proposal] = []
        for _ in range(n):
            for _attempt in range(self.max_attempts):
                parent = parents[rng.randrange(len(parents))]
                op = bandit.choose()
                other = parents[rng.randrange(len(parents))] if op == "crossover" and len(parents) > 1 else None
                if op == "crossover" and (other is None or other.source == parent.source):
                    bandit.update(op, 0.0)
                    continue
                proposal = self._try(parent, other, op, rng, seen)
                bandit.pulled(op, proposal is not None, self.stats.operators)
                if proposal is None:
                    continue
                out.append(proposal)
                seen.add(source_hash(proposal.source))
                break
        return out

    def _bandit(self, archive: ArchiveView[Record[Any]]) -> UCB1:
        """The operator bandit rebuilt from ``archive`` (a subclass with other objectives overrides it)."""
        return bandit_from_archive(self.operators, archive, ref_cost_of(archive))

    def _checks(self, source: str) -> bool:
        """Whether an edit passes the static check of its track's program API (cache programs here)."""
        return check_program(source).ok

    def _smoke_ok(self, source: str) -> bool:
        """Whether a checked edit runs in the sandbox on the smoke trajectories."""
        return not self.smoke or run_program(source, {}, self.smoke).ok

    def _try(self, parent: ParentView, other: ParentView | None, op: str, rng: random.Random,
             seen: set[str]) -> Proposal | None:
        if op == "fragment":
            absent = missing(parent.source)
            if not absent:
                return None
            name = rng.choice(absent)
            try:
                source = compose(parent.source, name)
            except (ValueError, RecursionError, SyntaxError):  # FragmentError is a ValueError
                return None
            note = f"fragment: {name} ({FRAGMENTS[name].doc})"
        else:
            tree = ast.parse(parent.source)
            other_tree = ast.parse(other.source) if other is not None else None
            mutated = _mutate(tree, op, rng, other_tree)
            if mutated is None:
                return None
            note = mutated
            ast.fix_missing_locations(tree)
            try:
                source = ast.unparse(tree) + "\n"
            except (ValueError, RecursionError):
                return None
        if source_hash(source) in seen:
            return None
        self.stats.attempts += 1
        if not self._checks(source):
            return None
        if not self._smoke_ok(source):
            return None
        self.stats.valid += 1
        parents: tuple[Any, ...] = (parent.candidate.id,) + ((other.candidate.id,) if other is not None else ())
        return Proposal(source, parents, f"mutation:{op}", note)
