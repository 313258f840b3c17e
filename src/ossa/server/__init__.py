"""The OpenAI-compatible HTTP server (``ossa serve``): ``create_app`` and ``run_server``."""

from __future__ import annotations

from .app import create_app
from .launcher import run_server

__all__ = ["create_app", "run_server"]
