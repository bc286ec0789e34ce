"""The checks of ``frameworks_check.py``: the Pydantic models the tools and outputs use, and
one check per framework feature, registered in ``CHECKS``; ``frameworks_check.py`` runs them
through its logging proxy.  Not run by itself: ``frameworks_check.py`` puts ``scripts/`` on
the path before importing it."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from enum import Enum
from typing import Literal, Optional, Union

from pydantic import BaseModel, Field

# ------------------------------------------------------------------------------ the models


class Size(str, Enum):
    S = "S"
    M = "M"
    L = "L"


class Item(BaseModel):
    sku: str = Field(description="a product code such as ABC-123", pattern=r"^[A-Z]{3}-[0-9]{3}$")
    quantity: int = Field(ge=1, le=20)
    size: Optional[Size] = None


class Pickup(BaseModel):
    kind: Literal["pickup"]
    store: str = Field(max_length=40)


class Delivery(BaseModel):
    kind: Literal["delivery"]
    city: str = Field(max_length=40)
    express: bool = False


class Order(BaseModel):
    """An order to place."""

    customer: str = Field(min_length=1, max_length=40)
    items: list[Item] = Field(min_length=1, max_length=4)
    shipping: Union[Pickup, Delivery] = Field(discriminator="kind")


class Line(BaseModel):
    sku: str
    quantity: int


class Receipt(BaseModel):
    """What the assistant reports once the order is placed."""

    order_id: str = Field(max_length=20)
    status: Literal["placed", "failed"]
    lines: list[Line] = Field(max_length=4)
    note: Optional[str] = Field(default=None, max_length=80)


class Section(BaseModel):
    title: str = Field(max_length=40)
    children: list["Section"] = Field(default_factory=list, max_length=2)


ORDER_PROMPT = ("Place an order for Ana: 2 of ABC-123 in size M and 1 of XYZ-789, delivered to Oslo. "
                "Use the place_order tool.")
RECEIPT_PROMPT = ("Order 1042 for Ana was placed: 2 x ABC-123 and 1 x XYZ-789. Report it as a receipt.")
AGENT_PROMPT = ("Place an order for Ana: 2 of ABC-123 in size M and 1 of XYZ-789, delivered to Oslo, "
                "then report the receipt.")
OUTLINE_PROMPT = "Give a two-level outline of a talk about tea: two sections, one subsection each."
TOOL_RESULT = "Order 1042 placed."
ORDER_TOOL_DESCRIPTION = "Place an order for a customer."


class Calls:
    """The orders a tool function received (the frameworks call it themselves)."""

    def __init__(self):
        self.orders: list[Order] = []

    def place_order(self, order: Order) -> str:
        """Place an order for a customer."""
        self.orders.append(order if isinstance(order, Order) else Order.model_validate(order))
        return TOOL_RESULT


# ---------------------------------------------------------------------------------- the checks

CHECKS: list = []  # (framework, name, function(ctx) -> (ok, why))


def check(framework: str, name: str):
    def register(fn):
        CHECKS.append((framework, name, fn))
        return fn

    return register


class Ctx:
    """What a check needs: the proxy's base URL, a fresh recorder of tool calls."""

    def __init__(self, base_url: str, model: str):
        self.base_url, self.model = base_url, model
        self.calls = Calls()

    def openai(self):
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key="none", max_retries=0, timeout=900)

    def async_openai(self):
        import openai

        return openai.AsyncOpenAI(base_url=self.base_url, api_key="none", max_retries=0, timeout=900)


def _order_call(calls) -> tuple[bool, str]:
    """Whether the first call is place_order with arguments valid as an Order."""
    if not calls:
        return False, "text"
    name, args = calls[0]
    if name != "place_order":
        return False, f"called {name}"
    try:
        args = json.loads(args) if isinstance(args, str) else args
        if isinstance(args, dict) and list(args) == ["order"]:  # a function tool place_order(order: Order)
            args = args["order"]
        Order.model_validate(args)
    except Exception as e:  # a JSON or validation error
        return False, f"invalid arguments: {str(e)[:80]}"
    return True, ""


def _is(value, model) -> tuple[bool, str]:
    if isinstance(value, model):
        return True, ""
    if isinstance(value, (dict, str)):
        try:
            (model.model_validate_json if isinstance(value, str) else model.model_validate)(value)
            return True, ""
        except Exception as e:
            return False, f"invalid output: {str(e)[:80]}"
    return False, f"got {type(value).__name__}"


def _receipt_or_call(msg) -> tuple[bool, str]:
    """openai ``parse`` with tools and a response_format: a parsed call or a parsed answer."""
    if msg.tool_calls:
        return _order_call([(c.function.name, c.function.arguments) for c in msg.tool_calls])
    return _is(msg.parsed, Receipt)


# -- openai

def _order_tool():
    import openai

    return openai.pydantic_function_tool(Order, name="place_order", description=ORDER_TOOL_DESCRIPTION)


def _openai_stream_calls(stream) -> tuple[list, str | None]:
    calls: dict[int, list[str]] = {}
    finish = None
    for c in stream:
        if not c.choices:
            continue
        finish = c.choices[0].finish_reason or finish
        for d in c.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(d.index, ["", ""])
            entry[0] += (d.function.name or "") if d.function else ""
            entry[1] += (d.function.arguments or "") if d.function else ""
    return [tuple(calls[i]) for i in sorted(calls)], finish


for _stream in (False, True):
    for _choice in ("required", "auto"):
        def _fn(ctx, stream=_stream, choice=_choice):
            c = ctx.openai()
            kw = dict(model=ctx.model, messages=[{"role": "user", "content": ORDER_PROMPT}], tools=[_order_tool()],
                      tool_choice=choice)
            if stream:
                calls, finish = _openai_stream_calls(c.chat.completions.create(stream=True, **kw))
            else:
                ch = c.chat.completions.create(**kw).choices[0]
                calls, finish = [(t.function.name, t.function.arguments) for t in ch.message.tool_calls or []], \
                    ch.finish_reason
            return (False, "length") if finish == "length" else _order_call(calls)

        check("openai", f"nested tool, {_choice}" + (", stream" if _stream else ""))(_fn)

    def _parse(ctx, stream=_stream, model=Receipt, prompt=RECEIPT_PROMPT):
        c = ctx.openai()
        kw = dict(model=ctx.model, messages=[{"role": "user", "content": prompt}], response_format=model)
        if stream:
            with c.chat.completions.stream(**kw) as s:
                return _is(s.get_final_completion().choices[0].message.parsed, model)
        return _is(c.chat.completions.parse(**kw).choices[0].message.parsed, model)

    check("openai", "parse nested output" + (", stream" if _stream else ""))(_parse)

    def _tools_typed(ctx, stream=_stream):
        c = ctx.openai()
        kw = dict(model=ctx.model, messages=[{"role": "user", "content": AGENT_PROMPT}], tools=[_order_tool()],
                  response_format=Receipt)
        if stream:
            with c.chat.completions.stream(**kw) as s:
                return _receipt_or_call(s.get_final_completion().choices[0].message)
        return _receipt_or_call(c.chat.completions.parse(**kw).choices[0].message)

    check("openai", "tools + typed output" + (", stream" if _stream else ""))(_tools_typed)


@check("openai", "parse recursive output")
def _recursive(ctx):
    return _parse(ctx, False, Section, OUTLINE_PROMPT)


@check("openai", "round trip (call, result, typed answer)")
def _openai_round_trip(ctx):
    c = ctx.openai()
    msgs = [{"role": "developer", "content": "You place orders and report receipts."},
            {"role": "user", "content": [{"type": "text", "text": AGENT_PROMPT}]}]
    m = c.chat.completions.create(model=ctx.model, messages=msgs, tools=[_order_tool()], tool_choice="required",
                                  parallel_tool_calls=False).choices[0].message
    ok, why = _order_call([(t.function.name, t.function.arguments) for t in m.tool_calls or []])
    if not ok:
        return ok, why
    msgs += [{"role": "assistant", "content": None, "tool_calls": [t.model_dump() for t in m.tool_calls]},
             {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": TOOL_RESULT}]
    r = c.chat.completions.parse(model=ctx.model, messages=msgs, response_format=Receipt, max_completion_tokens=200)
    return _is(r.choices[0].message.parsed, Receipt)


# -- instructor

for _mode in ("TOOLS", "TOOLS_STRICT", "JSON", "JSON_SCHEMA", "MD_JSON"):
    for _stream in (False, True):
        def _instructor(ctx, mode=_mode, stream=_stream):
            import instructor

            client = instructor.from_openai(ctx.openai(), mode=getattr(instructor.Mode, mode))
            if stream:  # the last partial object is the whole one.  A Partial model cannot keep a
                # Literal-discriminated union (pydantic refuses the optional discriminator): Receipt
                kw = dict(model=ctx.model, messages=[{"role": "user", "content": RECEIPT_PROMPT}],
                          response_model=Receipt, max_retries=1)
                last = None
                for last in client.chat.completions.create_partial(**kw):
                    pass
                return _is(last.model_dump() if last is not None else None, Receipt)
            kw = dict(model=ctx.model, messages=[{"role": "user", "content": ORDER_PROMPT}], response_model=Order,
                      max_retries=1)
            return _is(client.chat.completions.create(**kw), Order)

        check("instructor", f"response_model {_mode}" + (", stream" if _stream else ""))(_instructor)


# -- pydantic-ai

def _pai_agent(ctx, output_type, tools=True):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(ctx.model, provider=OpenAIProvider(openai_client=ctx.async_openai()))
    return Agent(model, output_type=output_type, tools=[ctx.calls.place_order] if tools else [],
                 instructions="You place orders with the place_order tool and report receipts.")


def _pai_run(agent, prompt, stream):
    async def go():
        if stream:
            async with agent.run_stream(prompt) as result:
                return await result.get_output()
        return (await agent.run(prompt)).output

    return asyncio.run(go())


def _tool_and(ctx, output, model) -> tuple[bool, str]:
    """The tool was called with a valid Order, and the final output is valid (``model``;
    None: any text)."""
    if not ctx.calls.orders:  # the model answered at once (under "auto", its choice)
        valid = _is(output, model)[0] if model else isinstance(output, str) and bool(output)
        return False, "no tool call (answered at once, " + ("valid output)" if valid else "invalid output)")
    return _is(output, model) if model else (isinstance(output, str) and bool(output), "")


for _stream in (False, True):
    _s = ", stream" if _stream else ""

    def _pai_text(ctx, stream=_stream):
        return _tool_and(ctx, _pai_run(_pai_agent(ctx, str), AGENT_PROMPT, stream), None)

    def _pai_tool_output(ctx, stream=_stream):
        return _tool_and(ctx, _pai_run(_pai_agent(ctx, Receipt), AGENT_PROMPT, stream), Receipt)

    def _pai_native(ctx, stream=_stream):
        from pydantic_ai import NativeOutput

        return _tool_and(ctx, _pai_run(_pai_agent(ctx, NativeOutput(Receipt)), AGENT_PROMPT, stream), Receipt)

    def _pai_native_alone(ctx, stream=_stream):
        from pydantic_ai import NativeOutput

        return _is(_pai_run(_pai_agent(ctx, NativeOutput(Receipt), tools=False), RECEIPT_PROMPT, stream), Receipt)

    check("pydantic-ai", "tools, text output" + _s)(_pai_text)
    check("pydantic-ai", "tools + output_type (tool output)" + _s)(_pai_tool_output)
    check("pydantic-ai", "tools + NativeOutput" + _s)(_pai_native)
    check("pydantic-ai", "NativeOutput alone" + _s)(_pai_native_alone)


# -- openai-agents

def _agents_run(ctx, output_type, stream, tools=True, prompt=AGENT_PROMPT):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(model=ctx.model, openai_client=ctx.async_openai())
    tool = function_tool(ctx.calls.place_order)
    agent = Agent(name="orders", instructions="You place orders with the place_order tool and report receipts.",
                  model=model, tools=[tool] if tools else [], output_type=output_type)

    async def go():
        if stream:
            result = Runner.run_streamed(agent, prompt)
            async for _ in result.stream_events():
                pass
            return result.final_output
        return (await Runner.run(agent, prompt)).final_output

    return asyncio.run(go())


for _stream in (False, True):
    _s = ", stream" if _stream else ""
    check("openai-agents", "function tool, text output" + _s)(
        lambda ctx, s=_stream: _tool_and(ctx, _agents_run(ctx, None, s), None))
    check("openai-agents", "function tool + output_type" + _s)(
        lambda ctx, s=_stream: _tool_and(ctx, _agents_run(ctx, Receipt, s), Receipt))
    check("openai-agents", "output_type alone" + _s)(
        lambda ctx, s=_stream: _is(_agents_run(ctx, Receipt, s, tools=False, prompt=RECEIPT_PROMPT), Receipt))


# -- langchain-openai

def _chat(ctx):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=ctx.model, base_url=ctx.base_url, api_key="none", max_retries=0, timeout=900)


def _lc_tool(ctx):
    from langchain_core.tools import tool

    @tool
    def place_order(order: Order) -> str:
        """Place an order for a customer."""
        return ctx.calls.place_order(order)

    return place_order


def _lc_message(runnable, prompt, stream):
    if not stream:
        return runnable.invoke(prompt)
    whole = None
    for chunk in runnable.stream(prompt):
        whole = chunk if whole is None else whole + chunk
    return whole


def _lc_calls(msg):
    return [(c["name"], c["args"]) for c in msg.tool_calls]


for _stream in (False, True):
    _s = ", stream" if _stream else ""
    for _choice in ("place_order", None):
        check("langchain", "bind_tools nested, " + ("named" if _choice else "auto") + _s)(
            lambda ctx, s=_stream, ch=_choice: _order_call(
                _lc_calls(_lc_message(_chat(ctx).bind_tools([_lc_tool(ctx)], tool_choice=ch), ORDER_PROMPT, s))))
    for _method in ("json_schema", "function_calling", "json_mode"):
        def _structured(ctx, s=_stream, method=_method):
            prompt = RECEIPT_PROMPT + (" Answer in JSON with order_id, status, lines." if method == "json_mode" else "")
            out = _chat(ctx).with_structured_output(Receipt, method=method)
            if not s:
                return _is(out.invoke(prompt), Receipt)
            last = None
            for last in out.stream(prompt):
                pass
            return _is(last, Receipt)

        check("langchain", f"with_structured_output {_method}" + _s)(_structured)

    def _lc_bind_typed(ctx, s=_stream):
        msg = _lc_message(_chat(ctx).bind_tools([_lc_tool(ctx)], response_format=Receipt, strict=True),
                          AGENT_PROMPT, s)
        if msg.tool_calls:
            return _order_call(_lc_calls(msg))
        return _is(msg.additional_kwargs.get("parsed") or msg.content, Receipt)

    check("langchain", "bind_tools + response_format" + _s)(_lc_bind_typed)


@check("langchain", "with_structured_output(tools=...)")
def _lc_structured_tools(ctx):
    out = _chat(ctx).with_structured_output(Receipt, strict=True, include_raw=True, tools=[_lc_tool(ctx)])
    r = out.invoke(AGENT_PROMPT)
    if r["raw"].tool_calls:
        return _order_call(_lc_calls(r["raw"]))
    return _is(r["parsed"], Receipt)


@check("langchain", "round trip (forced call, ToolMessage, answer)")
def _lc_round_trip(ctx):
    from langchain_core.messages import HumanMessage, ToolMessage

    tool = _lc_tool(ctx)
    llm = _chat(ctx).bind_tools([tool], tool_choice="place_order")
    msgs = [HumanMessage(AGENT_PROMPT)]
    ai = llm.invoke(msgs)
    ok, why = _order_call(_lc_calls(ai))
    if not ok:
        return ok, why
    msgs += [ai, ToolMessage(TOOL_RESULT, tool_call_id=ai.tool_calls[0]["id"])]
    final = _chat(ctx).bind_tools([tool]).invoke(msgs)
    return bool(final.content) and not final.tool_calls, "no text answer"


# -- llm

def _llm_model(ctx):
    import llm

    return llm.get_model("resispec")


for _stream in (False, True):
    _s = ", stream" if _stream else ""

    def _llm_schema(ctx, s=_stream):
        r = _llm_model(ctx).prompt(RECEIPT_PROMPT, schema=Receipt, stream=s)
        text = "".join(r) if s else r.text()
        return _is(text, Receipt)

    def _llm_tools(ctx, s=_stream):
        chain = _llm_model(ctx).chain(AGENT_PROMPT, tools=[ctx.calls.place_order], stream=s)
        text = "".join(chain) if s else chain.text()
        return _tool_and(ctx, text, None)

    check("llm", "prompt(schema=nested)" + _s)(_llm_schema)
    check("llm", "chain(tools=[nested])" + _s)(_llm_tools)


def _configure_llm(base_url: str, model: str) -> str:
    """An ``llm`` user directory naming the server as an OpenAI-compatible model ``resispec``."""
    d = tempfile.mkdtemp(prefix="llm-")
    with open(os.path.join(d, "extra-openai-models.yaml"), "w") as f:
        f.write(f"- model_id: resispec\n  model_name: {model}\n  api_base: {base_url}\n"
                "  supports_tools: true\n  supports_schema: true\n")
    os.environ["LLM_USER_PATH"] = d
    return d
