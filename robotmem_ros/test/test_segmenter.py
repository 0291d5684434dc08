"""The Chinese segmenter: jieba's algorithm over a compact table (engine/segmenter.py)."""

import pathlib
import shutil

import pytest

from robotmem_ros.engine import segmenter
from robotmem_ros.errors import SegmenterError


@pytest.fixture
def jieba_data(tmp_path: pathlib.Path) -> pathlib.Path:
    """Make a data folder with jieba's model tables and a dictionary of three words."""
    shutil.copytree(segmenter.data_folder() / 'finalseg', tmp_path / 'finalseg')
    (tmp_path / 'dict.txt').write_text('机器 50 n\n机器人 100 n\n人 10 n\n', encoding='utf-8')
    return tmp_path


def test_the_table_holds_each_word_with_its_count_and_each_prefix_with_zero(jieba_data):
    words = segmenter.Segmenter(jieba_data)._words
    assert len(words.keys) == 4  # 机器, 机器人, 人 and the prefix 机
    assert [words.count(w) for w in ('机器人', '机器', '人', '机', '器')] == [100, 50, 10, 0, None]


def test_the_route_takes_the_dictionary_words_of_highest_summed_frequency(jieba_data):
    seg = segmenter.Segmenter(jieba_data)
    assert seg.cut('机器人') == ['机器人']
    assert seg.cut('机器人人') == ['机器人', '人']


def test_single_characters_outside_the_dictionary_are_cut_by_the_model():
    seg = segmenter.shared()
    assert seg._words.count('杭研') is None  # not a word: the model finds it
    assert seg.cut('他来到了网易杭研大厦') == ['他', '来到', '了', '网易', '杭研', '大厦']


def test_characters_outside_jiebas_han_range_stay_whole():
    # As rjieba cuts them (CJK extension A and the ideographs after U+9FD5).
    assert segmenter.shared().cut('㐀㐁中国') == ['㐀㐁', '中国']
    assert segmenter.shared().cut('中国㐀人民') == ['中国', '㐀', '人民']
    assert segmenter.shared().cut('鿖鿗的') == ['鿖鿗', '的']


@pytest.mark.parametrize('run', ['机器人抓取红色杯子时使用十二牛顿的力', '打开抽屉的最上层',
                                 '小明硕士毕业于中国科学院计算所', '的', '嗯嗯嗯嗯嗯'])
def test_the_words_put_together_give_the_run_back(run):
    words = segmenter.shared().cut(run)
    assert ''.join(words) == run and all(words)


def test_a_missing_data_folder_is_a_clear_error(tmp_path):
    with pytest.raises(SegmenterError, match='cannot read the segmenter data'):
        segmenter.Segmenter(tmp_path)


def test_a_malformed_dictionary_line_is_named(jieba_data):
    (jieba_data / 'dict.txt').write_text('机器 50 n\n机器人\n', encoding='utf-8')
    with pytest.raises(SegmenterError, match='line 2'):
        segmenter.Segmenter(jieba_data)


def test_an_emission_table_in_another_form_is_refused(jieba_data):
    (jieba_data / 'finalseg' / 'prob_emit.py').write_text('P = {}\n', encoding='utf-8')
    with pytest.raises(SegmenterError, match='no emission table'):
        segmenter.Segmenter(jieba_data)


def test_without_jieba_installed_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(segmenter.importlib.util, 'find_spec', lambda name: None)
    with pytest.raises(SegmenterError, match='requirements/runtime.txt'):
        segmenter.data_folder()
