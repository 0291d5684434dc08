"""Rich renderings of the CLI's results: what a field engineer reads in a terminal."""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table

PREVIEW_CHARS = 70


def when(epoch: float | None) -> str:
    """Local wall-clock time of an epoch timestamp ('' for none)."""
    if epoch is None:
        return ''
    try:
        return dt.datetime.fromtimestamp(epoch).strftime('%Y-%m-%d %H:%M:%S')
    except (OverflowError, OSError, ValueError):  # a stored time no calendar holds
        return f'{epoch:g}'


def short(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Shorten ``text`` to one line of at most ``limit`` characters."""
    line = ' '.join(str(text).split())
    return line if len(line) <= limit else line[:limit - 1] + '…'


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """Build a table whose cells are plain strings (rich markup in stored text is escaped)."""
    out = Table(title=title, title_justify='left', show_lines=False)
    for name in columns:
        out.add_column(name, overflow='fold')
    for row in rows:
        out.add_row(*('' if v is None else str(v) for v in row))
    return out


def counts(title: str, mapping: dict[str, int]) -> Table:
    """Two-column table of a count per key."""
    return table(title, (title.split(' ')[-1], 'count'), mapping.items())


def show_stats(console: Console, stats: dict[str, Any]) -> None:
    """Render ``MemoryEngine.stats()``."""
    size_mb = stats['db_bytes'] / 1e6
    console.print(table('store', ('field', 'value'), [
        ('db', stats['db_path']), ('size', f'{size_mb:.2f} MB'),
        ('schema', stats['schema_version']),
        ('model', f"{stats['model_id'] or '-'} (dim {stats['embed_dim'] or '-'})"),
        ('memories', stats['memories_total']),
        ('sessions', f"{stats['sessions']['total']} ({stats['sessions']['open']} open)"),
        ('oldest', when(stats['oldest'])), ('newest', when(stats['newest'])),
        ('pending embeddings', stats['pending_embeddings']),
        ('below recall threshold', stats['below_recall_threshold']),
        ('reindex in progress', 'yes' if stats['reindex_in_progress'] else 'no'),
        ('text index', _text_index(stats['text_index']))]))
    for key in ('by_status', 'by_collection', 'by_type', 'by_kind', 'by_category'):
        console.print(counts(key.replace('_', ' '), stats[key]))
    peak = max([b['count'] for b in stats['confidence_histogram']] + [1])
    console.print(table('confidence of active memories', ('range', 'count', ''), [
        (f"{b['lo']:.1f}-{b['hi']:.1f}", b['count'], '█' * round(30 * b['count'] / peak))
        for b in stats['confidence_histogram']]))
    console.print(table('stored per day (UTC)', ('day', 'facts', 'perceptions'), [
        (d['day'], d['facts'], d['perceptions']) for d in stats['growth_per_day']]))


def _text_index(info: dict[str, Any]) -> str:
    """Say what this process's text index holds (engine/text_index.py)."""
    if info['text_index_error']:
        return f"error: {info['text_index_error']}"
    if info['text_index_building']:
        return 'building'
    if info['text_index_docs']:
        return f"{info['text_index_docs']} documents, change {info['text_index_seq']}"
    return 'not loaded (FTS5 ranks)'


def memory_rows(records: Iterable[dict[str, Any]], *, score: bool = False) -> Table:
    """One line per memory: id, time, type, labels, confidence, text."""
    columns = ['id', 'created', 'type', 'category', 'conf', 'status', 'content']
    if score:
        columns.insert(1, 'score')
    rows = []
    for r in records:
        label = r['perception_type'] if r['type'] == 'perception' else r['category']
        row = [r['id'], when(r['created_at']), r['type'], label, f"{r['confidence']:.2f}",
               r['status'], short(r['content'])]
        if score:
            row.insert(1, f"{r['rrf_score']:.3f}")
        rows.append(row)
    return table('memories', columns, rows)


def show_recall(console: Console, result: dict[str, Any]) -> None:
    """Render a RecallResult."""
    console.print(memory_rows(result['memories'], score=result['mode'] != 'all'))
    console.print(f"{result['total']} result(s), mode {result['mode']}, "
                  f"{result['query_ms']:.1f} ms", highlight=False)


def show_learn(console: Console, result: dict[str, Any]) -> None:
    """Render a LearnResult."""
    line = f"{result['status']}: memory {result['memory_id']}"
    if result['method']:
        line += f" ({result['method']}, similarity {result['similarity']:.2f})"
    console.print(line, highlight=False)
    if result['auto_inferred']:
        console.print(table('inferred', ('label', 'value'), result['auto_inferred'].items()))
    if result['similar_facts']:
        console.print(memory_rows(result['similar_facts']))


def show_sessions(console: Console, sessions: list[dict[str, Any]]) -> None:
    """Render the session list."""
    console.print(table('sessions', (
        'session', 'collection', 'started', 'ended', 'outcome', 'facts', 'perceptions'), [
        (s['id'], s['collection'], when(s['started_at']), when(s['ended_at']),
         '' if s['outcome_score'] is None else f"{s['outcome_score']:.2f}", s['facts'],
         s['perceptions']) for s in sessions]))


def show_episode(console: Console, episode: dict[str, Any]) -> None:
    """Render a session header and its timeline."""
    s = episode['session']
    start = s['started_at']
    console.print(table('session', ('field', 'value'), [
        ('id', s['id']), ('collection', s['collection']), ('started', when(start)),
        ('ended', when(s['ended_at'])), ('outcome', s['outcome_score']),
        ('context', s['context'])]))
    console.print(table('timeline', ('t+s', 'id', 'type', 'label', 'status', 'content'), [
        (f"{m['created_at'] - start:+.2f}", m['id'], m['type'],
         m['perception_type'] if m['type'] == 'perception' else m['category'], m['status'],
         short(m['content'])) for m in episode['memories']]))


def show_dedup(console: Console, ops: list[dict[str, Any]], title: str) -> None:
    """Render a duplicate-cleanup plan or what it applied."""
    console.print(table(title, ('superseded id', 'kept id', 'text'), [
        (op['old_id'], op['keep_id'], short(op['preview'])) for op in ops]))


def show_doctor(console: Console, report: dict[str, Any]) -> None:
    """Render a doctor report: each check with what was found and repaired."""
    console.print(f"integrity: {'; '.join(report['integrity'])}", highlight=False)
    repaired = report['repaired']
    console.print(table('consistency', ('check', 'found', 'repaired'), [
        (name, n, repaired.get(name, '')) for name, n in report['problems'].items()]))
    if report['warnings']:
        console.print(counts('warnings', report['warnings']))
    for note in report['notes']:
        console.print(f'note: {note}', highlight=False)
    console.print('OK' if report['ok'] else 'PROBLEMS FOUND', highlight=False)


def show_history(console: Console, entries: list[dict[str, Any]]) -> None:
    """Render the audit trail of one memory."""
    console.print(table('history', ('when', 'event', 'actor', 'reason', 'old', 'new',
                                    'details'), [
        (when(e['created_at']), e['event'], e['actor'], e['reason'],
         short(e['old_content'] or '', 40), short(e['new_content'] or '', 40),
         e['details'] or '') for e in entries]))


def show_mapping(console: Console, title: str, mapping: dict[str, Any]) -> None:
    """Render a flat result dict (reindex, export, import counts)."""
    console.print(table(title, ('field', 'value'), mapping.items()))


def show_fleet(console: Console, data: dict[str, Any]) -> None:
    """Render a ``robotmem fleet`` result: hub hits as a table, anything else as key/value."""
    if 'memories' in data:
        rows = [(f"{m['score']:.2f}", m['robot_id'], m['collection'], short(m['content']),
                 '+'.join(m['channels'])) for m in data['memories']]
        console.print(table(f"fleet recall: {data['query']} ({data['mode']})",
                            ('score', 'robot', 'collection', 'content', 'channels'), rows))
        return
    hub_rows = data.get('hub') or []
    console.print(table('fleet', ('field', 'value'),
                        [(k, v) for k, v in data.items() if k != 'hub']))
    if hub_rows:
        console.print(table('hub rows visible to this robot',
                            ('robot', 'collection', 'active', 'rows', 'last seq'),
                            [tuple(r.values()) for r in hub_rows]))
