"""The ``schedule`` family: one given schedule, cut at each request, validated like any policy."""

from __future__ import annotations

import pytest

from search_spaces import Episode, ParameterError, estimate_tokens, get_policy
from tests.search_spaces.trajectories import make_trajectory


def test_each_request_sees_the_entries_below_its_length_and_decisions_extend():
    msgs = make_trajectory(10, seed=3)
    table = {"3": [3], "5": [2, 4], "9": [7]}
    policy = get_policy("schedule", drop_message=table, reposition=[5, 9])
    episode = Episode.of(msgs, estimate_tokens(msgs))
    decisions = policy.run_episodes([episode])[0]  # each decision is checked to extend the previous one
    for n, d in zip(episode.cuts, decisions):
        want = {t: sorted(ids) for t, ids in table.items() if int(t) < n}
        assert d.wire["drop_message"] == want
        assert d.wire["reposition"] == [t for t in (5, 9) if t < n]
    assert policy.params == {"drop_message": {"3": [3], "5": [2, 4], "9": [7]}, "reposition": [5, 9]}


@pytest.mark.parametrize(("params", "match"), [
    ({"drop_message": {"2": [3]}}, "message 3 is after its trigger 2"),
    ({"drop_message": {"2": [1], "4": [1]}}, "message 1 is dropped twice"),
    ({"drop_message": {"-1": [0]}}, "trigger must be a non-negative integer"),
    ({"drop_message": {"02": [0]}}, "trigger must be a non-negative integer"),
    ({"drop_message": {"2": [True]}}, "id must be a non-negative integer"),
    ({"drop_message": {"2": "1"}}, "must be a list of message ids"),
    ({"drop_message": [1, 2]}, "must be a mapping"),
    ({"reposition": [4, 4]}, "strictly increasing"),
    ({"reposition": "4"}, "must be a list of triggers"),
    ({"keep": 3}, "unknown parameter 'keep'"),
])
def test_a_malformed_schedule_is_refused_naming_the_problem(params, match):
    with pytest.raises(ParameterError, match=match):
        get_policy("schedule", **params)


def test_an_entry_at_the_last_message_appears_only_in_a_request_that_covers_it():
    msgs = make_trajectory(4, seed=1)
    policy = get_policy("schedule", drop_message={str(len(msgs) - 1): [len(msgs) - 1]})
    episode = Episode.of(msgs, estimate_tokens(msgs))
    decisions = policy.run_episodes([episode])[0]
    assert decisions[-1].wire["drop_message"] == ({} if episode.cuts[-1] < len(msgs) else
                                                  {str(len(msgs) - 1): [len(msgs) - 1]})
