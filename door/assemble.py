"""A non-streaming chat or completion request, streamed from llama-server and put back together in the
door as llama-server's own non-streaming answer, so that a client going away cancels it at once.

Why: llama-server b11434 cancels a task when its HTTP connection closes, but the non-streaming
handler looks only when its wait for a result times out (``server_response_reader::next`` checks
``should_stop`` after ``recv_with_timeout`` returns nothing for ``HTTP_POLLING_SECONDS`` = 1 s,
tools/server/server-queue.cpp), and that wait is a condition variable notified by every result of
every task (``server_response::send``): a concurrent stream's tokens, or any ``/metrics`` or
``/slots`` read (a METRICS task; the VM's agents poll ``/metrics``), restart it, so a dropped
request can hold its slot to the end. A stream is checked at every token
(``handle_completions_impl``'s streaming loop) and its write fails when the peer has gone. So the
door asks for a stream (``"stream": true`` with ``stream_options.include_usage``, which adds
``usage`` and ``timings`` to the last chunk) and assembles, field by field, what llama-server's
``to_json_oaicompat_chat`` / ``to_json_oaicompat`` answer would have been:
``choices[].message`` (``role``, ``content``, ``reasoning_content`` when there is some) or
``choices[].text``, ``finish_reason``, ``created``, ``model``, ``system_fingerprint``, ``object``
(``chat.completion`` / ``text_completion``), ``usage``, ``id`` and ``timings``
(tests/door/test_door_cancel.py compares it with a direct answer for the same seed).

Only where that is the whole of the answer: the OpenAI chat and completions routes, one choice, no
``tools`` (tool-call deltas), no ``logprobs``; other requests go upstream as they came.
"""

from __future__ import annotations

import json
from typing import Any

CHAT = frozenset({"/v1/chat/completions", "/chat/completions"})
COMPLETIONS = frozenset({"/v1/completions"})
# Request fields whose answer carries more than the deltas assembled here.
_NOT_ASSEMBLED = ("tools", "functions", "logprobs", "top_logprobs", "n_probs")


def streamed_body(path: str, body: bytes) -> bytes | None:
    """The request as a stream, when its answer can be assembled; else None."""
    if path not in CHAT and path not in COMPLETIONS:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("stream") not in (None, False):
        return None
    if any(doc.get(field) not in (None, False, []) for field in _NOT_ASSEMBLED):
        return None
    if doc.get("n") not in (None, 1):
        return None
    doc["stream"] = True
    doc["stream_options"] = {"include_usage": True}
    return json.dumps(doc).encode()


class Assembler:
    def __init__(self, path: str) -> None:
        self.chat = path in CHAT
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.finish_reason: str | None = None
        self.head: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> None:
        if "error" in event:
            self.error = event
            return
        for field in ("created", "model", "system_fingerprint", "id"):
            if field in event:
                self.head[field] = event[field]
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        for choice in event.get("choices") or []:
            if self.chat:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    self.content.append(delta["content"])
                if delta.get("reasoning_content"):
                    self.reasoning.append(delta["reasoning_content"])
            elif choice.get("text"):
                self.content.append(choice["text"])
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def answer(self) -> tuple[int, dict[str, Any]]:
        """(status, body) as llama-server would have answered the non-streaming request."""
        if self.error is not None:
            error = self.error.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            return (code if isinstance(code, int) and 400 <= code < 600 else 500), self.error
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
            if self.reasoning:
                message["reasoning_content"] = "".join(self.reasoning)
            choice: dict[str, Any] = {"finish_reason": self.finish_reason, "index": 0, "message": message}
        else:
            choice = {"text": "".join(self.content), "index": 0, "logprobs": None}
            choice["finish_reason"] = self.finish_reason
        body: dict[str, Any] = {"choices": [choice]}
        for field in ("created", "model", "system_fingerprint"):
            if field in self.head:
                body[field] = self.head[field]
        body["object"] = "chat.completion" if self.chat else "text_completion"
        if self.usage is not None:
            body["usage"] = self.usage
        if "id" in self.head:
            body["id"] = self.head["id"]
        if self.timings is not None:
            body["timings"] = self.timings
        return 200, body
