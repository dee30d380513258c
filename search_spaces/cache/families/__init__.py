"""Built-in policy families: ``full``, ``rolling_drop``, ``thinking_drop``, ``scored_drop`` (cache)
and the text baselines ``standard``, ``text_engineering``, ``trim``. Build them through
``search_spaces.get_policy``; each module also declares its Optuna ``space``."""
