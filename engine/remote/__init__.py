"""The engine over HTTP, from the client side.

- :class:`RemoteEngine` (``engine.remote.engine``): the ``ChatEngine`` interface against any
  server that speaks the wire format (``akv serve``, AKV-patched SGLang), for evaluators.
- :mod:`engine.remote.wire`: requests, server errors mapped to ``AKVError``s, usage parsing.
- :class:`AKVClient` (``engine.remote.client``): a small client for applications (chat,
  streaming, sessions, snapshots), returning the server's JSON.
"""

from engine.remote.client import AKVClient, AKVServerError
from engine.remote.engine import RemoteEngine

__all__ = ["AKVClient", "AKVServerError", "RemoteEngine"]
