"""
The status reporter when Ctrl-C shuts the context down under a callback that publishes.

The memory node's executor threads finish the callbacks they started after the signal; a
status or diagnostics publish there must not raise (it ended in a future nobody read, and the
node printed "The following exception was never retrieved" on Ctrl-C of ``make run``). The
reporter needs a node of its own context, so the check runs in a child process (one DDS
participant per test process, docs/reliability.md).
"""

import json
import os

from conftest import script_result

RESULT = 'status result: '


def publish_after_shutdown() -> dict:
    """Child: publish once with the context up, then once after it was shut down."""
    import rclpy
    from robotmem_ros.node.perception_ingest import IngestCounters
    from robotmem_ros.node.status import StatusReporter

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(f'status_check_{os.getpid()}', context=context)
    reporter = StatusReporter(node, IngestCounters, '/nonexistent/memory.db', lambda: 100,
                              'cpu')
    outcome = {}
    for phase in ('up', 'shut down'):
        if phase == 'shut down':
            context.shutdown()
        for name, call in (('status', lambda: reporter.publish(force=True)),
                           ('heartbeat', reporter.heartbeat)):
            try:
                call()
                outcome[f'{name}, {phase}'] = 'ok'
            except Exception as exc:  # noqa: B902 - reported to the parent
                outcome[f'{name}, {phase}'] = repr(exc)
    return outcome


def test_publishing_on_a_shut_down_context_is_quiet():
    assert script_result(__file__, RESULT) == {
        'status, up': 'ok', 'heartbeat, up': 'ok',
        'status, shut down': 'ok', 'heartbeat, shut down': 'ok'}


if __name__ == '__main__':
    print(RESULT + json.dumps(publish_after_shutdown()), flush=True)
    os._exit(0)  # the node's teardown is not what this checks
