"""A pydantic-ai agent, written as pydantic-ai's docs write one, that dres runs durably
(docs/loops.md). From this directory, with any OpenAI-compatible server:

    pip install 'dres[pydantic-ai]'
    PYTHONPATH=$PWD OPENAI_API_KEY=sk-... DRES_LOOP=pydantic_ai:pydantic_ai_agent:agent dres up

(``OPENAI_BASE_URL`` for another server, ``OPENAI_MODEL`` for another model.) Every turn the page
starts runs this agent: its model calls are recorded and streamed, and each tool call goes through
dres — a refund is recorded before it runs and never runs twice for the same input, even across a
crash or a time limit; it waits for a person's approval first (``requires_approval``).
"""

from __future__ import annotations

import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel

# the OpenAI provider reads OPENAI_API_KEY and OPENAI_BASE_URL
model = OpenAIChatModel(os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"))

agent = Agent(
    model,
    name="orders",
    instructions=(
        "You help customers with their orders. Look an order up before you refund it, and "
        "never refund more than its total."
    ),
)

#: the shop's orders (an example's: each worker process has its own copy)
ORDERS = {
    "A-1001": {"status": "delivered", "total": 42.0},
    "A-1002": {"status": "lost in transit", "total": 18.5},
}
REFUNDS: list[dict[str, object]] = []


@agent.tool_plain(metadata={"read_only": True})  # a read: dres may run it again on a resume
def lookup_order(order_id: str) -> dict[str, object]:
    """An order's status and total."""
    return ORDERS.get(order_id, {"error": f"no order {order_id}"})


@agent.tool_plain(requires_approval=True)  # a write: a person approves it on dres's page
def refund_order(order_id: str, amount: float, reason: str) -> dict[str, object]:
    """Refund part or all of an order."""
    refund = {"refund_id": f"R-{len(REFUNDS) + 1}", "order_id": order_id, "amount": amount}
    REFUNDS.append({**refund, "reason": reason})
    return refund
