"""A ``pydantic_ai.Agent`` run by dres (docs/loops.md), through pydantic-ai's own extension
points: a ``WrapperModel`` around the agent's model (each request streamed, its text and usage
handed to dres), a ``WrapperToolset`` around the agent's toolsets (each call decided and recorded
by dres's executor, run by pydantic-ai when it runs) put in place with ``Agent.override``, and
``message_history`` rebuilt from the ledger. Nothing of pydantic-ai is patched.

- A tool's ``requires_approval=True`` asks through dres's approvals: the wrapper shows the
  framework the tool as a plain function tool (dres decides first), so pydantic-ai's own deferral
  never starts.
- Every tool is shown ``sequential`` so the calls of one response run one at a time, in the
  order the model made them (dres records them in that order).
- ``read_only`` marks, or ``Tool(metadata={"read_only": True})``, make a tool read-only.
- An output tool's call (a structured ``output_type``) is the answer: its arguments are streamed
  as the call's text, and it is no tool call of dres's.
- The agent's static ``system_prompt`` strings are put back ahead of a rebuilt history (pydantic-ai
  adds them only to an empty one); ``instructions`` it adds to every request itself.

Only function toolsets are supported (the agent's own tools, ``FunctionToolset``\\ s): another
toolset (MCP servers, dynamic toolsets) is refused at load, naming it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import exceptions as pai_errors
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    PartDeltaEvent,
    PartStartEvent,
    SystemPromptPart,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, infer_model
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import CombinedToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.usage import RunUsage, UsageLimits
from pydantic_core import to_jsonable_python

from worker.base.errors import ModelError
from worker.engine.frameworks.base import (
    Adapter,
    FrameworkTool,
    Hooks,
    Usage,
    marked_read_only,
)
from worker.engine.models.base import AssistantMessage, Message, ToolResultMessage, UserMessage

#: what this adapter assumes of pydantic-ai beyond its documented API (each has a tripwire test:
#: tests/unit/test_pydantic_ai_loop.py)
ASSUMES = (
    "Agent._system_prompts holds the agent's static system_prompt strings",
    "Agent.override(tools=[], toolsets=[…]) replaces the agent's function tools and toolsets",
    "a run given no prompt sends a history's trailing ModelRequest as its first request",
    "Agent.run without an event_stream_handler asks its model through Model.request",
)


class PydanticAiAdapter(Adapter):
    framework = "pydantic_ai"

    def __init__(self, agent: Agent[Any, Any]) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"not a pydantic_ai.Agent: {type(agent).__name__}")
        self.agent = agent
        self.toolsets = list(agent.toolsets)
        refused = [type(t).__name__ for t in self.toolsets if not isinstance(t, FunctionToolset)]
        if refused:
            raise ValueError(
                f"pydantic_ai agent {agent.name or ''!s}: toolsets dres cannot run yet: "
                + ", ".join(sorted(set(refused)))
                + " (only function tools)"
            )
        if agent.model is None:
            raise ValueError("pydantic_ai agent has no model: give Agent(model=…)")
        self.model: Model = infer_model(agent.model)
        self.model_name = f"{self.model.system}:{self.model.model_name}"
        self._tools = tuple(self._listed())

    # -- the agent's tools ------------------------------------------------------------------

    def _listed(self) -> list[FrameworkTool]:
        tools: list[FrameworkTool] = []
        for toolset in self.toolsets:
            assert isinstance(toolset, FunctionToolset)
            for tool in toolset.tools.values():
                tool_def = tool.tool_def
                tools.append(
                    FrameworkTool(
                        name=tool.name,
                        description=tool_def.description or "",
                        schema=dict(tool_def.parameters_json_schema),
                        read_only=marked_read_only(tool.function, tool, metadata=tool.metadata),
                        needs_approval=bool(tool.requires_approval),
                    )
                )
        return tools

    def tools(self) -> Sequence[FrameworkTool]:
        return self._tools

    # -- a run ------------------------------------------------------------------------------

    async def run(self, history: Sequence[Message], hooks: Hooks) -> None:
        prompt, messages = self._history(history)
        model = _DresModel(self.model, hooks)
        toolset = _DresToolset(CombinedToolset(self.toolsets), hooks=hooks)
        try:
            with self.agent.override(tools=[], toolsets=[toolset]):
                await self.agent.run(
                    prompt,
                    message_history=messages or None,
                    model=model,
                    # dres counts model calls itself (DRES_MAX_MODEL_CALLS), across chunks
                    usage_limits=UsageLimits(request_limit=None),
                )
        except pai_errors.ModelAPIError as e:
            raise model_error(e) from e

    def _history(self, history: Sequence[Message]) -> tuple[str | None, list[ModelMessage]]:
        """The run's prompt and message history: a fresh turn's single message is the prompt
        (pydantic-ai adds the system prompt itself); anything else is a history whose trailing
        request is sent as is, with the agent's system prompt put back at its head."""
        if len(history) == 1 and isinstance(history[0], UserMessage):
            return history[0].text, []
        messages: list[ModelMessage] = []
        request: list[ModelRequestPart] = [
            SystemPromptPart(p) for p in getattr(self.agent, "_system_prompts", ())
        ]
        for message in history:
            if isinstance(message, UserMessage):
                request.append(UserPromptPart(message.text))
            elif isinstance(message, ToolResultMessage):
                request.append(
                    ToolReturnPart(message.tool, message.content, tool_call_id=message.call_id)
                )
            else:
                assert isinstance(message, AssistantMessage)
                parts: list[ModelResponsePart] = [TextPart(message.text)] if message.text else []
                parts += [
                    ToolCallPart(c.name, c.input, tool_call_id=c.call_id)
                    for c in message.tool_calls
                ]
                if not parts:
                    continue
                if request:
                    messages.append(ModelRequest(parts=request))
                    request = []
                messages.append(ModelResponse(parts=parts))
        if request:
            messages.append(ModelRequest(parts=request))
        return None, messages

    async def call_alone(self, name: str, arguments: Any, call_id: str) -> Any:
        ctx = RunContext(
            deps=None, model=self.model, usage=RunUsage(), tool_call_id=call_id, tool_name=name
        )
        toolset = CombinedToolset(self.toolsets)
        async with toolset:
            tools = await toolset.get_tools(ctx)
            tool = tools[name]
            validated = tool.args_validator.validate_python(arguments)
            return await toolset.call_tool(name, validated, ctx, tool)


class _DresModel(WrapperModel):
    """The agent's model, each request streamed through dres's hooks."""

    def __init__(self, wrapped: Model, hooks: Hooks) -> None:
        super().__init__(wrapped)
        self.hooks = hooks

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        await self.hooks.model_start()
        async with self.wrapped.request_stream(
            messages, model_settings, model_request_parameters
        ) as stream:
            async for event in stream:
                self.hooks.text(_text_of(event))
            response = stream.get()
        await self._done(response, model_request_parameters)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[Any]:
        # A run dres starts never streams (no event_stream_handler); should a capability ask,
        # the call is recorded whole when it ends.
        await self.hooks.model_start()
        async with self.wrapped.request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as stream:
            yield stream
            response = stream.get()
        for part in response.parts:
            if isinstance(part, TextPart):
                self.hooks.text(part.content)
        await self._done(response, model_request_parameters)

    async def _done(self, response: ModelResponse, params: ModelRequestParameters) -> None:
        outputs = {t.name for t in params.output_tools}
        calls = 0
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                if part.tool_name in outputs:
                    self.hooks.text(part.args_as_json_str())  # the answer, as the call's text
                else:
                    calls += 1
        usage = response.usage
        await self.hooks.model_done(calls, Usage(usage.input_tokens, usage.output_tokens))


def _text_of(event: Any) -> str:
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


@dataclass
class _DresToolset(WrapperToolset[Any]):
    """The agent's toolsets, every call through dres's executor (a dataclass, as pydantic-ai
    rebuilds a wrapper with ``dataclasses.replace``)."""

    hooks: Hooks = field(kw_only=True)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        shown = {}
        for name, tool in tools.items():
            kind = "function" if tool.tool_def.kind == "unapproved" else tool.tool_def.kind
            shown[name] = replace(tool, tool_def=replace(tool.tool_def, kind=kind, sequential=True))
        return shown

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        async def invoke() -> Any:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        answer = await self.hooks.tool(name, to_jsonable_python(tool_args), invoke)
        return answer.result


def model_error(error: pai_errors.ModelAPIError) -> ModelError:
    """pydantic-ai's model error as the code dres's loop acts on (``ModelError``)."""
    message = str(error)
    if isinstance(error, pai_errors.ModelRateLimitError):
        return ModelError("rate_limit", message)
    if isinstance(error, pai_errors.ModelAuthenticationError):
        return ModelError("auth", message)
    if isinstance(error, pai_errors.ModelTimeoutError):
        return ModelError("gateway_timeout", message)
    if isinstance(error, pai_errors.ModelConnectionError):
        return ModelError("connection_reset", message)
    if isinstance(error, pai_errors.ModelServerError | pai_errors.ModelUnavailableError):
        return ModelError("http_5xx", message)
    if isinstance(error, pai_errors.ModelHTTPError):
        status = error.status_code
        if status == 429:
            return ModelError("rate_limit", message)
        if status in (401, 403):
            return ModelError("auth", message)
        if status == 504:
            return ModelError("gateway_timeout", message)
        return ModelError("http_5xx" if status >= 500 else "invalid_request", message)
    if isinstance(error, pai_errors.ModelRequestRejectedError):
        return ModelError("invalid_request", message)
    return ModelError("stream_ended", message)


__all__ = ["ASSUMES", "PydanticAiAdapter", "model_error"]
