"""Tokens of the one tokenizer behind FTS, the text index and the Jaccard layer (engine/text)."""

import subprocess
import sys

from robotmem_ros.engine import text as textmod


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
