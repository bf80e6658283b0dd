"""An OpenAI Agents SDK agent, written as the SDK's docs write one, that dres runs durably
(docs/loops.md). From this directory, with any OpenAI-compatible server:

    pip install 'dres[openai-agents]'
    PYTHONPATH=$PWD OPENAI_API_KEY=sk-... DRES_LOOP=openai_agents:openai_agents_agent:agent dres up

(``OPENAI_BASE_URL`` for another server, ``OPENAI_MODEL`` for another model.) Every turn the page
starts runs this agent: its model calls are recorded and streamed, and each tool call goes through
dres — closing a ticket is recorded before it runs and never runs twice for the same input, even
across a crash or a time limit.
"""

from __future__ import annotations

import os

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

from worker.tools import read_only

#: the support desk's tickets (an example's: each worker process has its own copy)
TICKETS = {
    "T-7": {"subject": "cannot log in", "status": "open"},
    "T-8": {"subject": "invoice missing", "status": "open"},
}


@read_only  # a read: dres may run it again on a resume (before or after the SDK's decorator)
@function_tool
def get_ticket(ticket_id: str) -> dict[str, str]:
    """A ticket's subject and status."""
    return TICKETS.get(ticket_id, {"error": f"no ticket {ticket_id}"})


@function_tool  # a write: needs_approval=True would make it wait for a person on dres's page
def close_ticket(ticket_id: str, resolution: str) -> dict[str, str]:
    """Close a ticket with a short resolution for the customer."""
    ticket = TICKETS.setdefault(ticket_id, {"subject": "", "status": "open"})
    ticket.update(status="closed", resolution=resolution)
    return {"ticket_id": ticket_id, "status": "closed"}


agent = Agent(
    name="support",
    instructions=(
        "You are a support agent. Read a ticket before you close it, and say in one line what "
        "you did."
    ),
    # AsyncOpenAI reads OPENAI_API_KEY and OPENAI_BASE_URL
    model=OpenAIChatCompletionsModel(
        model=os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"), openai_client=AsyncOpenAI()
    ),
    tools=[get_ticket, close_ticket],
)
