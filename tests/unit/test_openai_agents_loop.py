"""The OpenAI Agents SDK adapter (worker/engine/frameworks/openai_agents_loop.py), against the
real SDK and the fake OpenAI-compatible server (rigs/providers.py). ``Recorder`` is dres's side
of the hooks, recording what it is called with; nothing of the SDK is mocked.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    OpenAIResponsesModel,
    RunConfig,
    RunContextWrapper,
    Runner,
    WebSearchTool,
    function_tool,
    input_guardrail,
)
from agents.mcp import MCPServerStdio
from agents.tool import set_function_tool_failure_error_function
from openai import AsyncOpenAI
from pydantic import BaseModel

from rigs.providers import (
    FakeProvider,
    OpenAIDialect,
    Reply,
    chunk,
    fake_provider,
    openai_stream,
    sse,
    tool_delta,
    usage_chunk,
)
from tests.frameworks import agents_sdk_agent as example
from worker.base.errors import ModelError
from worker.engine.frameworks.base import Halt, ToolAnswer, Usage, read_only
from worker.engine.frameworks.openai_agents_loop import (
    ASSUMES,
    AgentsSdkAdapter,
    input_items,
)
from worker.engine.models.base import (
    AssistantMessage,
    Message,
    RecordedCall,
    ToolResultMessage,
    UserMessage,
)

OPENAI = OpenAIDialect()
CHAT = "/v1/chat/completions"


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with fake_provider() as server:
        yield server


def model(fake: FakeProvider) -> OpenAIChatCompletionsModel:
    client = AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="fake-key")
    return OpenAIChatCompletionsModel(model="gpt-test", openai_client=client)


@dataclass
class Recorder:
    """dres's side of the hooks: what each is called with, in order. ``recorded``: the result
    a layer-2 block answers with (the tool is then not run); ``halt_tool``: ``tool`` raises
    Halt (the call waits for a person)."""

    recorded: Any = None
    halt_tool: bool = False
    halt_model: bool = False

    def __post_init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def model_start(self) -> None:
        self.calls.append(("model_start",))
        if self.halt_model:
            raise Halt

    def text(self, delta: str) -> None:
        self.calls.append(("text", delta))

    async def model_done(self, tool_calls: int, usage: Usage | None) -> None:
        self.calls.append(("model_done", tool_calls, usage))

    async def tool(
        self, name: str, arguments: Any, invoke: Callable[[], Awaitable[Any]]
    ) -> ToolAnswer:
        self.calls.append(("tool", name, arguments))
        if self.halt_tool:
            raise Halt
        if self.recorded is not None:
            return ToolAnswer(self.recorded)
        try:
            result = await invoke()
        except Exception as e:
            self.calls.append(("tool_error", type(e).__name__, str(e)))
            return ToolAnswer(f"{type(e).__name__}: {e}", is_error=True)
        self.calls.append(("tool_result", result))
        return ToolAnswer(result)


def run(adapter: AgentsSdkAdapter, history: list[Message], hooks: Recorder) -> None:
    asyncio.run(adapter.run(history, hooks))


HELLO: list[Message] = [UserMessage("Hello")]
EMAILED = {"to": "a@x.io", "subject": "Hi"}


def tool_reply(call_id: str, name: str, arguments: dict[str, Any]) -> Any:
    return OPENAI.tool_call(call_id, name, arguments)


class Effects:
    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []

    def agent(self, fake: FakeProvider, **kwargs: Any) -> Agent[Any]:
        sent = self.sent

        @function_tool
        def send_email(to: str, subject: str) -> dict[str, str]:
            """Send an email."""
            sent.append({"to": to, "subject": subject})
            return {"sent": to}

        return Agent(
            name="t", instructions="Be terse.", model=model(fake), tools=[send_email], **kwargs
        )


# -- model calls ---------------------------------------------------------------------------------


def test_text_deltas_and_usage_reach_the_hooks_in_order(fake: FakeProvider) -> None:
    fake.script(OPENAI.text("Hel", "lo"))
    hooks = Recorder()
    run(AgentsSdkAdapter(Effects().agent(fake)), HELLO, hooks)
    assert hooks.calls == [
        ("model_start",),
        ("text", "Hel"),
        ("text", "lo"),
        ("model_done", 0, Usage(3, 9)),
    ]


def test_a_tool_call_goes_through_hooks_tool_and_runs_the_tool_once(fake: FakeProvider) -> None:
    fake.script(tool_reply("call_1", "send_email", EMAILED), OPENAI.text("Sent."))
    effects = Effects()
    hooks = Recorder()
    run(AgentsSdkAdapter(effects.agent(fake)), HELLO, hooks)
    assert effects.sent == [EMAILED]
    assert hooks.calls == [
        ("model_start",),
        ("model_done", 1, Usage(3, 9)),
        ("tool", "send_email", EMAILED),
        ("tool_result", {"sent": "a@x.io"}),
        ("model_start",),
        ("text", "Sent."),
        ("model_done", 0, Usage(3, 9)),
    ]
    answer = fake.received[1].body["messages"][-1]
    assert answer == {"role": "tool", "tool_call_id": "call_1", "content": '{"sent": "a@x.io"}'}


def test_the_model_request_is_the_one_the_sdk_alone_makes_asking_for_usage(
    fake: FakeProvider,
) -> None:
    """The agent as written: dres's run sends what ``Runner.run_streamed`` alone sends, and asks
    a Chat Completions stream for its usage (dres's budgets count it)."""
    fake.script(OPENAI.text("Hi"), OPENAI.text("Hi"))
    agent = Effects().agent(fake)

    async def alone() -> None:
        config = RunConfig(tracing_disabled=True)
        result = Runner.run_streamed(
            agent, [{"role": "user", "content": "Hello"}], run_config=config
        )
        async for _ in result.stream_events():
            pass

    asyncio.run(alone())
    run(AgentsSdkAdapter(agent), HELLO, Recorder())
    by_sdk, by_dres = (r.body for r in fake.received)
    assert by_dres.pop("stream_options") == {"include_usage": True}
    assert by_dres == by_sdk


def test_a_recorded_result_reaches_the_model_and_the_tool_never_runs(fake: FakeProvider) -> None:
    """Layer 2: dres answers an exact repeat of a completed write with its recorded result."""
    fake.script(tool_reply("call_1", "send_email", EMAILED), OPENAI.text("Sent."))
    effects = Effects()
    run(AgentsSdkAdapter(effects.agent(fake)), HELLO, Recorder(recorded={"sent": "earlier"}))
    assert effects.sent == []
    assert fake.received[1].body["messages"][-1]["content"] == '{"sent": "earlier"}'


def test_halt_from_hooks_tool_leaves_run_as_itself(fake: FakeProvider) -> None:
    fake.script(tool_reply("call_1", "send_email", EMAILED))
    effects = Effects()
    with pytest.raises(Halt):
        run(AgentsSdkAdapter(effects.agent(fake)), HELLO, Recorder(halt_tool=True))
    assert effects.sent == []
    assert len(fake.received) == 1


def test_halt_from_model_start_makes_no_model_call(fake: FakeProvider) -> None:
    with pytest.raises(Halt):
        run(AgentsSdkAdapter(Effects().agent(fake)), HELLO, Recorder(halt_model=True))
    assert fake.received == []


@input_guardrail
async def _slow_guardrail(
    _ctx: RunContextWrapper[Any], _agent: Agent[Any], _input: Any
) -> GuardrailFunctionOutput:
    await asyncio.sleep(0.05)
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


@pytest.mark.parametrize("where", ["model", "tool"])
def test_halt_leaves_run_as_itself_beside_an_input_guardrail_the_sdk_runs_alongside(
    fake: FakeProvider, where: str
) -> None:
    fake.script(tool_reply("call_1", "send_email", EMAILED), OPENAI.text("Sent."))
    effects = Effects()
    agent = effects.agent(fake, input_guardrails=[_slow_guardrail])
    with pytest.raises(Halt):
        run(
            AgentsSdkAdapter(agent),
            HELLO,
            Recorder(halt_model=where == "model", halt_tool=where == "tool"),
        )
    assert effects.sent == []


def test_a_tool_exception_reaches_dres_as_itself_not_as_the_sdks_error_text(
    fake: FakeProvider,
) -> None:
    @function_tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        raise ValueError(f"provider rejected {order_id}")

    fake.script(tool_reply("call_1", "refund", {"order_id": "o1"}), OPENAI.text("Sorry."))
    agent = Agent(name="t", model=model(fake), tools=[refund])
    hooks = Recorder()
    run(AgentsSdkAdapter(agent), HELLO, hooks)
    assert ("tool_error", "ValueError", "provider rejected o1") in hooks.calls
    assert "provider rejected o1" in fake.received[1].body["messages"][-1]["content"]


def test_a_call_whose_input_is_no_json_reaches_dres_as_its_text(fake: FakeProvider) -> None:
    """dres's executor decides it (its schema check, or the tool's own error once invoked)."""
    bad = openai_stream(
        chunk(tool_delta(0, call_id="call_1", name="send_email", args="{bad")),
        chunk({}, finish="tool_calls"),
        usage_chunk(),
    )
    fake.script(Reply(body=bad), OPENAI.text("Sorry."))
    effects = Effects()
    hooks = Recorder()
    run(AgentsSdkAdapter(effects.agent(fake)), HELLO, hooks)
    assert ("tool", "send_email", "{bad") in hooks.calls
    assert effects.sent == []
    assert "Invalid JSON input" in fake.received[1].body["messages"][-1]["content"]


class SlowToDecide(Recorder):
    """dres takes longer to decide a call (an approval, the guard) than the tool may run."""

    async def tool(
        self, name: str, arguments: Any, invoke: Callable[[], Awaitable[Any]]
    ) -> ToolAnswer:
        await asyncio.sleep(0.3)
        return await super().tool(name, arguments, invoke)


def test_a_tools_timeout_bounds_the_tool_not_dres_deciding_it(fake: FakeProvider) -> None:
    @function_tool(timeout=0.1)
    async def lookup(key: str) -> str:
        """Look a key up."""
        return f"found {key}"

    fake.script(tool_reply("call_1", "lookup", {"key": "a"}), OPENAI.text("Done."))
    hooks = SlowToDecide()
    run(AgentsSdkAdapter(Agent(name="t", model=model(fake), tools=[lookup])), HELLO, hooks)
    assert ("tool_result", "found a") in hooks.calls
    assert fake.received[1].body["messages"][-1]["content"] == "found a"


def test_calls_of_one_response_run_one_at_a_time(fake: FakeProvider) -> None:
    spans: list[tuple[str, str]] = []

    @function_tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        spans.append(("start", key))
        await asyncio.sleep(0.05)
        spans.append(("end", key))
        return key

    two = openai_stream(
        chunk(tool_delta(0, call_id="call_a", name="lookup", args='{"key": "a"}')),
        chunk(tool_delta(1, call_id="call_b", name="lookup", args='{"key": "b"}')),
        chunk({}, finish="tool_calls"),
        usage_chunk(),
    )
    fake.script(Reply(body=two), OPENAI.text("Done."))
    hooks = Recorder()
    run(AgentsSdkAdapter(Agent(name="t", model=model(fake), tools=[lookup])), HELLO, hooks)
    assert spans == [("start", "a"), ("end", "a"), ("start", "b"), ("end", "b")]
    assert ("model_done", 2, Usage(3, 9)) in hooks.calls


def test_a_structured_final_output_reaches_the_hooks_as_its_json(fake: FakeProvider) -> None:
    class Answer(BaseModel):
        city: str

    fake.script(OPENAI.text('{"city": ', '"Paris"}'))
    hooks = Recorder()
    agent = Agent(name="t", model=model(fake), output_type=Answer)
    run(AgentsSdkAdapter(agent), HELLO, hooks)
    text = "".join(c[1] for c in hooks.calls if c[0] == "text")
    assert json.loads(text) == {"city": "Paris"}


def test_a_model_name_is_resolved_by_the_provider_and_wrapped(fake: FakeProvider) -> None:
    fake.script(OPENAI.text("Hi"))
    provider = OpenAIProvider(base_url=f"{fake.url}/v1", api_key="k", use_responses=False)
    hooks = Recorder()
    adapter = AgentsSdkAdapter(Agent(name="t", model="gpt-named"), model_provider=provider)
    assert adapter.model_name == "gpt-named"
    run(adapter, HELLO, hooks)
    assert fake.received[0].body["model"] == "gpt-named"
    assert hooks.calls == [("model_start",), ("text", "Hi"), ("model_done", 0, Usage(3, 9))]


def _response(status: str, output: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "gpt-test",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        **extra,
    }


def _responses_stream(*last: dict[str, Any]) -> Reply:
    """A Responses API stream: two text deltas, then ``last`` (its end)."""
    deltas = [
        {
            "type": "response.output_text.delta",
            "sequence_number": n,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": part,
            "logprobs": [],
        }
        for n, part in ((1, "Hel"), (2, "lo"))
    ]
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": _response("in_progress", []),
    }
    return Reply(body=sse([created, *deltas, *last]))


def responses_model(fake: FakeProvider) -> OpenAIResponsesModel:
    client = AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="fake-key")
    return OpenAIResponsesModel(model="gpt-test", openai_client=client)


def test_a_responses_api_model_is_recorded_the_same_way(fake: FakeProvider) -> None:
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
    }
    usage = {
        "input_tokens": 4,
        "output_tokens": 2,
        "total_tokens": 6,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    done = {
        "type": "response.output_item.done",
        "sequence_number": 3,
        "output_index": 0,
        "item": message,
    }
    completed = {
        "type": "response.completed",
        "sequence_number": 4,
        "response": _response("completed", [message], usage=usage),
    }
    fake.script(_responses_stream(done, completed))
    hooks = Recorder()
    run(AgentsSdkAdapter(Agent(name="t", model=responses_model(fake))), HELLO, hooks)
    assert fake.received[0].path == "/v1/responses"
    assert hooks.calls == [
        ("model_start",),
        ("text", "Hel"),
        ("text", "lo"),
        ("model_done", 0, Usage(4, 2)),
    ]


@pytest.mark.parametrize(
    ("kind", "code"), [("server_error", "http_5xx"), ("rate_limit_exceeded", "rate_limit")]
)
def test_a_failed_responses_stream_is_a_model_error(
    fake: FakeProvider, kind: str, code: str
) -> None:
    error = {"code": kind, "message": "failed (fake)"}
    failed = {
        "type": "response.failed",
        "sequence_number": 3,
        "response": _response("failed", [], error=error),
    }
    fake.script(_responses_stream(failed))
    with pytest.raises(ModelError) as info:
        run(AgentsSdkAdapter(Agent(name="t", model=responses_model(fake))), HELLO, Recorder())
    assert info.value.code == code


# -- history -------------------------------------------------------------------------------------


def test_history_with_a_prior_call_and_result_is_sent_as_chat_messages(fake: FakeProvider) -> None:
    fake.script(OPENAI.text("Done."))
    history: list[Message] = [
        UserMessage("Email a@x.io."),
        AssistantMessage("On it.", (RecordedCall("send_email", EMAILED, "c-1"),)),
        ToolResultMessage("c-1", "send_email", '{"sent": "a@x.io"}'),
        UserMessage("[dres] The run resumed."),
    ]
    run(AgentsSdkAdapter(Effects().agent(fake)), history, Recorder())
    call = {
        "id": "c-1",
        "type": "function",
        "function": {"name": "send_email", "arguments": json.dumps(EMAILED)},
    }
    assert fake.received[0].body["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Email a@x.io."},
        {"role": "assistant", "content": "On it.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c-1", "content": '{"sent": "a@x.io"}'},
        {"role": "user", "content": "[dres] The run resumed."},
    ]


def test_an_assistant_turn_of_calls_alone_is_its_function_call_items() -> None:
    items = input_items([AssistantMessage("", (RecordedCall("f", {}, "c-1"),))])
    assert items == [{"type": "function_call", "call_id": "c-1", "name": "f", "arguments": "{}"}]


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (502, "http_5xx"),
        (500, "http_5xx"),
        (429, "rate_limit"),
        (401, "auth"),
        (400, "invalid_request"),
    ],
)
def test_an_error_reply_is_the_model_error_code_with_no_retry_of_the_sdks(
    fake: FakeProvider, status: int, code: str
) -> None:
    """No ``x-should-retry: false``: without the adapter's no-retry setting the openai client
    would retry the 5xx and 429 on its own (and meet the fake's unscripted-request 400)."""
    fake.script(OPENAI.error(status, headers=()))
    hooks = Recorder()
    with pytest.raises(ModelError) as info:
        run(AgentsSdkAdapter(Effects().agent(fake)), HELLO, hooks)
    assert info.value.code == code
    assert len(fake.received) == 1
    assert hooks.calls == [("model_start",)]


def test_a_stream_cut_mid_way_is_a_resumable_model_error(fake: FakeProvider) -> None:
    fake.script(OPENAI.cut("Hel"))
    with pytest.raises(ModelError) as info:
        run(AgentsSdkAdapter(Effects().agent(fake)), HELLO, Recorder())
    assert info.value.resumable, info.value


# -- tools() -------------------------------------------------------------------------------------


async def _big_amount(_ctx: RunContextWrapper[Any], params: dict[str, Any], _call_id: str) -> bool:
    return bool(params["amount"] > 100)


def _refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount}"


def test_needs_approval_bool_and_callable_are_in_tools() -> None:
    always = function_tool(_refund, name_override="refund_always", needs_approval=True)
    big = function_tool(_refund, name_override="refund_big", needs_approval=_big_amount)
    never = function_tool(_refund, name_override="refund")
    tools = {
        t.name: t for t in AgentsSdkAdapter(Agent(name="t", tools=[always, big, never])).tools()
    }
    assert tools["refund_always"].needs_approval is True
    assert tools["refund"].needs_approval is False
    rule = tools["refund_big"].needs_approval
    assert callable(rule)
    assert rule({"order_id": "o", "amount": 500}) is True
    assert rule({"order_id": "o", "amount": 5}) is False
    assert tools["refund"].schema["required"] == ["order_id", "amount"]
    assert tools["refund"].description == "Refund an order."


def test_read_only_before_or_after_function_tool_or_in_metadata() -> None:
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    @function_tool
    @read_only
    def before(key: str) -> str:
        """Look a key up."""
        return key

    after = read_only(function_tool(lookup, name_override="after"))
    marked = function_tool(lookup, name_override="marked")
    marked.metadata = {"read_only": True}  # type: ignore[attr-defined]
    write = function_tool(lookup, name_override="write")
    agent = Agent(name="t", tools=[before, after, marked, write])
    flags = {t.name: t.read_only for t in AgentsSdkAdapter(agent).tools()}
    assert flags == {"before": True, "after": True, "marked": True, "write": False}


def test_the_example_agents_tools() -> None:
    tools = {t.name: t for t in AgentsSdkAdapter(example.agent).tools()}
    assert (tools["get_ticket"].read_only, tools["send_email"].read_only) == (True, False)
    assert tools["send_email"].needs_approval is False
    approval = {t.name: t for t in AgentsSdkAdapter(example.approval_agent).tools()}
    assert approval["send_email"].needs_approval is True
    assert AgentsSdkAdapter(example.agent).model_name == "gpt-test"


def test_the_example_agent_runs_on_the_fake_server(fake: FakeProvider) -> None:
    fake.script(tool_reply("call_1", "get_ticket", {"ticket_id": "T-1"}), OPENAI.text("Open."))
    hooks = Recorder()
    run(AgentsSdkAdapter(example.agent.clone(model=model(fake))), HELLO, hooks)
    assert ("tool_result", {"ticket_id": "T-1", "status": "open"}) in hooks.calls


def test_a_tool_that_needs_approval_is_asked_through_dres_not_the_sdk(fake: FakeProvider) -> None:
    """The SDK alone would end the run with a pending approval and never call the tool: dres
    decides the approval (``tools()`` says it is needed) and the run goes on."""
    fake.script(tool_reply("call_1", "send_email", EMAILED), OPENAI.text("Sent."))
    hooks = Recorder()
    run(AgentsSdkAdapter(example.approval_agent.clone(model=model(fake))), HELLO, hooks)
    assert ("tool", "send_email", EMAILED) in hooks.calls
    assert ("tool_result", {"sent": "a@x.io"}) in hooks.calls
    assert len(fake.received) == 2


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"handoffs": [Agent(name="billing")]}, "handoff billing"),
        ({"tools": [WebSearchTool()]}, "hosted tool"),
        ({"tools": [Agent(name="sub").as_tool("sub", "A sub-agent.")]}, "agent tool sub"),
        ({"tool_use_behavior": "stop_on_first_tool"}, "tool_use_behavior"),
        (
            {"mcp_servers": [MCPServerStdio(params={"command": "true"}, name="files")]},
            "MCP server files",
        ),
    ],
)
def test_what_is_not_supported_is_refused_at_load_naming_it(
    changes: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        AgentsSdkAdapter(Agent(name="t", **changes))


# -- call_alone ----------------------------------------------------------------------------------


def test_call_alone_runs_the_tool_and_raises_what_it_raised() -> None:
    sent: list[str] = []

    @function_tool
    def send(to: str) -> dict[str, str]:
        """Send."""
        if to == "bad":
            raise ValueError("bad address")
        sent.append(to)
        return {"sent": to}

    adapter = AgentsSdkAdapter(Agent(name="t", tools=[send]))
    assert asyncio.run(adapter.call_alone("send", {"to": "a@x.io"}, "c-1")) == {"sent": "a@x.io"}
    assert sent == ["a@x.io"]
    with pytest.raises(ValueError, match="bad address"):
        asyncio.run(adapter.call_alone("send", {"to": "bad"}, "c-2"))


# -- ASSUMES tripwires ---------------------------------------------------------------------------


def _copy_raises() -> None:
    @function_tool
    def boom() -> str:
        """Boom."""
        raise KeyError("boom")

    from agents.tool_context import ToolContext

    ctx: ToolContext[Any] = ToolContext(
        context=None, tool_name="boom", tool_call_id="c", tool_arguments="{}"
    )
    handled = asyncio.run(boom.on_invoke_tool(ctx, "{}"))
    assert isinstance(handled, str)  # the SDK's default: an error text for the model
    raising = set_function_tool_failure_error_function(copy.copy(boom), None)
    with pytest.raises(KeyError):
        asyncio.run(raising.on_invoke_tool(ctx, "{}"))
    assert isinstance(asyncio.run(boom.on_invoke_tool(ctx, "{}")), str)  # the original unchanged


def _invoke_function_tool() -> None:
    from agents.tool import invoke_function_tool
    from agents.tool_context import ToolContext

    ctx: ToolContext[Any] = ToolContext(
        context=None, tool_name="r", tool_call_id="c", tool_arguments="{}"
    )
    tool = function_tool(_refund, name_override="r")
    assert (
        asyncio.run(
            invoke_function_tool(
                function_tool=tool, context=ctx, arguments='{"order_id": "o", "amount": 3}'
            )
        )
        == "refunded 3"
    )


def _wrapped() -> None:
    assert function_tool(_refund).__wrapped__ is _refund
    bare = FunctionTool(
        name="b",
        description="",
        params_json_schema={},
        on_invoke_tool=_none,
        strict_json_schema=False,
    )
    with pytest.raises(AttributeError):
        bare.__wrapped__  # noqa: B018


async def _none(_ctx: Any, _input: str) -> None:
    return None


def _agent_tool() -> None:
    assert Agent(name="sub").as_tool("sub", "d")._is_agent_tool is True
    assert function_tool(_refund)._is_agent_tool is False


TRIPWIRES: dict[int, Callable[..., None] | str] = {
    0: "test_text_deltas_and_usage_reach_the_hooks_in_order",
    1: "test_a_tool_call_goes_through_hooks_tool_and_runs_the_tool_once",
    2: "test_an_error_reply_is_the_model_error_code_with_no_retry_of_the_sdks",
    3: "test_calls_of_one_response_run_one_at_a_time",
    4: _copy_raises,
    5: _invoke_function_tool,
    6: "test_halt_from_hooks_tool_leaves_run_as_itself",
    7: _wrapped,
    8: _agent_tool,
    9: "test_history_with_a_prior_call_and_result_is_sent_as_chat_messages",
}


def test_every_assumption_has_a_tripwire() -> None:
    assert sorted(TRIPWIRES) == list(range(len(ASSUMES)))
    names = set(globals())
    for check in TRIPWIRES.values():
        assert callable(check) or check in names, check


@pytest.mark.parametrize("index", [i for i, c in TRIPWIRES.items() if callable(c)])
def test_an_assumption_of_the_sdk_still_holds(index: int) -> None:
    check = TRIPWIRES[index]
    assert callable(check), ASSUMES[index]
    check()
