"""TextAssembler: complete UTF-8 pieces out of token bytes, held back past stop strings."""

from resispec_gguf.decoding.textstream import TextAssembler


def test_text_assembler_stop_strings():
    asm = TextAssembler(("STOP", "\n\n"))
    out = "".join(asm.push(c.encode()) for c in "abc ST")
    assert out == "abc " and not asm.stopped  # "ST" is held back: it may begin STOP
    out += asm.push(b"OP and more")
    assert asm.stopped and out == "abc "
    asm = TextAssembler(("STOP",))
    out = "".join(asm.push(c.encode()) for c in "a STa")
    assert out + asm.flush() == "a STa"


def test_incomplete_utf8_waits_for_its_bytes():
    text = "é🙂"
    data = text.encode()
    asm = TextAssembler()
    out = [asm.push(data[i:i + 1]) for i in range(len(data))]
    assert out == ["", "é", "", "", "", "🙂"]
    assert asm.flush() == "" and asm.text == text
