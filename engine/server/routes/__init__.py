"""The server's routes, one router per concern; ``create_app`` includes them all."""

from engine.server.routes import cache, chat, info, score

ROUTERS = (info.router, chat.router, score.router, cache.router)

__all__ = ["ROUTERS"]
