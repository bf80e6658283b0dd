"""The example's tool that the page runs (README): the dres worker loads it with
``DRES_TOOLS=worker.demo_tools,chat_tools`` and this directory on ``PYTHONPATH``. A call waits,
held by no worker, until the page answers it with ``addToolOutput``."""

from worker.tools import tool


@tool(client=True)
def ask_user(question: str) -> dict[str, str]:
    """Ask the person in the chat a question; returns their answer as {"answer": ...}."""
    raise NotImplementedError("the page answers it: a client tool's body is never called")
