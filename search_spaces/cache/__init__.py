"""The cache-drop track of search_spaces: policies that decide, turn by turn, which messages leave
the KV cache (drop) and when positions are compacted (reposition).

- ``policy`` / ``decision`` / ``request``: the Policy interface, its validated decisions, and the
  request and episode a policy decides on.
- ``families``: the built-in families (rolling drop, thinking drop, scored drop, the text
  baselines); ``registry``: them by name (``get_policy``).
- ``program`` / ``program_api``: policy programs (evolved or user-written) and the stdlib-only API
  they are written against; ``seeds``: one seed program per cache family; ``fragments``: small
  rules that compose with any program.
- ``embed`` (intent relevance), ``summarize`` (the text baselines' summarizer).
- ``frame_guard``: the rule that holds a drop until an assistant turn has read the message (the
  evaluator's guard applies it; exported modules carry its code).

Most callers import through ``search_spaces`` itself (its ``__init__`` lists the public names).
"""
