"""
``robotmem fleet``: operate fleet memory from a shell (docs/fleet.md).

``migrate`` and ``add-robot`` are for the hub's owner; ``status``, ``push`` and ``pull`` act on
this robot's store like one round of the node's sync thread (safe while the node runs: the hub
upserts are idempotent and local writes go through the engine's writer); ``recall`` asks the
hub directly. Connection string from ``--url`` or ``$ROBOTMEM_FLEET_URL``; the password never
on the command line: ``--password-file`` or ``$ROBOTMEM_FLEET_PASSWORD``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable

from robotmem_ros.config import MemoryConfig
from robotmem_ros.errors import ConfigError, StorageError

URL_ENV = 'ROBOTMEM_FLEET_URL'
ROBOT_ENV = 'ROBOTMEM_ROBOT_ID'


def add_parser(add: Callable[[str, str], argparse.ArgumentParser],
               common: argparse.ArgumentParser) -> None:
    """Register ``robotmem fleet ...`` (``add`` makes a top-level subcommand)."""
    fleet = add('fleet', 'fleet memory: hub schema, robots, sync and hub recall')
    sub = fleet.add_subparsers(dest='fleet', required=True, metavar='ACTION')

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.add_argument('--url', default=os.environ.get(URL_ENV, ''),
                       help=f'hub connection string (default ${URL_ENV})')
        p.add_argument('--password-file', default='',
                       help='file with the password (else $ROBOTMEM_FLEET_PASSWORD)')
        return p

    p = action('migrate', 'create or upgrade the hub schema (hub owner)')
    p.add_argument('--dim', type=int, default=384, help='embedding dimension at the hub')
    p = action('add-robot', 'create a robot role and grant it collections (hub owner)')
    p.add_argument('robot_id')
    p.add_argument('--role', default='', help='database role (default: the robot id)')
    p.add_argument('--grant', default='', help='comma-separated collections it may read')
    p.add_argument('--role-password-file', default='',
                   help="file with the new role's password (else set it yourself)")
    for name, text in (('status', 'outbox, watermark and hub reachability of this store'),
                       ('push', "push this store's queued changes now"),
                       ('pull', "pull other robots' changes now")):
        p = action(name, text)
        p.add_argument('--robot-id', default=os.environ.get(ROBOT_ENV, ''),
                       help=f"this robot's id at the hub (default ${ROBOT_ENV})")
        p.add_argument('--collections', default='', help='shared collections, comma-separated '
                       '(default: the default collection)')
        if name == 'push':
            p.add_argument('--full', action='store_true',
                           help='also compare every own fact with the hub (catch-up)')
        if name == 'pull':
            p.add_argument('--from-start', action='store_true',
                           help="pull these collections' whole history again (a grant given "
                                'after they were first pulled)')
    p = action('recall', 'search the hub: full text + vector, fused like local recall')
    p.add_argument('query')
    p.add_argument('--n', type=int, default=5)
    p.add_argument('--collections', default='default', help='comma-separated collections')


def run(args: argparse.Namespace, open_engine: Callable[[argparse.Namespace], Any],
        emit: Callable[..., None], config: MemoryConfig) -> int:
    """Dispatch one fleet action; return the exit code."""
    try:
        from robotmem_ros.fleet import hub
    except ImportError as exc:
        raise ConfigError(f'fleet extra not installed ({exc.name}): '
                          'pip install -r requirements/fleet.txt') from None
    from robotmem_ros.fleet.settings import check_url, read_password
    check_url(args.url)
    password = read_password(args.password_file)
    if args.fleet in ('migrate', 'add-robot', 'recall'):
        conn = hub.connect(args.url, password) if args.fleet == 'recall' else \
            hub.connect_owner(args.url, password)
        try:
            emit(_HUB_ACTIONS[args.fleet](conn, args, config))
        finally:
            conn.close()
        return 0
    engine = open_engine(args)
    try:
        emit(_sync_action(engine, args, config, password))
    finally:
        engine.close()
    return 0


def _migrate(conn: Any, args: argparse.Namespace, config: MemoryConfig) -> dict:
    from robotmem_ros.fleet import hub_schema
    old, new = _hub_call(hub_schema.migrate, conn, args.dim)
    return {'hub_schema_from': old, 'hub_schema_to': new}


def _add_robot(conn: Any, args: argparse.Namespace, config: MemoryConfig) -> dict:
    from robotmem_ros.fleet import hub_schema
    from robotmem_ros.fleet.settings import read_password
    password = read_password(args.role_password_file) if args.role_password_file else None
    grants = [c.strip() for c in args.grant.split(',') if c.strip()]
    _hub_call(hub_schema.add_robot, conn, args.robot_id, args.role or args.robot_id, password,
              grants)
    return {'robot_id': args.robot_id, 'role': args.role or args.robot_id, 'grants': grants}


def _recall(conn: Any, args: argparse.Namespace, config: MemoryConfig) -> dict:
    from robotmem_ros.fleet.recall import fleet_recall
    vector, model = None, ''
    if config.embed_backend != 'none':
        from robotmem_ros.embedding import load_embedder
        embedder = load_embedder(config)
        vector, model = embedder.embed_query(args.query), embedder.model_id
    collections = [c.strip() for c in args.collections.split(',') if c.strip()]
    hits = _hub_call(fleet_recall, conn, args.query, collections, args.n, vector=vector,
                     model=model, rrf_k=config.rrf_k)
    return {'query': args.query, 'mode': 'hybrid' if vector is not None else 'bm25_only',
            'memories': hits}


def _hub_call(func: Callable, *args: Any, **kwargs: Any) -> Any:
    from robotmem_ros.fleet import hub
    try:
        return func(*args, **kwargs)
    except hub.HubError as exc:
        raise hub.wrap(exc) from exc


def _sync_action(engine: Any, args: argparse.Namespace, config: MemoryConfig,
                 password: str | None) -> dict:
    from robotmem_ros.fleet import local_store
    from robotmem_ros.fleet.settings import FleetSettings
    from robotmem_ros.fleet.sync import FleetSync
    settings = FleetSettings.from_config(config.replace(
        fleet_url=args.url, fleet_robot_id=args.robot_id,
        fleet_collections=args.collections, fleet_password_file=args.password_file))
    sync = FleetSync(engine, settings)
    try:
        result: dict[str, Any] = {}
        if args.fleet == 'push':
            if args.full:
                sync.request_catch_up()
            result['pushed'] = sync.push_all()
        elif args.fleet == 'pull':
            result['pulled'] = sync.pull_all(from_start=args.from_start)
        else:
            with engine.db.read() as conn:
                result['watermark'] = {
                    collection: '%d:%d' % position for collection, position
                    in local_store.watermarks(conn, settings.collections).items()}
            try:
                result['hub'] = sync.hub_rows_per_robot()
            except StorageError as exc:
                result['hub_error'] = str(exc)
        result.update(sync.status().to_dict())
        return result
    finally:
        sync.stop()


_HUB_ACTIONS = {'migrate': _migrate, 'add-robot': _add_robot, 'recall': _recall}
