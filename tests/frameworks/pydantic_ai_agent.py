"""A pydantic-ai agent the tests run on dres
(``DRES_LOOP=pydantic_ai:tests.frameworks.pydantic_ai_agent:agent``), against the fake
OpenAI-compatible server ``OPENAI_BASE_URL`` names (rigs/providers.py). Each effect of a write is
counted in a file (``DRES_TEST_EFFECTS``) so a test sees how many times it ran, whatever process
ran it."""

from __future__ import annotations

import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.frameworks.effects import effect
from worker.tools import read_only


def _model() -> OpenAIChatModel:
    # the openai SDK retries nothing: dres's loop decides what a failed model call does
    from openai import AsyncOpenAI

    client = AsyncOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", "fake-key"),
        max_retries=0,
    )
    return OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))


_effect = effect


INSTRUCTIONS = "You help with support tickets. Never send the same email twice."

agent = Agent(_model(), instructions=INSTRUCTIONS, name="support")


@agent.tool_plain
@read_only
def get_ticket(ticket_id: str) -> dict[str, str]:
    """Look a ticket up."""
    return {"ticket_id": ticket_id, "status": "open"}


@agent.tool_plain
def send_email(to: str, subject: str) -> dict[str, str]:
    """Send an email."""
    _effect(f"send_email {to} {subject}")
    return {"sent": to}


approval_agent = Agent(_model(), instructions=INSTRUCTIONS, name="approvals")


@approval_agent.tool_plain(requires_approval=True)
def refund(order_id: str, amount: int) -> dict[str, object]:
    """Refund an order."""
    _effect(f"refund {order_id} {amount}")
    return {"refunded": order_id, "amount": amount}


@approval_agent.tool_plain(metadata={"read_only": True})
def get_order(order_id: str) -> dict[str, str]:
    """Look an order up."""
    return {"order_id": order_id}


timer_agent = Agent(_model(), instructions=INSTRUCTIONS, name="timers")


@timer_agent.tool_plain
def remind_at(at: float, note: str) -> object:
    """Note a reminder, then wait until ``at`` (seconds since the epoch) before going on."""
    from datetime import UTC, datetime

    from worker.tools import wait_until

    _effect(f"remind_at {note}")
    return wait_until(datetime.fromtimestamp(at, UTC), result={"reminded": note})
