"""The program API doc (what a proposer reads) matches the code it describes."""

from __future__ import annotations

import re
from pathlib import Path

from search_spaces import api_doc, check_program
from search_spaces.cache.program_api import Message, Plan, RequestView

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy-api.md"


def test_docs_file_is_the_module_docstring():
    assert DOC.read_text() == api_doc()


def test_every_documented_name_exists():
    text = api_doc()
    for name in set(re.findall(r"`request\.(\w+)", text)):
        assert name in dir(RequestView), name
    for name in set(re.findall(r"`m\.(\w+)", text)):
        assert name in dir(Message), name
    for name in set(re.findall(r"`plan\.(\w+)", text)) | {"drop", "drop_reasoning", "reposition", "dropped", "wire"}:
        assert name in dir(Plan), name


def test_the_documented_example_program_passes_the_checker():
    example = re.search(r"```python\n(.*?)```", api_doc(), re.S)
    assert example is not None
    source = example.group(1).replace("    ...\n", "    return request.plan()\n")
    assert check_program(source).ok, check_program(source).reason
