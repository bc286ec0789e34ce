"""The chunk stream both surfaces send (surfaces/chunks.py), without a model: where usage and
the speculative extra go, completions' chunks, logprobs that wait for their text, and which
engine stream a plan runs on."""

from __future__ import annotations

import pytest

from resispec_gguf.assist.plan import ChatPlan
from resispec_gguf.engine import Result, Stats, TokenLogprob
from resispec_gguf.surfaces.chunks import ChunkStream, pieces
from resispec_gguf.surfaces.logprobs import LogprobsFormatter

META = {"id": "cmpl-1", "created": 7, "model": "m"}


def _result(text, n, finish_reason="eos", logprobs=None):
    return Result(tokens=[1] * n, text=text, finish_reason=finish_reason,
                  stats=Stats(method="chain", prompt_tokens=4, tokens=n), seed=0, logprobs=logprobs)


def _run(stream: ChunkStream, parts, result):
    out = stream.start()
    for p in parts:
        out += stream.push(p)
    return out + stream.finish(result)


def test_include_usage_puts_usage_on_a_chunk_of_its_own():
    chunks = _run(ChunkStream(ChatPlan([1]), META, usage="chunk"), ["ab", "c"], _result("abc", 3))
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [{"role": "assistant", "content": ""}, {"content": "ab"},
                                                               {"content": "c"}, {}]
    assert all(c["usage"] is None and "speculative" not in c for c in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    last = chunks[-1]
    assert last["choices"] == [] and last["object"] == "chat.completion.chunk" and last["id"] == "cmpl-1"
    assert last["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    assert last["speculative"]["method"] == "chain"
    assert last["timings"]["predicted_n"] == last["speculative"]["tokens"]
    assert all("timings" not in c for c in chunks[:-1])


def test_without_usage_the_finish_chunk_carries_the_stats_only():
    chunks = _run(ChunkStream(ChatPlan([1]), META, usage="none"), ["ab"], _result("ab", 2, "length"))
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["speculative"]["tokens"] == 2
    assert all("speculative" not in c and "timings" not in c for c in chunks[:-1])
    assert chunks[-1]["timings"]["predicted_n"] == 2


def test_completion_chunks_have_text_and_no_role_chunk():
    stream = ChunkStream(ChatPlan([1]), META, chat=False, usage="finish")
    assert stream.start() == []
    chunks = _run(stream, ["x", "y"], _result("xy", 2, "stop"))
    assert [c["object"] for c in chunks] == ["text_completion"] * 3
    assert [c["choices"][0] for c in chunks] == [
        {"index": 0, "text": "x", "logprobs": None, "finish_reason": None},
        {"index": 0, "text": "y", "logprobs": None, "finish_reason": None},
        {"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"},
    ]
    assert chunks[-1]["usage"]["completion_tokens"] == 2


def test_logprobs_wait_for_their_text_and_the_rest_ends_the_stream():
    entries = [TokenLogprob(t, -0.5 * t, ()) for t in (1, 2, 3, 4)]
    piece = {1: b"a", 2: b"\xc3", 3: b"\xa9", 4: b"!"}.__getitem__
    stream = ChunkStream(ChatPlan([1]), META, chat=False, logprobs=LogprobsFormatter(False, piece), usage="none")
    # token 2 is half a character: its entry goes out with the text of token 3; token 4 (a stop
    # string's, say) never becomes text and rides on the finish chunk
    chunks = _run(stream, [("a", entries[:1]), ("", entries[1:2]), ("\u00e9", entries[2:3])],
                  _result("a\u00e9", 4, "stop", logprobs=entries))
    sent = [c["choices"][0]["logprobs"] for c in chunks]
    assert [lp["tokens"] for lp in sent] == [["a"], ["\\xc3", "\\xa9"], ["!"]]
    assert [lp["text_offset"] for lp in sent] == [[0], [1, 2], [2]]
    assert sent[-1]["token_logprobs"] == [-2.0] and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    whole = LogprobsFormatter(False, piece).format(entries)
    assert {k: sum((lp[k] for lp in sent), []) for k in whole} == whole


def test_a_bad_usage_place_is_refused():
    with pytest.raises(ValueError, match="usage"):
        ChunkStream(ChatPlan([1]), META, usage="sometimes")


class _Recorder:
    def stream(self, prompt, sampling, draft, constraint=None):
        return ("stream", prompt, sampling, draft, constraint)

    def stream_logprobs(self, prompt, sampling, draft, logprobs, constraint=None):
        return ("stream_logprobs", prompt, sampling, draft, logprobs, constraint)


def test_pieces_run_the_plan_on_the_right_stream():
    plan = ChatPlan([5, 6], constraint="c")
    assert pieces(_Recorder(), plan, "sp", "dp") == ("stream", [5, 6], "sp", "dp", "c")
    assert pieces(_Recorder(), plan, "sp", "dp", 0) == ("stream_logprobs", [5, 6], "sp", "dp", 0, "c")
