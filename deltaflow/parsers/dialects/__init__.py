"""Built-in dialect declarations, one module per vendor or model family (registered on import).

Each module holds everything about its family: the tool dialects
(:func:`~deltaflow.parsers.declare`), the reasoning dialects
(:func:`~deltaflow.parsers.registry.register_reasoning_dialect`), the format
constants other code reads (``QWEN3_CODER_FORMAT``, ...), the facts behind
them (the module docstring) and the family's model presets (``PRESETS``:
``(model, tool_parser, reasoning_parser)`` rows, which
:mod:`deltaflow.presets` collects). Adding a dialect to a family is an edit of
its module; a new family is a new module, listed in :data:`VENDORS`. A module
may import another family's format constant when its models write that format
(Step-3.5 writes Qwen3-Coder's, Ling 3 GLM's). ``_think`` holds the ``<think>``
markers and token prefixes several families share.

The registry does not depend on the import order (no two modules declare the
same name); :data:`VENDORS` is ordered for :func:`deltaflow.presets.list_presets`.
"""

from __future__ import annotations

from types import ModuleType

from . import apertus as apertus
from . import apriel as apriel
from . import coding_agents as coding_agents
from . import cohere as cohere
from . import deepseek as deepseek
from . import ernie as ernie
from . import firefunction as firefunction
from . import functionary as functionary
from . import gemma as gemma
from . import gigachat as gigachat
from . import glm as glm
from . import granite as granite
from . import hermes as hermes
from . import holo as holo
from . import hunyuan as hunyuan
from . import internlm as internlm
from . import jamba as jamba
from . import kimi as kimi
from . import lfm as lfm
from . import ling as ling
from . import llama as llama
from . import longcat as longcat
from . import minicpm as minicpm
from . import minimax as minimax
from . import mistral as mistral
from . import nemotron as nemotron
from . import olmo as olmo
from . import openai as openai
from . import phi as phi
from . import qwen as qwen
from . import seed as seed
from . import step as step
from . import xlam as xlam

__all__ = ("VENDORS",)

VENDORS: tuple[ModuleType, ...] = (
    qwen,
    hermes,
    internlm,
    llama,
    mistral,
    glm,
    deepseek,
    kimi,
    minimax,
    minicpm,
    openai,
    seed,
    lfm,
    olmo,
    step,
    gemma,
    granite,
    nemotron,
    hunyuan,
    ernie,
    xlam,
    jamba,
    cohere,
    apriel,
    phi,
    firefunction,
    apertus,
    longcat,
    gigachat,
    functionary,
    ling,
    holo,
    coding_agents,
)
"""Every vendor module, in the order their presets are listed (the big families first, as before the split)."""
