"""The OpenAI-compatible AKV HTTP server (FastAPI + uvicorn); see ``engine.server.app``."""

from engine.server.app import create_app
from engine.server.runner import ServerThread, serve

__all__ = ["ServerThread", "create_app", "serve"]
