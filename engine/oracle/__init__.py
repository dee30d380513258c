"""The slow, obvious references the engine is checked against (tests and benchmarks only).

- :mod:`engine.oracle.reference`: applies an event history one event at a time, recomputing
  attention with explicit masks; the exactness oracle of the fast path.
- :mod:`engine.oracle.naive_cache`: a list of whole histories scanned for the longest shared
  prefix; the radix tree's and the session accountant's usage oracle.

Nothing in serving imports these.
"""
