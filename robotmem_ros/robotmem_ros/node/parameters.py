"""
ROS parameters declared from the ``MemoryConfig`` table.

Names, defaults, ranges, choices and read-only flags come from one place (config.py), so a
parameter can never drift from the engine setting it controls. Run-time changes are validated
twice: rclpy checks the declared ranges, and the callback re-checks choices and hands the new
config to the engine, which may still refuse it.
"""

from __future__ import annotations

from typing import Any, Callable

from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
from rclpy.node import Node
from rclpy.parameter import Parameter
from robotmem_ros.config import check_value, MemoryConfig, ParamSpec, spec_of
from robotmem_ros.errors import ConfigError


def descriptor(name: str, spec: ParamSpec, default: Any) -> ParameterDescriptor:
    """Build the descriptor `ros2 param describe` shows for one setting."""
    desc = ParameterDescriptor(name=name, description=spec.description,
                               read_only=spec.read_only)
    if spec.choices:
        desc.additional_constraints = 'one of: ' + ', '.join(spec.choices)
    if isinstance(default, bool) or (spec.min is None and spec.max is None):
        return desc
    if isinstance(default, int):
        desc.integer_range = [IntegerRange(from_value=int(spec.min), to_value=int(spec.max),
                                           step=1)]
    elif isinstance(default, float):
        desc.floating_point_range = [FloatingPointRange(from_value=float(spec.min),
                                                        to_value=float(spec.max), step=0.0)]
    return desc


def declare_config_parameters(node: Node) -> MemoryConfig:
    """
    Declare every setting as a parameter and return the config built from their values.

    Raises ConfigError for an override that is out of range or of the wrong type, so a bad
    launch file stops the node with one clear line instead of running on a default.
    """
    values = {}
    for name, spec, default in MemoryConfig().items():
        try:
            param = node.declare_parameter(name, default, descriptor(name, spec, default))
        except Exception as exc:  # rclpy raises several unrelated types for a bad override
            raise ConfigError(f'parameter {name}: {exc}') from None
        values[name] = param.value
    return MemoryConfig.from_mapping(values)


def make_set_callback(current: Callable[[], MemoryConfig],
                      apply: Callable[[MemoryConfig], None]
                      ) -> Callable[[list[Parameter]], SetParametersResult]:
    """
    Return an on-set-parameters callback.

    ``current`` yields the config in force; ``apply`` installs a validated new one (engine and
    node settings) and raises ConfigError to refuse it. All parameters of one call are applied
    together or not at all. Parameters that are not settings (rclpy's own ``use_sim_time``,
    ``qos_overrides.*``, ...) are left to rclpy, so ``ros2 param set /robotmem use_sim_time``
    and ``ros2 param load`` of the node's own dump work as on any node.
    """
    settings = frozenset(name for name, _, _ in MemoryConfig().items())

    def on_set(params: list[Parameter]) -> SetParametersResult:
        try:
            changes = {}
            for param in params:
                if param.name not in settings:
                    continue
                spec = spec_of(param.name)
                value = param.value
                check_value(param.name, spec, value)
                changes[param.name] = value
            if changes:
                apply(current().replace(**changes))
        except ConfigError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    return on_set
