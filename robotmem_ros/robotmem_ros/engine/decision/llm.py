"""
Optional decider that asks an OpenAI-compatible chat endpoint (llama.cpp, Ollama, vLLM).

Off by default. It uses only urllib, so no client library is needed on the robot. The whole
exchange is bounded by ``timeout`` seconds; an unreachable server, an HTTP error, a slow
reply or an unparseable answer raises, and the base class answers CREATE.
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence
import urllib.parse
import urllib.request

from robotmem_ros.engine.decision.base import Decider
from robotmem_ros.engine.decision.prompt import build_messages
from robotmem_ros.engine.decision.reply import parse_reply, reply_content
from robotmem_ros.engine.decision.types import Candidate, Existing, Proposal

CHAT_PATH = '/chat/completions'
MAX_REPLY_BYTES = 1 << 20
_CHUNK = 1 << 14


def chat_url(url: str) -> str:
    """Accept a base URL ('http://host:8080', '.../v1') or the full completions URL."""
    url = url.rstrip('/')
    path = urllib.parse.urlsplit(url).path
    if path.endswith(CHAT_PATH):
        return url
    if path.endswith('/v1'):
        return url + CHAT_PATH
    return url + '/v1' + CHAT_PATH


def post_json(url: str, payload: dict[str, Any], timeout: float) -> Any:
    """POST ``payload``; raise TimeoutError when the reply is not complete within timeout."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, data=json.dumps(payload).encode('utf-8'),
                                     headers={'Content-Type': 'application/json'},
                                     method='POST')
    body = bytearray()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        while chunk := response.read(_CHUNK):
            body += chunk
            if time.monotonic() > deadline:
                raise TimeoutError(f'LLM reply took longer than {timeout} s')
            if len(body) > MAX_REPLY_BYTES:
                raise ValueError('LLM reply larger than 1 MiB')
    return json.loads(body.decode('utf-8'))


class LLMDecider(Decider):
    """Ask a chat model; the normalization rules still apply to whatever it says."""

    name = 'llm'

    def __init__(self, url: str, model: str, timeout: float) -> None:
        self.url = chat_url(url)
        self.model = model
        self.timeout = timeout

    def propose(self, candidate: Candidate, peers: Sequence[Existing]) -> Proposal:
        """One chat completion at temperature 0, answered as a JSON object."""
        payload = {
            'model': self.model,
            'messages': build_messages(candidate, peers),
            'temperature': 0,
            'response_format': {'type': 'json_object'},
        }
        response = post_json(self.url, payload, self.timeout)
        return parse_reply(reply_content(response), peers)
