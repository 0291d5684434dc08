"""The LLM decider against a real local HTTP server that replies with scripted JSON."""

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import json
import threading
import time

import pytest

from robotmem_ros.engine.decision import (
    Candidate, CREATE, DELETE, Existing, LLMDecider, MERGE, NONE, SKIP,
)
from robotmem_ros.engine.decision.llm import chat_url

CAND = Candidate('grip force for ceramic cups is 14N after the gripper pad change',
                 'observation', {}, 2000.0)
# Older values of the same attribute (the guard rails let the model's MERGE / DELETE of them
# through), and one memory (#14) that already says what the candidate says.
PEERS = [Existing(10 + i, f'grip force for ceramic cups is {8 + i}N', 'observation', {}, 1000.0,
                  0.9 - i / 10) for i in range(6)]
PEERS[4] = Existing(14, 'after the gripper pad change, grip force for ceramic cups is 14N',
                    'observation', {}, 1000.0, 0.5)


class Script:
    """What the server answers next and what it was asked."""

    def __init__(self):
        self.replies = []
        self.requests = []


class Handler(BaseHTTPRequestHandler):

    def do_POST(self):
        script = self.server.script
        body = self.rfile.read(int(self.headers['Content-Length']))
        script.requests.append((self.path, json.loads(body)))
        status, payload, delay = script.replies.pop(0)
        time.sleep(delay)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    httpd.daemon_threads = True
    httpd.script = Script()
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def chat(content):
    return {'choices': [{'message': {'role': 'assistant', 'content': content}}]}


def ask(server, content, status=200, delay=0.0, timeout=5.0, peers=PEERS):
    payload = chat(content if isinstance(content, str) else json.dumps(content))
    server.script.replies.append((status, payload, delay))
    url = f'http://127.0.0.1:{server.server_port}'
    return LLMDecider(url, 'test-model', timeout).decide(CAND, peers)


def kinds(outcome):
    return [(a.kind, a.target_id) for a in outcome.actions]


def test_well_formed_reply_by_index(server):
    out = ask(server, {'decision': 'create', 'reason': 'pad change raised the force',
                       'list': [{'index': 1, 'decide': 'delete'}]})
    assert out.decision == CREATE and kinds(out) == [(DELETE, 10)]
    assert out.decider == 'llm' and out.reason == 'pad change raised the force'


def test_request_is_an_openai_chat_with_the_top_five(server):
    ask(server, {'decision': 'skip'})
    path, body = server.script.requests[0]
    assert path == '/v1/chat/completions'
    assert body['model'] == 'test-model' and body['temperature'] == 0
    prompt = body['messages'][-1]['content']
    assert CAND.text in prompt
    assert all(f'id={p.id} ' in prompt for p in PEERS[:5]) and 'id=15 ' not in prompt
    assert 'facet=' in prompt


def test_reference_by_id_and_merged_text(server):
    out = ask(server, {'decision': 'none', 'list': [
        {'id': 12, 'decide': 'merge', 'merged_text': 'fact 2, now with 14N'}]})
    assert out.decision == NONE and kinds(out) == [(MERGE, 12)]
    assert out.actions[0].merged_text == 'fact 2, now with 14N'
    assert out.actions[0].before == PEERS[2].text


def test_merge_without_text_is_merged_by_the_rules(server):
    out = ask(server, {'decision': 'none', 'list': [{'index': '2', 'decide': 'MERGE'}]})
    assert kinds(out) == [(MERGE, 11)]
    assert out.actions[0].merged_text == CAND.text  # the new value replaces the old one


def test_zero_index_is_read_as_the_first(server):
    out = ask(server, {'decision': 'create', 'list': [{'index': 0, 'decide': 'delete'}]})
    assert kinds(out) == [(DELETE, 10)]


def test_fenced_json_is_accepted(server):
    out = ask(server, '```json\n{"decision": "skip", "reason": "known"}\n```')
    assert out.decision == SKIP


@pytest.mark.parametrize('content', [
    'I think you should create it.',
    '{"decision": "create", "list": [',
    '["create"]',
    '{"decision": 3}',
    '{"decision": "none", "list": {"index": 1}}',
    '{"decision": "none", "list": ["merge 1"]}',
    'Sure! {"decision": "skip"}',
])
def test_malformed_reply_falls_back_to_create(server, content):
    out = ask(server, content)
    assert out.decision == CREATE and out.actions == ()
    assert out.reason.startswith('decider failed')


def test_reply_that_is_not_a_chat_completion_falls_back(server):
    server.script.replies.append((200, {'error': 'model not loaded'}, 0.0))
    url = f'http://127.0.0.1:{server.server_port}/v1'
    out = LLMDecider(url, 'm', 5.0).decide(CAND, PEERS)
    assert out.decision == CREATE and 'not a chat completion' in out.reason


def test_http_error_falls_back_to_create(server):
    out = ask(server, {'decision': 'skip'}, status=500)
    assert out.decision == CREATE and 'decider failed' in out.reason


def test_slow_server_times_out_to_create(server):
    out = ask(server, {'decision': 'skip'}, delay=1.5, timeout=0.3)
    assert out.decision == CREATE and 'decider failed' in out.reason


def test_unreachable_server_falls_back_to_create():
    out = LLMDecider('http://127.0.0.1:9', 'm', 0.5).decide(CAND, PEERS)
    assert out.decision == CREATE and 'decider failed' in out.reason


def test_conflicting_actions_are_dropped(server):
    out = ask(server, {'decision': 'none', 'list': [
        {'index': 1, 'decide': 'merge', 'merged_text': 'x'},
        {'index': 1, 'decide': 'delete'},
        {'index': 3, 'decide': 'delete'}]})
    assert out.decision == NONE and kinds(out) == [(DELETE, 12)]
    assert any('conflicting' in n for n in out.notes)


def test_model_rules_are_normalized(server):
    out = ask(server, {'decision': 'skip', 'list': [{'index': 1, 'decide': 'delete'}]})
    assert out.decision == SKIP and out.actions == ()
    out = ask(server, {'decision': 'create', 'list': [
        {'index': 1, 'decide': 'merge', 'merged_text': 'x'}, {'index': 2, 'decide': 'delete'}]})
    assert out.decision == NONE and kinds(out) == [(MERGE, 10), (DELETE, 11)]
    out = ask(server, {'decision': 'perhaps', 'list': [{'index': 9, 'decide': 'delete'}]})
    assert out.decision == CREATE and out.actions == ()


def test_legacy_merge_decision(server):
    out = ask(server, {'decision': 'merge', 'reason': 'old prompt format'})
    assert out.decision == NONE and kinds(out) == [(MERGE, 10)]


def test_history_category_prompt_forbids_merge_and_merge_becomes_skip(server):
    # Worded without an event verb ("failed" makes either text a record, never rewritten
    # whatever its category): the category alone forbids the merge here.
    cand = Candidate('grasp of cup_3 slipped at 14:02 because the pad was wet', 'event')
    peers = [Existing(7, 'grasp of cup_3 slipped at 14:02', 'event', {}, 1.0, 0.9)]
    server.script.replies.append((200, chat(json.dumps(
        {'decision': 'none', 'list': [{'index': 1, 'decide': 'merge'}]})), 0.0))
    out = LLMDecider(f'http://127.0.0.1:{server.server_port}', 'm', 5.0).decide(cand, peers)
    # MERGE -> SKIP, then the guard keeps the candidate: #7 does not say why it failed.
    assert out.decision == CREATE and any('MERGE -> SKIP' in n for n in out.notes)
    assert 'never "merge"' in server.script.requests[0][1]['messages'][-1]['content']


@pytest.mark.parametrize('url,expected', [
    ('http://h:8080', 'http://h:8080/v1/chat/completions'),
    ('http://h:8080/v1/', 'http://h:8080/v1/chat/completions'),
    ('http://h:11434/v1/chat/completions', 'http://h:11434/v1/chat/completions'),
])
def test_chat_url(url, expected):
    assert chat_url(url) == expected
