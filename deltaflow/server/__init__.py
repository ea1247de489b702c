"""The ASGI server: OpenAI and Anthropic wire protocols in front of an engine (``deltaflow serve``)."""

from .app import create_app as create_app
from .engine import Engine as Engine
from .engine import EngineRequest as EngineRequest
from .engine import ModelInfo as ModelInfo
from .engine import ReplayEngine as ReplayEngine

__all__ = ("Engine", "EngineRequest", "ModelInfo", "ReplayEngine", "create_app")
