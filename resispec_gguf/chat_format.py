"""Render a model's Jinja chat template the way llama-cpp-python does (sandboxed Jinja2,
``messages``/``bos_token``/``eos_token``/``add_generation_prompt``).  Pure Python, no model.
"""

from __future__ import annotations

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import UserError

# Used when a GGUF carries no template: ChatML, which most instruct models understand.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_ROLES = ("system", "user", "assistant", "tool")


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def check_messages(messages) -> list[dict]:
    """Validate OpenAI-style messages; returns them with string content."""
    if not isinstance(messages, list) or not messages:
        raise UserError("messages must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise UserError(f"message {i} must be an object with a role")
        if m["role"] not in _ROLES:
            raise UserError(f"message {i} has unknown role {m['role']!r}")
        content = m.get("content", "")
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise UserError(f"message {i} content must be a string")
        out.append({**m, "content": content})
    return out


def render(template: str | None, messages, *, bos_token="", eos_token="", add_generation_prompt=True) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        tmpl = env.from_string(template or CHATML)
        return tmpl.render(
            messages=check_messages(messages),
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
            raise_exception=_raise,
            tools=None,
        )
    except jinja2.exceptions.TemplateError as e:
        raise UserError(f"the chat template failed: {e}") from None
