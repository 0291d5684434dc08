"""
A real conversation through the real node: LoCoMo turns stored as ``Speaker: text``.

Users store a conversation one turn per memory with the speaker in front. Turns are records:
the decision layer must not read ``Caroline:`` as an attribute and supersede one turn with the
next, and the dedup layers must not fold different turns. Default parameters, embedder on,
every turn through the Learn service; the share of learned turns that end up hidden
(superseded, merged, folded by a non-exact dedup layer) must stay <= 1 %.
"""

import json
import pathlib
import sqlite3

from conftest import NodeProcess
import pytest
from robotmem_msgs.srv import Learn

REPO = pathlib.Path(__file__).resolve().parents[2]
TURNS = (REPO / '..' / 'shared' / 'eval' / 'locomo' / 'turns.jsonl').resolve()
CONVERSATION = 'conv-30'  # the shortest of the ten (369 turns)
MAX_HIDDEN_SHARE = 0.01


def _turns():
    with open(TURNS, encoding='utf-8') as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return [f'{r["speaker"]}: {r["text"]}' for r in rows
            if r['sample_id'] == CONVERSATION and r['text'].strip()]


@pytest.mark.skipif(not TURNS.exists(), reason='LoCoMo eval data not present')
def test_locomo_conversation_keeps_its_turns(ros, tmp_path):
    node = NodeProcess(ros, tmp_path / 'memory.db', tmp_path / 'node.log', embed_backend='onnx')
    try:
        node.status()
        turns = _turns()
        statuses = []
        for text in turns:
            response = node.call(Learn, 'learn', insight=text, collection=CONVERSATION)
            assert response.success, response.error
            statuses.append((response.status, response.method))
    finally:
        assert node.stop() == 0, node.log()
    with sqlite3.connect(f'file:{tmp_path / "memory.db"}?mode=ro', uri=True) as conn:
        superseded = conn.execute(
            "SELECT COUNT(*) FROM memories WHERE status != 'active'").fetchone()[0]
    merged = sum(status == 'merged' for status, _ in statuses)
    folded = sum(status == 'duplicate' and method != 'exact' for status, method in statuses)
    hidden = superseded + merged + folded
    assert superseded == 0, 'a conversation turn superseded another'
    assert hidden / len(turns) <= MAX_HIDDEN_SHARE, (superseded, merged, folded, len(turns))
