"""Row L1's agents (``bench.framework_bench``): one agent per framework, with one tool (``record``,
a no-op write) and an OpenAI chat model pointed at a fake OpenAI-compatible server; its runs alone
(as a user runs it: one JSON completion per request; and streamed, as dres's adapters ask for
each request), and the adapter dres runs it through.

The frameworks are imported when an agent is built: ``python -m bench`` runs without them.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import AsyncIterable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from worker.engine.frameworks.base import Adapter

PROMPT = "benchmark: record one thing"
#: a turn of CALLS tool calls (the fake model reads the number: ``calls_asked``)
CALLS = 6
PROMPT_MANY = f"benchmark: record {CALLS} things"
INSTRUCTIONS = "Record what you are asked to."
TOOL = "record"
ARGUMENTS = {"n": 1}
ANSWER = "Recorded."
#: the Agents SDK's adapter, merged apart from pydantic-ai's (issue 48)
AGENTS_ADAPTER = "worker.engine.frameworks.openai_agents_loop"

#: one run of the agent alone on a prompt
Run = Callable[[str], Coroutine[Any, Any, Any]]


@dataclass(frozen=True)
class Framework:
    """One framework's agent: its runs alone, and the adapter dres runs it through."""

    #: its name in the rows
    name: str
    #: how its run alone is called, in a few words (the rows' baseline)
    call: str
    #: one run of the agent alone, as a user writes it
    alone: Run
    #: the same run with every model request streamed (as dres's adapter asks for them)
    streamed: Run
    #: the adapter dres runs the agent through; None: not available (``missing`` says why)
    adapter: Adapter | None
    missing: str = ""


def record(n: int) -> dict[str, int]:
    """Record n (a no-op write)."""
    return {"recorded": n}


def openai_client(url: str) -> Any:
    """The openai SDK's async client for the fake server at ``url`` (retrying nothing, as dres's
    loop decides what a failed model call does)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=f"{url}/v1", api_key="fake-key", max_retries=0)


def pydantic_ai(url: str) -> Framework:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from worker.engine.frameworks.pydantic_ai_loop import PydanticAiAdapter

    model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=openai_client(url)))
    agent = Agent(model, instructions=INSTRUCTIONS, name="bench")
    agent.tool_plain(record)

    async def drain(ctx: Any, events: AsyncIterable[Any]) -> None:
        async for _ in events:
            pass

    return Framework(
        "pydantic-ai",
        "agent.run",
        lambda prompt: agent.run(prompt),
        lambda prompt: agent.run(prompt, event_stream_handler=drain),
        PydanticAiAdapter(agent),
    )


def agents_sdk(url: str) -> Framework:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool

    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=openai_client(url))
    agent = Agent(
        name="bench", instructions=INSTRUCTIONS, model=model, tools=[function_tool(record)]
    )
    config = RunConfig(tracing_disabled=True)

    async def streamed(prompt: str) -> None:
        result = Runner.run_streamed(agent, prompt, run_config=config)
        async for _ in result.stream_events():
            pass

    alone: Run = lambda prompt: Runner.run(agent, prompt, run_config=config)  # noqa: E731
    call = "Runner.run"
    if importlib.util.find_spec(AGENTS_ADAPTER) is None:
        missing = f"no {AGENTS_ADAPTER} yet"
        return Framework("Agents SDK", call, alone, streamed, None, missing)
    adapter: Adapter = importlib.import_module(AGENTS_ADAPTER).AgentsSdkAdapter(agent)
    return Framework("Agents SDK", call, alone, streamed, adapter)


#: each framework's distribution (its version in the report) and its agent's builder
FRAMEWORKS: tuple[tuple[str, Callable[[str], Framework]], ...] = (
    ("pydantic-ai-slim", pydantic_ai),
    ("openai-agents", agents_sdk),
)
