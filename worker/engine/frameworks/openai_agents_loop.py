"""An OpenAI Agents SDK agent run on dres (``DRES_LOOP=openai_agents:MODULE:ATTR``, docs/loops.md).

dres sits at the SDK's own extension points, and patches nothing:

- **the model**: the model the agent would use (its ``Model``, or its name resolved by the
  ``ModelProvider`` a run would use, the SDK's ``MultiProvider`` by default) is wrapped in a
  ``Model`` whose ``get_response`` streams the wrapped model's ``stream_response``: ``model_start``
  before, every text delta to ``text``, ``model_done`` with the call's usage after. Chat
  Completions and the Responses API alike: both yield Responses stream events. The run's
  ``RunConfig.model_settings`` sets ``retry=ModelRetrySettings(max_retries=0)``, which turns off
  the runner's retries and, for the SDK's OpenAI models, the openai client's own: a failed call
  reaches dres's loop at once, as a ``ModelError``, and dres decides (resume, stop).
- **the tools**: the run's agent is a clone whose every ``FunctionTool`` is a copy that asks
  dres (``hooks.tool``) and never needs the SDK's approval (dres asks through its own); the
  copy's ``invoke`` runs the original tool with the SDK's failure handling turned off
  (``failure_error_function=None`` semantics, set on a copy of the tool), so the tool's own
  exception reaches dres's executor, which records an error result. Calls of one model response
  run one at a time (``ToolExecutionConfig(max_function_tool_concurrency=1)``).
  The same settings ask a Chat Completions stream for its usage (``include_usage``), unless
  the agent says otherwise: dres's token budgets count it.
- **the history**: dres's conversation as the SDK's input items (messages, ``function_call``,
  ``function_call_output``), the run's ``input``.

Not supported (refused when the agent is loaded, one line): handoffs, agents as tools, MCP
servers, hosted tools, a ``tool_use_behavior`` other than ``run_llm_again``.

Every assumption about the SDK's version is named in ``ASSUMES``; each has a tripwire test
(tests/unit/test_openai_agents_loop.py).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import openai
from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelProvider,
    ModelResponse,
    ModelRetrySettings,
    ModelSettings,
    ModelTracing,
    MultiProvider,
    RunConfig,
    RunContextWrapper,
    Runner,
    ToolExecutionConfig,
)
from agents import Usage as SdkUsage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.models import get_default_model
from agents.tool import (
    Tool,
    invoke_function_tool,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseOutputItemDoneEvent,
    ResponseRefusalDeltaEvent,
    ResponseTextDeltaEvent,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam
from pydantic_core import to_jsonable_python

from worker.base.errors import ModelError
from worker.engine.frameworks.base import Adapter, FrameworkTool, Hooks, Usage, marked_read_only
from worker.engine.frameworks.bridge import run_on_loop
from worker.engine.models.base import AssistantMessage, Message, ToolResultMessage, UserMessage
from worker.engine.models.providers import ERROR_TYPES, model_error

#: the SDK's model turns a run may take: dres enforces its own model-call limit
MAX_TURNS = 1_000_000

#: what this adapter relies on in openai-agents (read against 0.25), beyond its documented API;
#: each is checked by a tripwire test
ASSUMES = (
    "Runner.run calls Model.get_response once per model call, with the ModelResponse built by "
    "the Model (output items, usage, response_id)",
    "Model.stream_response yields Responses stream events: response.output_text.delta, "
    "response.output_item.done, response.completed (Chat Completions models too)",
    "RunConfig.model_settings retry=ModelRetrySettings(max_retries=0) turns off the runner's "
    "retries and the openai client's own (provider-managed) retries",
    "RunConfig.tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1) runs one "
    "function tool call at a time",
    "copy.copy(FunctionTool) rebinds a @function_tool's invoker to the copy, so "
    "agents.tool.set_function_tool_failure_error_function(copy, None) makes the copy raise the "
    "tool's exception",
    "agents.tool.invoke_function_tool(function_tool=, context=, arguments=) runs a tool as a "
    "run does (its timeout included)",
    "a BaseException (dres's Halt) raised by FunctionTool.on_invoke_tool leaves Runner.run as "
    "itself",
    "FunctionTool.__wrapped__ is the function @function_tool wrapped (AttributeError if none)",
    "FunctionTool._is_agent_tool marks Agent.as_tool (a sub-agent)",
    "a chat-completions input message of type 'message', role 'assistant', output_text content "
    "and no id is an assistant message that a following function_call joins",
)


# -- the agent's tools ---------------------------------------------------------------------------


def _refused(agent: Agent[Any]) -> list[str]:
    """What of ``agent`` this adapter does not run (yet), each named."""
    refused = [
        f"handoff {h.agent_name if isinstance(h, Handoff) else h.name}" for h in agent.handoffs
    ]
    refused += [f"MCP server {getattr(s, 'name', s)}" for s in agent.mcp_servers]
    for tool in agent.tools:
        if not isinstance(tool, FunctionTool):
            refused.append(f"hosted tool {getattr(tool, 'name', type(tool).__name__)}")
        elif getattr(tool, "_is_agent_tool", False):
            refused.append(f"agent tool {tool.name} (a sub-agent)")
    if agent.tool_use_behavior != "run_llm_again":
        refused.append(f"tool_use_behavior={agent.tool_use_behavior!r}")
    return refused


def _function(tool: FunctionTool) -> Any:
    """The function ``@function_tool`` wrapped, or None (a FunctionTool built by hand)."""
    try:
        return tool.__wrapped__
    except AttributeError:
        return None


def tool_metadata(tool: FunctionTool) -> Any:
    """The tool's metadata, as dres reads it: a ``metadata`` dict set on the FunctionTool
    (``get_ticket.metadata = {"read_only": True}``). The SDK's FunctionTool has no metadata of
    its own for function tools (``mcp_annotations`` is an MCP server's hint, which the SDK itself
    says is no proof of side effects: not read as read-only)."""
    return getattr(tool, "metadata", None)


def _raising(tool: FunctionTool) -> FunctionTool:
    """A copy of ``tool`` that raises what its function raised, where the SDK would hand the
    model an error string (``failure_error_function=None``): dres's executor records the error."""
    return set_function_tool_failure_error_function(copy.copy(tool), None)


async def _approval(rule: Callable[..., Any], arguments: Any) -> bool:
    verdict = rule(RunContextWrapper(context=None), arguments, "")
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return bool(verdict)


def _needs_approval(tool: FunctionTool) -> bool | Callable[[Any], bool]:
    rule = tool.needs_approval
    if not callable(rule):
        return bool(rule)

    def needs(arguments: Any) -> bool:
        return bool(run_on_loop(_approval(rule, arguments)))

    return needs


def _answer_text(result: Any) -> str:
    """A call's result as the model gets it: text as is, anything else as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(to_jsonable_python(result, fallback=str))


def _arguments(input_json: str) -> Any:
    """The call's input as JSON values (its raw text when it is no JSON: the tool then fails
    on it, and dres records that)."""
    if not input_json:
        return {}
    try:
        return json.loads(input_json)
    except ValueError:
        return input_json


def _dres_tool(tool: FunctionTool, hooks: Hooks) -> FunctionTool:
    """``tool`` asking dres: its call goes through ``hooks.tool``, which runs the original
    (``invoke``) when dres lets it, and answers the model with the result dres recorded."""
    raising = _raising(tool)

    async def on_invoke_tool(ctx: ToolContext[Any], input_json: str) -> Any:
        def invoke() -> Awaitable[Any]:
            return invoke_function_tool(function_tool=raising, context=ctx, arguments=input_json)

        answer = await hooks.tool(tool.name, _arguments(input_json), invoke)
        return _answer_text(answer.result)

    asking = copy.copy(tool)
    asking.on_invoke_tool = on_invoke_tool
    asking.needs_approval = False
    # the tool's own timeout is kept by ``invoke``; here it would cut dres's decision short
    asking.timeout_seconds = None
    return asking


# -- the model -----------------------------------------------------------------------------------


def _sdk_usage(response: Any) -> SdkUsage:
    usage = getattr(response, "usage", None)
    if usage is None:
        return SdkUsage(requests=1)
    return SdkUsage(
        requests=1,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details=usage.input_tokens_details,
        output_tokens_details=usage.output_tokens_details,
    )


#: the stream events of a response that failed or ended incomplete
FAILED = frozenset({"response.failed", "response.incomplete", "error", "response.error"})


def _stream_error(event: Any) -> ModelError:
    """A failed or incomplete response, or an error event, inside a stream that began 200 OK."""
    kind = str(getattr(event, "type", "error"))
    response = getattr(event, "response", None)
    if kind == "response.incomplete":
        details = getattr(response, "incomplete_details", None)
        return ModelError("invalid_request", f"incomplete response: {details}")
    error = getattr(response, "error", None) or event
    code = str(getattr(error, "code", None))
    return ModelError(ERROR_TYPES.get(code, "http_5xx"), f"{kind}: {getattr(error, 'message', '')}")


class DresModel(Model):
    """The agent's model, each call recorded by dres: ``model_start``, the text deltas, and
    ``model_done`` with its tool calls and usage."""

    def __init__(self, wrapped: Model, hooks: Hooks) -> None:
        self.wrapped = wrapped
        self.hooks = hooks
        #: the last call's response, built from its stream as the runner builds a streamed one
        self.response: ModelResponse | None = None

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        events = self.stream_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        async for _ in events:
            pass
        assert self.response is not None  # the stream raised otherwise
        return self.response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        self.response = None
        await self.hooks.model_start()
        streamed: list[Any] = []
        events = self.wrapped.stream_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        try:
            async for event in events:
                if isinstance(event, ResponseTextDeltaEvent | ResponseRefusalDeltaEvent):
                    self.hooks.text(event.delta)
                elif isinstance(event, ResponseOutputItemDoneEvent):
                    streamed.append(event.item)
                elif isinstance(event, ResponseCompletedEvent):
                    await self._done(event, streamed)
                elif event.type in FAILED:
                    raise _stream_error(event)
                yield event
        except ModelError:
            raise
        except Exception as e:
            error = model_error(openai, e)
            if error is None:
                raise
            raise error from e
        finally:
            # a stream left early (a failure, Halt) is closed now, not when collected
            close = getattr(events, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):  # the stream's own error is the one to raise
                    await close()
        if self.response is None:
            raise ModelError("stream_ended", "the model's stream ended with no completed response")

    async def _done(self, event: ResponseCompletedEvent, streamed: list[Any]) -> None:
        response = event.response
        # Some backends leave the final response's output empty and send each item on its own
        # (the runner does the same for a streamed run)
        output = list(response.output) or streamed
        usage = _sdk_usage(response)
        self.response = ModelResponse(
            output=output,
            usage=usage,
            response_id=response.id,
            request_id=getattr(response, "_request_id", None),
        )
        calls = sum(1 for item in output if getattr(item, "type", None) == "function_call")
        await self.hooks.model_done(calls, Usage(usage.input_tokens, usage.output_tokens))

    # the wrapped model's own answers to the runner's questions
    def get_default_model_settings(self) -> ModelSettings | None:
        return self.wrapped.get_default_model_settings()

    def _get_request_settings(
        self,
        settings: ModelSettings,
        *,
        prompt: ResponsePromptParam | None,
        has_tools: bool,
        implicit_fields: set[str],
    ) -> ModelSettings:
        return self.wrapped._get_request_settings(
            settings, prompt=prompt, has_tools=has_tools, implicit_fields=implicit_fields
        )

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.wrapped._cleanup_on_run_end(owner)

    async def close(self) -> None:
        await self.wrapped.close()


class DresModelProvider(ModelProvider):
    """The run's provider: the models ``base`` resolves, each wrapped in a ``DresModel``."""

    def __init__(self, base: ModelProvider, hooks: Hooks) -> None:
        self.base = base
        self.hooks = hooks

    def get_model(self, model_name: str | None) -> Model:
        return DresModel(self.base.get_model(model_name), self.hooks)

    async def aclose(self) -> None:
        await self.base.aclose()


# -- the history ---------------------------------------------------------------------------------


def input_items(history: Sequence[Message]) -> list[TResponseInputItem]:
    """dres's conversation as the SDK's input items (Responses format, which the SDK converts
    for Chat Completions): an assistant's text and the calls it made form one message."""
    items: list[Any] = []
    for message in history:
        if isinstance(message, UserMessage):
            items.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            if message.text:
                text = {"type": "output_text", "text": message.text, "annotations": []}
                items.append({"type": "message", "role": "assistant", "content": [text]})
            items += [
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": json.dumps(call.input),
                }
                for call in message.tool_calls
            ]
        elif isinstance(message, ToolResultMessage):
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.call_id,
                    "output": message.content,
                }
            )
    return items


# -- the adapter ---------------------------------------------------------------------------------


def _model_name(model: str | Model | None) -> str:
    if isinstance(model, str):
        return model
    if model is None:
        return get_default_model()
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else type(model).__name__


class AgentsSdkAdapter(Adapter):
    """One ``agents.Agent``, run by dres. ``model_provider``: what resolves a model name (the
    agent's, or the SDK's default model) — by default the SDK's own ``MultiProvider``, one per
    run as ``Runner.run`` makes it; ignored when the agent's ``model`` is a ``Model``."""

    framework = "openai_agents"

    def __init__(self, agent: Agent[Any], model_provider: ModelProvider | None = None) -> None:
        refused = _refused(agent)
        if refused:
            raise ValueError(
                f"openai_agents agent {agent.name!r}: not supported by dres (yet): "
                + ", ".join(refused)
            )
        self.agent = agent
        self.model_provider = model_provider
        self.model_name = _model_name(agent.model)
        self._tools: dict[str, FunctionTool] = {
            t.name: t for t in agent.tools if isinstance(t, FunctionTool)
        }

    def tools(self) -> Sequence[FrameworkTool]:
        return [
            FrameworkTool(
                name=tool.name,
                description=tool.description,
                schema=tool.params_json_schema,
                read_only=marked_read_only(tool, _function(tool), metadata=tool_metadata(tool)),
                needs_approval=_needs_approval(tool),
            )
            for tool in self._tools.values()
        ]

    async def run(self, history: Sequence[Message], hooks: Hooks) -> None:
        changes: dict[str, Any] = {"tools": [_dres_tool(t, hooks) for t in self._tools.values()]}
        if isinstance(self.agent.model, Model):  # a Model of its own: no provider is asked
            changes["model"] = DresModel(self.agent.model, hooks)
        agent = self.agent.clone(**changes)
        base = self.model_provider
        owned = base is None
        if base is None:  # as Runner.run does: a provider of the run's own, closed at its end
            base = MultiProvider()
        config = RunConfig(
            model_provider=DresModelProvider(base, hooks),
            model_settings=ModelSettings(
                retry=ModelRetrySettings(max_retries=0),
                # dres's budgets need each call's usage; an agent's own ``False`` is kept
                include_usage=True if self.agent.model_settings.include_usage is None else None,
            ),
            tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1),
            tracing_disabled=True,
        )
        try:
            await Runner.run(
                agent, input=input_items(history), run_config=config, max_turns=MAX_TURNS
            )
        finally:
            if owned:
                await base.aclose()

    async def call_alone(self, name: str, arguments: Any, call_id: str) -> Any:
        tool = self._tools[name]
        input_json = json.dumps(arguments)
        ctx: ToolContext[Any] = ToolContext(
            context=None,
            tool_name=name,
            tool_call_id=call_id,
            tool_arguments=input_json,
            agent=self.agent,
        )
        return await invoke_function_tool(
            function_tool=_raising(tool), context=ctx, arguments=input_json
        )


__all__ = ["ASSUMES", "AgentsSdkAdapter", "DresModel", "DresModelProvider", "input_items"]
