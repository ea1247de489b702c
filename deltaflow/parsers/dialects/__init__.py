"""Built-in dialect declarations, one small module per family (registered on import)."""

from . import json_tools as json_tools
from . import reasoning as reasoning
