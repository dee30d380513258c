"""``--params``: one syntax everywhere (``k=v`` items read as YAML scalars), a JSON object still accepted."""

from __future__ import annotations

import pytest

from search_spaces.errors import ParameterError
from search_spaces.lookup import parse_params


def test_key_value_items_and_a_json_object_give_the_same_parameters():
    kv = parse_params(["keep_tool_responses=4", "target=tool", "supersede=false", "ratio=0.5", "name= x "])
    assert kv == {"keep_tool_responses": 4, "target": "tool", "supersede": False, "ratio": 0.5, "name": "x"}
    as_json = parse_params(['{"keep_tool_responses": 4, "target": "tool", "supersede": false, "ratio": 0.5, '
                            '"name": "x"}'])
    assert as_json == kv
    assert parse_params([]) == {}


@pytest.mark.parametrize("items, words", [
    (["x"], "key=value"), (["=3"], "key=value"), (["x=[1"], "not YAML"), (["[1]"], "key=value"),
    (['{"a": 1'], "not a JSON object"), (['{"a": 1}', "b=2"], "key=value"),
])
def test_bad_items_are_one_error_naming_the_item(items, words):
    with pytest.raises(ParameterError, match=words.replace("[", r"\[")):
        parse_params(items)


def test_a_candidate_label_given_as_a_policy_name_says_where_it_belongs():
    from search_spaces.cache.registry import get_policy
    from search_spaces.errors import UnknownPolicyError

    with pytest.raises(UnknownPolicyError, match=r"search candidate's label: evaluate it with akv eval --run"):
        get_policy("seed:rolling_drop")
    with pytest.raises(UnknownPolicyError) as err:
        get_policy("rolling")
    assert "candidate" not in str(err.value)
