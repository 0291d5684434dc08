"""
Decision layer: whether a new fact repeats, refines or contradicts a stored one.

``make_decider(config)`` returns the decider ``config.decider`` names (None for "none"); its
``decide(candidate, existing)`` returns a normalized ``Outcome`` and never raises.
"""

from __future__ import annotations

from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine.decision.base import Decider
from robotmem_ros.engine.decision.llm import LLMDecider
from robotmem_ros.engine.decision.rules import RuleDecider
from robotmem_ros.engine.decision.types import (
    Action, Candidate, CREATE, DELETE, Existing, MERGE, NONE, Outcome, Proposal, SKIP,
)
from robotmem_ros.errors import ConfigError

__all__ = [
    'Action', 'Candidate', 'CREATE', 'Decider', 'DELETE', 'Existing', 'LLMDecider', 'MERGE',
    'make_decider', 'NONE', 'Outcome', 'Proposal', 'RuleDecider', 'SKIP',
]


def make_decider(config: MemoryConfig) -> Decider | None:
    """Build the configured decider; decider=llm without llm_url is a configuration error."""
    if config.decider == 'none':
        return None
    if config.decider == 'rules':
        return RuleDecider()
    if config.decider == 'llm':
        if not config.llm_url:
            raise ConfigError('decider=llm needs llm_url')
        return LLMDecider(config.llm_url, config.llm_model, config.llm_timeout)
    raise ConfigError(f'unknown decider {config.decider!r}')
