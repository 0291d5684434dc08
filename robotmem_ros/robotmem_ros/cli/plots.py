"""PNG plots of a memory store (matplotlib, Agg: no display needed on a robot)."""

from __future__ import annotations

import math
from typing import Any, Iterable

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from robotmem_ros.engine.context_filter import is_number, parse_path, resolve_path  # noqa: E402
from robotmem_ros.errors import StorageError, ValidationError  # noqa: E402
from robotmem_ros.types import MemoryRecord  # noqa: E402

COLOR_BY = ('category', 'outcome')
_OUTCOME_COLORS = {'success': '#2ca02c', 'failure': '#d62728', 'unknown': '#7f7f7f'}


def episode_timeline(episode: dict[str, Any], out: str) -> int:
    """Draw one lane per perception type / fact category along the episode's time axis."""
    session, memories = episode['session'], episode['memories']
    if not memories:
        raise ValidationError(f"session {session['id']} has no memories to plot")
    start = session['started_at']
    span = max(m['created_at'] for m in memories) - start
    scale, unit = next((s, u) for s, u in ((3600.0, 'hours'), (60.0, 'minutes'), (1.0, 'seconds'))
                       if span >= 10 * s or s == 1.0)
    lanes = sorted({_lane(m) for m in memories}, key=lambda lane: (lane[0] != 'perception',
                                                                   lane))
    row_of = {lane: i for i, lane in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.5 * len(lanes)), constrained_layout=True)
    cmap = plt.get_cmap('tab10')
    for lane in lanes:
        items = [m for m in memories if _lane(m) == lane]
        color = cmap(row_of[lane] % 10)
        for status, face in (('active', color), ('superseded', 'none')):
            chosen = [m for m in items if m['status'] == status]
            if chosen:
                ax.scatter([(m['created_at'] - start) / scale for m in chosen],
                           [row_of[lane]] * len(chosen),
                           marker='o' if lane[0] == 'perception' else '*',
                           s=36 if lane[0] == 'perception' else 140, facecolors=face,
                           edgecolors=color, linewidths=1.2)
    if session['ended_at'] is not None:
        ax.axvline((session['ended_at'] - start) / scale, color='k', linestyle='--', linewidth=1)
    ax.set_yticks(range(len(lanes)), [f'{kind}: {label or "-"}' for kind, label in lanes])
    ax.set_ylim(-0.7, len(lanes) - 0.3)
    ax.set_xlabel(f'{unit} since session start')
    ax.grid(axis='x', alpha=0.3)
    outcome = session['outcome_score']
    shown = '-' if outcome is None else f'{outcome:.2f}'
    ax.set_title(f"episode {session['id'][:12]}  ·  {len(memories)} memories  ·  outcome "
                 f'{shown}   (● perception, ★ fact, hollow = superseded, dashed = end)',
                 fontsize=10)
    _save(fig, out)
    return len(memories)


def _lane(memory: dict[str, Any]) -> tuple[str, str]:
    if memory['type'] == 'perception':
        return 'perception', memory['perception_type']
    return 'fact', memory['category']


def position_map(records: Iterable[MemoryRecord], field: str, color_by: str, out: str,
                 title: str) -> int:
    """Top view (x, y) of the coordinates stored under ``field``, coloured by a label."""
    if color_by not in COLOR_BY:
        raise ValidationError(f'--color-by must be one of {COLOR_BY}, got {color_by!r}')
    path = parse_path(field, '--field')
    points: dict[str, list[tuple[float, float]]] = {}
    for record in records:
        xy = _xy(resolve_path(record.context, path))
        if xy is not None:
            label = record.category if color_by == 'category' else _outcome(record.context)
            points.setdefault(label, []).append(xy)
    total = sum(len(v) for v in points.values())
    if not total:
        raise ValidationError(f'no active memory has a usable position at {field!r}')
    fig, ax = plt.subplots(figsize=(7.5, 7), constrained_layout=True)
    cmap = plt.get_cmap('tab10')
    for i, label in enumerate(sorted(points)):
        xs, ys = zip(*points[label])
        color = _OUTCOME_COLORS.get(label) if color_by == 'outcome' else cmap(i % 10)
        ax.scatter(xs, ys, s=40, alpha=0.8, color=color, edgecolors='k', linewidths=0.4,
                   label=f'{label or "-"} ({len(xs)})')
    ax.set_aspect('equal', adjustable='datalim')
    ax.set_xlabel(f'{field} x')
    ax.set_ylabel(f'{field} y')
    ax.grid(alpha=0.3)
    ax.legend(title=color_by, fontsize=8, loc='best')
    ax.set_title(f'{title}: {total} remembered positions (top view)', fontsize=10)
    _save(fig, out)
    return total


def _xy(value: Any) -> tuple[float, float] | None:
    """Accept [x, y, ...] or {"x": .., "y": ..}; anything else has no position."""
    if isinstance(value, dict):
        value = [value.get('x'), value.get('y')]
    if not isinstance(value, (list, tuple)) or len(value) < 2:
        return None
    if not all(is_number(v) for v in value[:2]):
        return None
    x, y = float(value[0]), float(value[1])
    return (x, y) if math.isfinite(x) and math.isfinite(y) else None


def _outcome(context: dict[str, Any]) -> str:
    task = context.get('task')
    success = task.get('success') if isinstance(task, dict) else None
    if isinstance(success, bool):
        return 'success' if success else 'failure'
    return 'unknown'


def _save(fig: Any, out: str) -> None:
    try:
        fig.savefig(out, dpi=110)
    except OSError as exc:
        raise StorageError(f'cannot write {out}: {exc.strerror or exc}') from exc
    finally:
        plt.close(fig)
