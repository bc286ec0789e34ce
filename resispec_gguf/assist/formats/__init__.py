"""Tool-call formats, one small module per model family: how its models write calls (markers,
JSON layout), the grammar that constrains a call (forced, or lazily from its opening),
reading calls back out of a reply, holding back streamed text that may be one, and rendering
tools, calls and results into the prompt.

* ``hermes`` — Qwen2.5 / Hermes: ``<tool_call>`` blocks, and calls as JSON alone (fenced or
  bare) as Qwen2.5-Coder writes them;
* ``qwen3`` — Qwen3 / QwQ: Hermes calls after ``<think>`` reasoning;
* ``llama3`` — Llama 3.1-3.3: a ``{"name", "parameters"}`` object as the reply;
* ``mistral`` — Mistral / Mistral-Nemo: ``[TOOL_CALLS]`` and a JSON list, 9-character ids;
* ``deepseek_r1`` — DeepSeek-R1 and distills: its ``<｜tool▁calls▁begin｜>`` markers;
* ``generic`` — any other template: Hermes blocks described in a system message.

``detect`` chooses one from the chat template (or by name, ``--tool-format``); ``base``
holds what they share, ``json_calls`` the scanning of calls written as JSON alone.  What is
not about a format (checking ``tools``, the call object, streaming) is ``tools``'.

May import ``tools``, ``chat_format``, ``grammar`` and ``config``; never the engine,
``llama`` or a surface.
"""

from .base import ToolFormat
from .deepseek_r1 import DeepSeekR1Format
from .detect import FORMATS, detect_format, family_of, template_knows_tools
from .generic import GenericFormat
from .hermes import HermesFormat
from .llama3 import Llama3Format
from .mistral import MistralFormat
from .qwen3 import Qwen3Format

__all__ = ["ToolFormat", "FORMATS", "detect_format", "family_of", "template_knows_tools", "HermesFormat",
           "GenericFormat", "Llama3Format", "MistralFormat", "Qwen3Format", "DeepSeekR1Format"]
