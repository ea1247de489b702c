"""Built-in dialect declarations, one small module per family (registered on import)."""

from . import functionary_family as functionary_family
from . import gemma_command_family as gemma_command_family
from . import harmony_family as harmony_family
from . import json_array_family as json_array_family
from . import json_tools as json_tools
from . import mistral_family as mistral_family
from . import more_reasoning as more_reasoning
from . import more_tool_families as more_tool_families
from . import pythonic_family as pythonic_family
from . import reasoning as reasoning
from . import special_family as special_family
from . import xml_family as xml_family
from . import xml_more_family as xml_more_family
from . import xml_tools_family as xml_tools_family
from . import xtml_family as xtml_family
