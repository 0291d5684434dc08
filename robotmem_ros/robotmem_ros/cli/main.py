"""
``robotmem``: inspect and maintain a robot's memory file without ROS.

Works on the SQLite file directly and is safe while the node runs: reads use WAL readers and
writes go through the engine's one writer path, waiting on ``busy_timeout`` for the node.
Commands that only read or repair never load the embedding model. Exit codes: 0 ok, 1 error
(one line on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import pathlib
import sys
from typing import Any, Callable, Iterator, Sequence

from robotmem_ros.cli import fleet as fleet_cli
from robotmem_ros.config import MemoryConfig
from robotmem_ros.errors import NotFoundError, RobotMemError

# Commands that must not load the model (no vectors needed, and they must start fast).
NO_MODEL = frozenset({'stats', 'sessions', 'episode', 'history', 'doctor', 'dedup', 'export',
                      'plot', 'fleet'})
# Commands that may create the database file; every other one needs an existing store.
CREATES = frozenset({'learn', 'import'})


class UsageError(Exception):
    """A command line the parser accepted but that cannot run (exit code 2)."""


# --- parser ----------------------------------------------------------------------------------

def _common(parser: argparse.ArgumentParser, default: Any) -> None:
    """Options accepted before or after the subcommand (``default`` = SUPPRESS after)."""
    def dflt(value: Any) -> Any:
        return value if default is None else default
    parser.add_argument('--db', default=dflt(''), help='memory file (default: '
                        '$ROBOTMEM_HOME/memory.db, else ~/.robotmem/memory.db)')
    parser.add_argument('--json', action='store_true', default=dflt(False),
                        help='print machine-readable JSON instead of tables')
    parser.add_argument('--embed-backend', choices=('onnx', 'none'), default=dflt('onnx'),
                        help='"none" skips loading the model (BM25-only recall)')
    parser.add_argument('--embed-model', default=dflt(''), help='bundled model name')
    parser.add_argument('--model-dir', default=dflt(''), help='directory of a user model')


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of every subcommand."""
    top = argparse.ArgumentParser(prog='robotmem', description=__doc__.strip().splitlines()[0])
    _common(top, None)
    common = argparse.ArgumentParser(add_help=False)
    _common(common, argparse.SUPPRESS)
    sub = top.add_subparsers(dest='command', required=True, metavar='COMMAND')

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=help_text, description=help_text)

    add('stats', 'counts, sizes, model and confidence distribution')
    p = add('recall', 'search memories like the Recall service ("*" lists in time order)')
    p.add_argument('query')
    p.add_argument('--n', type=int, default=None, help='results (default: default_n)')
    p.add_argument('--session', default='', help='only this session')
    p.add_argument('--filter', default='', help='context filter JSON')
    p.add_argument('--spatial', default='', help='spatial sort JSON')
    p.add_argument('--min-confidence', type=float, default=None,
                   help='confidence floor (default: default_min_confidence)')
    p.add_argument('--collection', default='')
    p = add('learn', 'store a fact like the Learn service (dedup applies)')
    p.add_argument('text')
    p.add_argument('--context', default='', help='context JSON')
    p.add_argument('--collection', default='')
    p.add_argument('--session', default='')
    p = add('sessions', 'list sessions, most recent first')
    p.add_argument('--collection', default='', help='only this collection (default: all)')
    p.add_argument('--limit', type=int, default=50)
    p = add('episode', 'the timeline of one session')
    p.add_argument('session_id')
    p = add('dedup', 'supersede exact duplicate facts (keeps highest confidence, then newest)')
    p.add_argument('--dry-run', action='store_true', help='only show what would change')
    p.add_argument('--collection', default='')
    p = add('reindex', 're-embed every active memory with the current model (resumable)')
    p.add_argument('--batch-size', type=int, default=64)
    p = add('export', 'write sessions and memories to a JSONL file')
    p.add_argument('file')
    p.add_argument('--collection', default='', help='only this collection (default: all)')
    p.add_argument('--include-forgotten', action='store_true')
    p = add('import', 'import a JSONL export (exact duplicates are skipped)')
    p.add_argument('file')
    p.add_argument('--collection', default='', help='import everything into this collection')
    p = add('doctor', 'integrity, FTS/vector consistency and orphan rows')
    p.add_argument('--repair', action='store_true', help='fix what was found')
    p = add('history', 'the audit trail of one memory')
    p.add_argument('memory_id', type=int)
    plot = add('plot', 'PNG plots').add_subparsers(dest='plot', required=True, metavar='PLOT')
    p = plot.add_parser('episode', parents=[common], help='timeline of one session')
    p.add_argument('session_id')
    p.add_argument('-o', '--output', required=True, help='PNG file to write')
    p = plot.add_parser('map', parents=[common], help='remembered positions, top view')
    p.add_argument('--field', default='spatial.object_position',
                   help='context path of an [x, y, ...] or {"x", "y"} position')
    p.add_argument('--color-by', choices=('category', 'outcome'), default='category')
    p.add_argument('--collection', default='', help='only this collection (default: all)')
    p.add_argument('-o', '--output', required=True, help='PNG file to write')
    fleet_cli.add_parser(add, common)
    return top


# --- running ---------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format='robotmem: %(message)s')
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f'robotmem: usage error: {exc}', file=sys.stderr)
        return 2
    except RobotMemError as exc:
        print(f'robotmem: error: {" ".join(str(exc).split())}', file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print('robotmem: interrupted', file=sys.stderr)
        return 130


def _config(args: argparse.Namespace) -> MemoryConfig:
    changes: dict[str, Any] = {'db_path': args.db,
                               'embed_backend': 'none' if args.command in NO_MODEL
                               else args.embed_backend}
    if args.embed_model:
        changes['embed_model'] = args.embed_model
    if args.model_dir:
        changes['model_dir'] = args.model_dir
    return MemoryConfig().replace(**changes)


def _open(args: argparse.Namespace) -> Any:
    return _open_config(args, _config(args))


def _open_config(args: argparse.Namespace, config: MemoryConfig) -> Any:
    from robotmem_ros.engine import MemoryEngine
    path = config.resolved_db_path()
    if args.command not in CREATES and not path.is_file():
        raise NotFoundError(f'no database at {path} (use --db or set ROBOTMEM_HOME)')
    return MemoryEngine.open(config)


def _with_engine(run: Callable[[Any, argparse.Namespace], Any]
                 ) -> Callable[[argparse.Namespace], int]:
    """Open the engine, run, print the result (JSON or tables), always close."""
    def command(args: argparse.Namespace) -> int:
        engine = _open(args)
        try:
            return run(engine, args) or 0
        finally:
            engine.close()
    return command


def _console(stderr: bool = False) -> Any:
    from rich.console import Console
    return Console(stderr=stderr, highlight=False)


def _emit(args: argparse.Namespace, data: Any, render: Callable[[Any, Any], None]) -> None:
    if args.json:
        print(json.dumps(_plain(data), ensure_ascii=False, indent=2))
    else:
        render(_console(), _plain(data))


def _plain(data: Any) -> Any:
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return dataclasses.asdict(data)
    if isinstance(data, list):
        return [_plain(item) for item in data]
    return data


class _Progress:
    """A rich progress bar on stderr, created on the first report (totals come late)."""

    def __init__(self, args: argparse.Namespace, label: str) -> None:
        from rich.progress import Progress
        self._bar = Progress(console=_console(stderr=True), disable=args.json, transient=False)
        self._label = label
        self._task: Any = None

    def __enter__(self) -> '_Progress':
        self._bar.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bar.stop()

    def __call__(self, done: int, total: int) -> None:
        if self._task is None:
            self._task = self._bar.add_task(self._label, total=total)
        self._bar.update(self._task, completed=done, total=total)


# --- commands --------------------------------------------------------------------------------

@_with_engine
def _stats(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    _emit(args, engine.stats(), tables.show_stats)


def _json_arg(engine: Any, text: str, what: str) -> dict | None:
    """Parse a JSON option the way the node parses a request field (same limits, errors)."""
    from robotmem_ros.node.conversions import json_field
    return json_field(text, what, engine.config)


@_with_engine
def _recall(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    result = engine.recall(args.query, n=args.n, min_confidence=args.min_confidence,
                           session_id=args.session,
                           context_filter=_json_arg(engine, args.filter, 'context_filter'),
                           spatial_sort=_json_arg(engine, args.spatial, 'spatial_sort'),
                           collection=args.collection)
    _emit(args, result, tables.show_recall)


@_with_engine
def _learn(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    result = engine.learn(args.text, context=_json_arg(engine, args.context, 'context'),
                          collection=args.collection, session_id=args.session)
    _emit(args, result, tables.show_learn)


@_with_engine
def _sessions(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    if args.limit < 1:
        raise UsageError('--limit must be at least 1')
    _emit(args, engine.sessions(args.collection, args.limit), tables.show_sessions)


@_with_engine
def _episode(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    _emit(args, engine.episode(args.session_id), tables.show_episode)


@_with_engine
def _dedup(engine: Any, args: argparse.Namespace) -> None:
    """Preview, or apply in calls of at most 200 supersedes (each its own short transaction)."""
    from robotmem_ros.cli import tables
    if args.dry_run:
        ops = engine.cleanup_exact_duplicates(args.collection, dry_run=True)
        _emit(args, {'dry_run': True, 'operations': ops},
              lambda c, d: tables.show_dedup(c, d['operations'], 'would supersede'))
        return
    applied: list[dict] = []
    while True:
        batch = engine.cleanup_exact_duplicates(args.collection, dry_run=False)
        applied.extend(batch)
        if not batch:
            break
    _emit(args, {'dry_run': False, 'operations': applied},
          lambda c, d: tables.show_dedup(c, d['operations'], 'superseded'))


@_with_engine
def _reindex(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    if args.batch_size < 1:
        raise UsageError('--batch-size must be at least 1')
    try:
        with _Progress(args, f're-embedding with {engine.embedding.model_id}') as bar:
            result = engine.reindex(args.batch_size, progress=bar)
    except KeyboardInterrupt:
        print('robotmem: reindex interrupted; run `robotmem reindex` again to continue',
              file=sys.stderr)
        raise
    _emit(args, result, lambda c, d: tables.show_mapping(c, 'reindex', d))


@_with_engine
def _export(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    with _Progress(args, f'exporting to {args.file}') as bar:
        result = engine.export_jsonl(args.file, collection=args.collection,
                                     include_forgotten=args.include_forgotten, progress=bar)
    _emit(args, {'file': args.file, **result}, lambda c, d: tables.show_mapping(c, 'export', d))


@_with_engine
def _import(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    if not pathlib.Path(args.file).is_file():
        raise NotFoundError(f'no such file: {args.file}')
    with _Progress(args, f'importing {args.file}') as bar:
        result = engine.import_jsonl(args.file, collection=args.collection, progress=bar)
    result['embedded'] = sum(_embed_all(engine))

    def render(console: Any, data: dict) -> None:
        tables.show_mapping(console, 'import', {
            'sessions added': data['sessions'], 'memories imported': data['imported'],
            'duplicates skipped': len(data['skipped']), 'embedded now': data['embedded']})
        if data['skipped']:
            console.print(tables.table('skipped (exact duplicates)', ('line', 'existing id'), [
                (s['line'], s['existing_id']) for s in data['skipped']]))
    _emit(args, result, render)


def _embed_all(engine: Any) -> Iterator[int]:
    """Embed what was imported now when a model is loaded (else the node does it lazily)."""
    while done := engine.embed_pending(256):  # 0 at once without a usable model
        yield done


def _doctor(args: argparse.Namespace) -> int:
    """Check the file read-only first: a damaged file is reported, never opened for writing."""
    from robotmem_ros.cli import tables
    from robotmem_ros.engine.doctor import check_file
    path = _config(args).resolved_db_path()
    integrity = check_file(path)
    if integrity != ['ok']:
        report = {'db_path': str(path), 'integrity': integrity, 'problems': {},
                  'warnings': {}, 'repaired': {}, 'ok': False,
                  'notes': ['SQLite integrity check failed: not opened, nothing repaired; '
                            'restore a backup or salvage with `sqlite3 .recover`']}
    else:
        engine = _open(args)
        try:
            report = engine.doctor(repair=args.repair)
        finally:
            engine.close()
    _emit(args, report, tables.show_doctor)
    if not report['ok']:
        hint = '' if args.repair else '; run `robotmem doctor --repair`'
        print(f'robotmem: {path}: problems found{hint}', file=sys.stderr)
        return 1
    return 0


@_with_engine
def _history(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import tables
    _emit(args, engine.history(args.memory_id), tables.show_history)


@_with_engine
def _plot(engine: Any, args: argparse.Namespace) -> None:
    from robotmem_ros.cli import plots
    if args.plot == 'episode':
        count = plots.episode_timeline(engine.episode(args.session_id), args.output)
    else:
        count = plots.position_map(engine.iter_memories(args.collection), args.field,
                                   args.color_by, args.output,
                                   args.collection or 'all collections')
    _emit(args, {'output': args.output, 'points': count},
          lambda c, d: c.print(f"wrote {d['output']} ({d['points']} points)"))


def _fleet(args: argparse.Namespace) -> int:
    # Pulled vectors are stored only when the model that made them is loaded: push and pull
    # open the store with the configured embedder (recall embeds the query with it).
    config = _config(args)
    if args.fleet in ('push', 'pull', 'recall'):
        config = config.replace(embed_backend=args.embed_backend)
    return fleet_cli.run(args, lambda a: _open_config(a, config),
                         lambda data: _emit(args, data, _show_fleet), config)


def _show_fleet(console: Any, data: dict) -> None:
    from robotmem_ros.cli import tables
    tables.show_fleet(console, data)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    'stats': _stats, 'recall': _recall, 'learn': _learn, 'sessions': _sessions,
    'episode': _episode, 'dedup': _dedup, 'reindex': _reindex, 'export': _export,
    'import': _import, 'doctor': _doctor, 'history': _history, 'plot': _plot,
    'fleet': _fleet,
}


if __name__ == '__main__':
    sys.exit(main())
