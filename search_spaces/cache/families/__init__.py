"""Built-in policy families: ``full``, ``rolling_drop``, ``thinking_drop``, ``scored_drop``, ``read_drop`` (cache)
and the text baselines ``standard``, ``text_engineering``, ``trim``; ``schedule`` replays one given
schedule (the hindsight oracle's). Build them through
``search_spaces.get_policy``; each module also declares its Optuna ``space``."""
