"""An OpenAI Agents SDK agent the tests run on dres
(``openai_agents:tests.frameworks.agents_sdk_agent:agent``), against the fake OpenAI-compatible
server ``OPENAI_BASE_URL`` names (rigs/providers.py) through Chat Completions. Each effect of
``send_email`` is counted in a file (``DRES_TEST_EFFECTS``) so a test sees how many times it ran,
whatever process ran it.

``approval_agent`` is the same agent whose ``send_email`` needs approval (the SDK's
``needs_approval``): dres asks a person, and runs it once approved.
"""

from __future__ import annotations

import os

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

from tests.frameworks.effects import effect
from worker.tools import read_only


def _model() -> OpenAIChatCompletionsModel:
    client = AsyncOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", "fake-key"),
    )
    return OpenAIChatCompletionsModel(model="gpt-test", openai_client=client)


_effect = effect


INSTRUCTIONS = "You help with support tickets. Never send the same email twice."


@read_only
@function_tool
def get_ticket(ticket_id: str) -> dict[str, str]:
    """Look a ticket up."""
    return {"ticket_id": ticket_id, "status": "open"}


def _send_email(to: str, subject: str) -> dict[str, str]:
    """Send an email."""
    _effect(f"send_email {to} {subject}")
    return {"sent": to}


send_email = function_tool(_send_email, name_override="send_email")
send_email_approved = function_tool(_send_email, name_override="send_email", needs_approval=True)

agent = Agent(
    name="support", instructions=INSTRUCTIONS, model=_model(), tools=[get_ticket, send_email]
)
approval_agent = agent.clone(name="approvals", tools=[get_ticket, send_email_approved])
