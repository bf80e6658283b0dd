"""A client's outputs of its tools' calls as the chat protocols carry them (docs/chat.md): the AI
SDK's tool parts (``addToolOutput``) and AG-UI's trailing ``tool`` messages."""

from __future__ import annotations

from worker.edges.http import agui
from worker.edges.http.answers import Output, outputs_of


def test_an_ai_sdk_output_is_its_value_and_an_error_is_its_error_text_as_it_is() -> None:
    message = {
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-ask", "toolCallId": "c1", "state": "output-available", "output": 1},
            {"type": "tool-ask", "toolCallId": "c2", "state": "output-error", "errorText": "no"},
            {"type": "tool-ask", "toolCallId": "c3", "state": "input-available", "input": {}},
        ],
    }
    assert outputs_of(message, "messages[1]") == [Output("c1", 1), Output("c2", "no", True)]


def test_agui_tool_messages_ending_the_input_are_outputs_an_error_its_text() -> None:
    messages = [
        {"id": "t0", "role": "tool", "toolCallId": "c0", "content": "before the user's"},
        {"id": "u1", "role": "user", "content": "pick"},
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": '{"colour": "red"}'},
        {"id": "t2", "role": "tool", "toolCallId": "c2", "content": "red"},
        {"id": "t3", "role": "tool", "toolCallId": "c3", "content": "", "error": "closed"},
    ]
    assert agui.outputs_of(messages) == [
        Output("c1", {"colour": "red"}),
        Output("c2", "red"),
        Output("c3", "closed", True),
    ]
