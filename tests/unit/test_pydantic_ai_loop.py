"""The pydantic-ai adapter's tripwires: each of ``ASSUMES`` checked against the installed
pydantic-ai (a new release that breaks one fails here, by name), and its pure parts: the history
it rebuilds from dres's messages, the model errors it maps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai import exceptions as pai_errors
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from worker.engine.frameworks.pydantic_ai_loop import ASSUMES, PydanticAiAdapter, model_error
from worker.engine.models.base import (
    AssistantMessage,
    RecordedCall,
    ToolResultMessage,
    UserMessage,
)
from worker.tools import read_only


def answering(seen: list[list[ModelMessage]], text: str = "ok") -> FunctionModel:
    """pydantic-ai's own function model (part of the framework, no network): keeps what it was
    sent and answers ``text``."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(text)])

    return FunctionModel(respond)


def test_assumes_names_every_tripwire() -> None:
    assert len(ASSUMES) == 4


def test_tripwire_static_system_prompts_are_kept_on_the_agent() -> None:
    agent = Agent(answering([]), system_prompt="be brief")
    assert tuple(agent._system_prompts) == ("be brief",)


def test_tripwire_override_replaces_the_agents_function_tools_and_toolsets() -> None:
    agent = Agent(answering([]))

    @agent.tool_plain
    def mine() -> str:
        return "x"

    other = FunctionToolset()
    with agent.override(tools=[], toolsets=[other]):
        listed = agent.toolsets
    assert not any("mine" in getattr(t, "tools", {}) for t in listed)
    assert other in listed


def test_tripwire_a_trailing_request_is_sent_as_the_runs_first_request() -> None:
    seen: list[list[ModelMessage]] = []
    agent = Agent(answering(seen))
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("hello")])]
    asyncio.run(agent.run(None, message_history=history))
    assert len(seen) == 1
    sent = seen[0]
    assert len(sent) == 1 and isinstance(sent[0], ModelRequest)
    assert sent[0].parts[-1].content == "hello"  # type: ignore[union-attr]


def test_tripwire_run_asks_its_model_through_request() -> None:
    calls: list[str] = []

    class Counting(FunctionModel):
        async def request(self, *args: Any, **kwargs: Any) -> ModelResponse:
            calls.append("request")
            return await super().request(*args, **kwargs)

    agent = Agent(Counting(lambda m, i: ModelResponse(parts=[TextPart("x")])))
    asyncio.run(agent.run("hi"))
    assert calls == ["request"]


def adapter(**kw: Any) -> PydanticAiAdapter:
    agent = Agent(answering([]), system_prompt="be brief", **kw)

    @agent.tool_plain
    def send(to: str) -> str:
        return to

    @agent.tool_plain
    @read_only
    def look(key: str) -> str:
        return key

    @agent.tool_plain(metadata={"read_only": True})
    def peek(key: str) -> str:
        return key

    @agent.tool_plain(requires_approval=True)
    def pay(amount: int) -> int:
        return amount

    return PydanticAiAdapter(agent)


def test_tools_are_listed_with_what_dres_needs() -> None:
    tools = {t.name: t for t in adapter().tools()}
    assert {n: t.read_only for n, t in tools.items()} == {
        "send": False,
        "look": True,
        "peek": True,
        "pay": False,
    }
    assert tools["pay"].needs_approval is True and tools["send"].needs_approval is False
    assert tools["send"].schema["properties"] == {"to": {"type": "string"}}


def test_a_fresh_turns_message_is_the_prompt_and_anything_else_a_history() -> None:
    a = adapter()
    assert a._history([UserMessage("hi")]) == ("hi", [])
    prompt, messages = a._history(
        [
            UserMessage("earlier"),
            AssistantMessage("answer"),
            UserMessage("send it"),
            AssistantMessage("", (RecordedCall("send", {"to": "a"}, "call_1"),)),
            ToolResultMessage("call_1", "send", '"a"'),
            UserMessage("Continue"),
        ]
    )
    assert prompt is None
    first = messages[0]
    assert isinstance(first, ModelRequest)
    assert isinstance(first.parts[0], SystemPromptPart) and first.parts[0].content == "be brief"
    assert [type(m).__name__ for m in messages] == [
        "ModelRequest",
        "ModelResponse",
        "ModelRequest",
        "ModelResponse",
        "ModelRequest",
    ]
    call = messages[3].parts[0]
    assert isinstance(call, ToolCallPart) and call.tool_call_id == "call_1"
    tail = messages[4].parts
    assert isinstance(tail[0], ToolReturnPart) and tail[0].tool_call_id == "call_1"
    assert isinstance(tail[1], UserPromptPart) and tail[1].content == "Continue"


def test_other_toolsets_are_refused_at_load_naming_them() -> None:
    class Elsewhere(FunctionToolset[Any]):
        pass

    agent = Agent(answering([]), toolsets=[FunctionToolset(), Elsewhere()])
    assert PydanticAiAdapter(agent)  # function toolsets are fine

    from pydantic_ai.toolsets import PrefixedToolset

    with pytest.raises(ValueError, match="PrefixedToolset"):
        PydanticAiAdapter(Agent(answering([]), toolsets=[PrefixedToolset(FunctionToolset(), "p")]))


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, "rate_limit"),
        (401, "auth"),
        (400, "invalid_request"),
        (502, "http_5xx"),
        (504, "gateway_timeout"),
    ],
)
def test_http_errors_map_to_the_codes_the_loop_acts_on(status: int, code: str) -> None:
    error = pai_errors.ModelHTTPError(status_code=status, model_name="m", body=None)
    assert model_error(error).code == code
