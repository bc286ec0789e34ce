"""Choosing the tool-call format (``formats.detect``): from the telltale texts of each
family's chat template as llama.cpp reads them, or by name (``--tool-format``, whose names
``config.TOOL_FORMATS`` lists); an unknown name is a one-line error naming the setting."""

from __future__ import annotations

import pytest
from tool_formats import FAMILIES

from resispec_gguf import config
from resispec_gguf.assist import formats


def test_the_command_line_names_every_format():
    assert tuple(formats.FORMATS) == config.TOOL_FORMATS


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_template_is_recognised(family):
    assert formats.family_of(FAMILIES[family][0]) == family


def test_other_templates_fall_back_to_generic():
    assert formats.family_of(None) == "generic"
    assert formats.family_of("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}") == "generic"


def test_a_named_format_overrides_the_template(tmp_path_factory):
    from tool_formats import write_family_pair

    from resispec_gguf.engine import Engine

    target, _ = write_family_pair(tmp_path_factory.mktemp("named"), "hermes")
    with Engine.load(str(target), "", n_ctx=512, n_threads=1, progress=False, tool_format="llama3") as e:
        fmt = e.tool_format()
    assert type(fmt) is formats.Llama3Format and fmt.native and fmt.special == {}


def test_an_unknown_format_is_a_one_line_error(engine):
    from resispec_gguf.engine import Engine

    for make in (lambda: config.ModelParams(tool_format="chatml"),
                 lambda: Engine(engine.target, chat_template=engine.chat_template, tool_format="chatml")):
        with pytest.raises(config.ConfigError) as e:
            make()
        assert "tool_format must be one of hermes" in str(e.value) and "\n" not in str(e.value)
