"""The paged-report live suite: an agent must read a long report page by page and answer from a
fact it read many tool calls earlier.

Each task is a report of ``pages`` pages (about 200 tokens each: service check records, with one
planted fact on page ``fact_page``). The agent gets one tool, ``read_page(cursor)``, that returns
page ``cursor`` and the next cursor; every page can be read once (a second read is refused: the
page's text is earlier in the conversation), so a fact whose page the cache policy dropped is
gone. Where the question is:

- ``--question-at start``: the user asks up front and the system prompt says to read the whole
  report first; an agent may still answer as soon as it finds the fact (Qwen2.5-Coder-1.5B does),
  and then no policy that keeps the newest page loses it;
- ``--question-at end``: the user asks the agent to read the report and answer the question printed
  after ``END OF REPORT`` on the last page, so every episode reads all the pages and answers from
  what its cache kept.

Read whole, an episode makes at least ``pages`` tool calls, and whether a policy keeps the fact
depends on how far back its page lies when the agent answers: with 14 pages, keeping the last 12
tool responses loses a fact on page 1 or 2 and keeps the rest; keeping 4 loses everything before
page 11.

Every task is also a complete recorded trajectory (the assistant's ``read_page`` calls and the
pages) with one probe after the last page, so the replay evaluator scores it like any task file
(``akv eval --suite FILE``) and ``akv live --suite FILE`` plays it live (``meta.live = "pages"``
selects the paged tools in :mod:`evals.cache.live`).

    python -m evals.tasks.paged --out live-pages.jsonl [--tasks 12] [--pages 14] [--seed 0] [--question-at end]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from evals.tasks.schema import Probe, Task
from evals.tasks.storage import save_jsonl

GENERATOR = "paged-report"
VERSION = "1.1.0"
PAGES_SYSTEM = """You are a careful agent. You have one tool, read_page(cursor), that returns one page of a report and \
the cursor of the next page. Read the report from cursor 0, one page per call, following next_cursor until a page \
says END OF REPORT. Each page can be read only once, so note what matters as you go. Then call \
submit_answer(answer) with the answer to the user's question, as short as possible."""

END_QUESTION_ASK = ("Read the whole report, then answer the question printed after END OF REPORT on its last "
                    "page, with submit_answer.")
_SERVICES = ("billing", "search", "auth", "ledger", "gateway", "mailer", "catalog", "scheduler", "metrics", "storage")
_FACTS = (  # (question, sentence with {value}, candidate values)
    ("What is the release code name given in the report?", "Note: the release code name is {value}.",
     ("HERON", "MARLIN", "KESTREL", "OSPREY", "PELICAN", "CONDOR")),
    ("Which engineer signed off the migration, according to the report?", "Note: the migration was signed off by "
     "{value}.", ("Ines Halvorsen", "Tomas Okafor", "Priya Raman", "Lena Brandt", "Omar Castell", "Yuki Tanabe")),
    ("What is the rollback ticket number in the report?", "Note: the rollback ticket is {value}.",
     ("RB-4417", "RB-2093", "RB-7731", "RB-5208", "RB-3362", "RB-8845")),
    ("In which region is the standby cluster, according to the report?", "Note: the standby cluster runs in {value}.",
     ("Frankfurt", "Osaka", "Montreal", "Sao Paulo", "Mumbai", "Dublin")),
)


def _page(rng: random.Random, page: int, lines: int) -> list[str]:
    out = []
    for j in range(lines):
        svc = rng.choice(_SERVICES)
        out.append(f"{page:02d}.{j:02d} {svc}-{rng.randint(1, 9)}: check {rng.randint(100, 999)} "
                   f"{rng.choice(('passed', 'passed', 'passed', 'slow', 'retried'))}, latency {rng.randint(4, 480)} ms")
    return out


def paged_task(index: int, seed: int, pages: int = 14, lines: int = 9, fact_page: int | None = None,
               split: str = "heldout", question_at: str = "start") -> Task:
    """One paged-report task (see the module docstring); ``fact_page`` (0-based) defaults to a page
    drawn from the seed. ``question_at``: ``start`` (the user asks up front) or ``end`` (the user
    asks to read the report and answer the question on its last page)."""
    if question_at not in ("start", "end"):
        raise ValueError(f"question_at must be 'start' or 'end', got {question_at!r}")
    if pages < 2 or lines < 1:
        raise ValueError(f"pages must be >= 2 and lines >= 1, got {pages} and {lines}")
    rng = random.Random(f"{seed}:{index}")
    question, sentence, values = _FACTS[index % len(_FACTS)]
    value = rng.choice(values)
    where = rng.randrange(pages) if fact_page is None else fact_page
    if not 0 <= where < pages:
        raise ValueError(f"fact_page must lie in [0, {pages}), got {where}")
    ask = question if question_at == "start" else END_QUESTION_ASK
    messages: list[dict] = [{"role": "system", "content": PAGES_SYSTEM}, {"role": "user", "content": ask}]
    for k in range(pages):
        body = _page(rng, k, lines)
        if k == where:
            body.insert(rng.randrange(1, lines), sentence.format(value=value))
        tail = f"next_cursor: {k + 1}" if k + 1 < pages else "END OF REPORT"
        if k + 1 == pages and question_at == "end":
            tail += f"\nQuestion: {question}"
        call = {"id": f"call_{k}", "type": "function", "function": {"name": "read_page",
                                                                    "arguments": f'{{"cursor": {k}}}'}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}",
                         "content": f"[page {k + 1} of {pages}]\n" + "\n".join(body) + f"\n{tail}"})
    evidence = 3 + 2 * where
    probe = Probe(after_message=len(messages) - 1, question=question, answer=value,
                  cloze_prefix=sentence.split("{value}")[0].removeprefix("Note: ").capitalize().rstrip(),
                  candidates=tuple(values), evidence_ids=(evidence,), kind="fact")
    return Task(id=f"paged/{split}/{index:03d}", messages=tuple(messages), probes=(probe,), family="paged-report",
                split=split, domain="ops", seed=seed, generator=GENERATOR, generator_version=VERSION,
                meta={"live": "pages", "pages": pages, "fact_page": where, "question_at": question_at})


def paged_suite(tasks: int = 12, pages: int = 14, seed: int = 0, split: str = "heldout",
                question_at: str = "start") -> list[Task]:
    """``tasks`` tasks whose fact pages are spread evenly over the report (first to last)."""
    spread = [round(i * (pages - 1) / max(1, tasks - 1)) for i in range(tasks)]
    return [paged_task(i, seed, pages, fact_page=spread[i], split=split, question_at=question_at)
            for i in range(tasks)]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.tasks.paged", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON-lines task file to write")
    p.add_argument("--tasks", type=int, default=12)
    p.add_argument("--pages", type=int, default=14)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--question-at", choices=("start", "end"), default="start",
                   help="where the question is: in the user's request, or on the report's last page")
    args = p.parse_args(argv)
    if args.tasks < 1 or args.pages < 2:
        p.error(f"--tasks must be >= 1 and --pages >= 2, got {args.tasks} and {args.pages}")
    if Path(args.out).is_dir():
        p.error(f"--out {args.out} is a directory; give a file name such as {Path(args.out) / 'live-pages.jsonl'}")
    path = save_jsonl(paged_suite(args.tasks, args.pages, args.seed, question_at=args.question_at), Path(args.out))
    print(f"wrote {args.tasks} tasks of {args.pages} pages to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
