"""The one registry helper of both tracks: names, lookups with a listing error, program routing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from search_spaces.errors import ParameterError, UnknownPolicyError
from search_spaces.lookup import Registry


@dataclass(frozen=True)
class Fam:
    name: str


REG = Registry(("gadget", "gadgets"), "gadget", [Fam("a"), Fam("b")])


def build(name, **params):
    return REG.build(name, params, program=lambda src, p: ("program", src, p), family=lambda f, p: (f.name, p))


def test_names_lookup_and_routing():
    assert REG.names() == ("a", "b", "program")
    assert build("b", x=1) == ("b", {"x": 1})
    assert build("program", source="S", k=2) == ("program", "S", {"k": 2})


@pytest.mark.parametrize("bad", ["c", None, ["a"], "x" * 500])
def test_an_unknown_name_is_refused_with_the_valid_names(bad):
    with pytest.raises(UnknownPolicyError, match="valid gadgets: a, b, program") as err:
        build(bad)
    assert err.value.field == "gadget" and len(str(err.value)) < 200  # a huge name is shortened


def test_a_program_needs_its_source():
    with pytest.raises(ParameterError, match="'source'"):
        build("program", k=2)


def test_both_tracks_word_errors_alike():
    from search_spaces import get_policy
    from search_spaces.survival.registry import get_survival_policy

    for make, many in ((get_policy, "valid policies"), (get_survival_policy, "valid survival policies")):
        with pytest.raises(UnknownPolicyError, match=f"unknown .*'nope'; {many}: .*, program$"):
            make("nope")
