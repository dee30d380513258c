"""Every measured figure of README.md and the docs, rendered from the JSON under ``bench/results/``.

    python -m bench.render_results           # rewrite each block in place (``make results``)
    python -m bench.render_results --check   # exit 1 naming each block whose committed figures differ

A block is the text between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` in a document;
``bench.result_blocks.BLOCKS`` says, per name, which result files it reads and how it renders them.
Nothing between the markers is typed by hand: a rerun of a benchmark, then ``make results``, updates
the docs. One block, ``sources``, lists every result file the blocks read with its provenance and
whether it is stale (a module it measures changed after its commit, ``rsi.provenance.stale``), and
what clears that; ``--check`` compares every block's figures but not the stale marks, so a code commit
does not fail it.

Not for: computing results (the benchmarks and ``akv pool`` do that) or judging them.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import RESULTS
from bench.result_blocks import BLOCKS, STATUS_BLOCKS, Results, ResultsError

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "docs/results.md", "docs/survival.md", "docs/live.md", "docs/tasks.md")
"""The documents whose measured figures are all rendered (the other docs quote none; docs/notebook.md,
a dated diary, is exempt)."""

_BLOCK = re.compile(r"(<!-- results:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)
_OPEN = re.compile(r"<!-- results:([a-z0-9-]+) -->")
_CLOSE = re.compile(r"<!-- /results:([a-z0-9-]+) -->")


class RenderError(ValueError):
    """A document's markers are malformed, or name a block that does not exist."""


@dataclass(frozen=True)
class Difference:
    """A block whose committed text differs from what its result files render."""

    document: str
    block: str
    diff: str


def blocks_in(text: str, document: str) -> list[str]:
    """The block names of ``text`` in order.

    Raises:
        RenderError: a marker without its partner, a name opened twice, or a name no block renders.
    """
    opened, closed = _OPEN.findall(text), _CLOSE.findall(text)
    found = [m.group("name") for m in _BLOCK.finditer(text)]
    for name in sorted(set(opened) | set(closed)):
        if opened.count(name) != closed.count(name) or found.count(name) != opened.count(name):
            raise RenderError(f"{document}: the block {name!r} has unmatched markers "
                              f"(<!-- results:{name} --> ... <!-- /results:{name} -->)")
        if opened.count(name) > 1:
            raise RenderError(f"{document}: the block {name!r} appears {opened.count(name)} times")
        if name not in BLOCKS:
            raise RenderError(f"{document}: no block is named {name!r} (known: {', '.join(sorted(BLOCKS))})")
    return found


def render(text: str, document: str, results: Results) -> str:
    """``text`` with every block's body rendered anew from ``results``."""
    blocks_in(text, document)

    def body(m: re.Match[str]) -> str:
        name = m.group("name")
        rendered = BLOCKS[name].render(results).rstrip("\n") + "\n"
        return m.group(1) + rendered + m.group(4)

    return _BLOCK.sub(body, text)


def differences(text: str, document: str, results: Results) -> list[Difference]:
    """The blocks of ``text`` whose figures differ from what ``results`` render (status blocks aside)."""
    ours = {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}
    fresh = {m.group("name"): m.group("body") for m in _BLOCK.finditer(render(text, document, results))}
    out = []
    for name, body in ours.items():
        if name in STATUS_BLOCKS or body == fresh[name]:
            continue
        diff = "".join(difflib.unified_diff(body.splitlines(True), fresh[name].splitlines(True),
                                            f"{document} (committed)", f"{document} (rendered)", n=0))
        out.append(Difference(document, name, diff))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.render_results", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block's figures differ")
    ap.add_argument("--results", default=str(RESULTS), help="the result files' folder (default bench/results)")
    ap.add_argument("documents", nargs="*", default=list(DOCUMENTS), help="documents, relative to the repository")
    args = ap.parse_args(argv)
    results = Results(Path(args.results))
    found: list[Difference] = []
    try:
        for document in args.documents:
            path = ROOT / document
            text = path.read_text(encoding="utf-8")
            if args.check:
                found += differences(text, document, results)
                continue
            new = render(text, document, results)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(f"rendered {document}")
            else:
                print(f"{document}: unchanged")
    except (RenderError, ResultsError, OSError) as err:
        print(f"bench.render_results: {err}", file=sys.stderr)
        return 2
    for d in found:
        print(f"{d.document}: the block {d.block!r} differs from its result files:\n{d.diff}")
    if args.check:
        print(f"{len(found)} block(s) differ; run `make results` after a rerun" if found else
              "every rendered figure matches its result file")
    stale = results.stale_files()
    if stale:
        print(f"stale: {', '.join(stale)} (a measured module changed after the result's commit; "
              "docs/results.md, Sources, says what clears each)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
