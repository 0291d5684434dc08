"""Tokens of the one tokenizer behind FTS, the text index and the Jaccard layer (engine/text)."""

import collections
import subprocess
import sys

from robotmem_ros.engine import schema
from robotmem_ros.engine import text as textmod

try:
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover
    import sqlite3  # type: ignore[no-redef]


def test_chinese_runs_are_segmented_into_dictionary_words():
    # What jieba 0.42.1 and rjieba 0.2.2 (the segmenters before engine/segmenter.py) gave for
    # these runs: stored FTS rows and the text index hold these tokens, so a change here would
    # need a reindex.
    assert textmod.tokenize('机器人抓取红色杯子时使用十二牛顿的力') == (
        '机器人', '抓取', '红色', '杯子', '时', '使用', '十二', '牛顿', '的', '力')
    assert textmod.tokenize('打开抽屉的最上层') == ('打开', '抽屉', '的', '最上层')


def test_mixed_text_keeps_identifiers_numbers_and_chinese_words():
    assert textmod.tokenize('grip_force=12.5N 适合陶瓷杯子') == (
        'grip', 'force', '12.5n', '适合', '陶瓷', '杯子')
    assert textmod.tokenize('在水槽旁边拿钥匙时要慢一点，速度不超过0.25米每秒') == (
        '在', '水槽', '旁边', '拿', '钥匙', '时要', '慢', '一点', '速度', '不', '超过', '0.25',
        '米', '每秒')


def test_segmenter_loads_at_the_first_chinese_text_only():
    code = ('from robotmem_ros.engine import segmenter, text; '
            'text.tokenize("grip the red cup with 12.5N"); a = bool(segmenter._SHARED); '
            'text.tokenize("抓取红色杯子"); print(a, bool(segmenter._SHARED))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ['False', 'True']


def test_a_body_s_words_are_the_tokens_fts5_indexes_for_every_character():
    # The postings of a small store, the term counts and the Jaccard layer split FTS bodies at
    # spaces and take the words for FTS5's own tokens: a character that FTS5's tokenizer
    # splits at or folds, kept inside a token here, would make them disagree with FTS5.
    ddl = next(statement for migration in schema.MIGRATIONS for statement in migration
               if 'CREATE VIRTUAL TABLE memories_fts' in statement)
    conn = sqlite3.connect(':memory:')
    conn.execute(ddl)
    conn.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, 'memories_fts', "
                 "'instance')")
    bodies = {}
    for point in range(0x20, 0x30000):
        if not 0xD800 <= point < 0xE000:
            bodies[point] = textmod.fts_index_text(f'x{chr(point)}q 1{chr(point)}')
    conn.executemany('INSERT INTO memories_fts(rowid, body) VALUES (?, ?)', bodies.items())
    indexed = collections.defaultdict(list)
    for term, row in conn.execute('SELECT term, doc FROM temp.terms'):
        indexed[row].append(term)
    assert [hex(point) for point, body in bodies.items()
            if sorted(body.split()) != sorted(indexed[point])] == []
