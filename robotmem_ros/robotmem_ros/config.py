"""
Every tunable of robotmem, in one table grouped by owner: engine, embedder loader, node, fleet.

The engine, the node and the CLI read the same ``MemoryConfig``. Each field carries the
metadata the node needs to declare it as a ROS parameter (description, range, choices,
read-only, owner), so a parameter and its setting can never drift apart in name, default or
bounds. ``config/params.yaml`` is written from this table (``python -m
robotmem_ros.node.params_file``; a test checks it is current, descriptions included).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
import math
import os
import pathlib
from typing import Any, Callable, Iterator, Mapping

from robotmem_ros.errors import ConfigError


# Who reads a setting; each one is read by its owner only.
OWNERS = {
    'engine': 'the memory engine (robotmem_ros.engine.MemoryEngine)',
    'embedder': 'the embedder loader (robotmem_ros.embedding.load_embedder)',
    'node': 'the ROS node (robotmem_ros.node.memory_node)',
    'fleet': 'the fleet sync (robotmem_ros.fleet; docs/fleet.md)',
}


@dataclass(frozen=True)
class ParamSpec:
    """How one setting is exposed and validated, and who reads it."""

    description: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    read_only: bool = False
    owner: str = 'engine'


def _setting(owner: str) -> Callable[..., Any]:
    def declare(default: Any, description: str, *, lo: float | None = None,
                hi: float | None = None, choices: tuple[str, ...] = (),
                read_only: bool = False) -> Any:
        spec = ParamSpec(description, lo, hi, choices, read_only, owner)
        return field(default=default, metadata={'spec': spec})
    return declare


# One declaring function per owner, named by its first letter (m: the embedding model loader).
_e, _m, _n, _f = (_setting(owner) for owner in OWNERS)


@dataclass(frozen=True)
class MemoryConfig:
    """
    All settings, grouped by owner; field names are the ROS parameter names.

    One declaration keeps a parameter and its setting from drifting apart; the grouping (and
    ``owned_by``) keeps each part reading only its own settings.
    """

    # === ENGINE: robotmem_ros.engine (MemoryEngine) ==========================================
    # --- store and request limits ------------------------------------------------------------
    db_path: str = _e('', 'SQLite file of the memory store; empty = $ROBOTMEM_HOME/memory.db '
                      '(default ~/.robotmem/memory.db).', read_only=True)
    collection: str = _e('default', 'Collection used when a request leaves it empty.')
    max_insight_chars: int = _e(2000, 'Longest accepted insight / new_content, in characters.',
                                lo=1, hi=100_000)
    max_description_chars: int = _e(4000, 'Longest accepted perception description.',
                                    lo=1, hi=100_000)
    max_json_bytes: int = _e(262_144, 'Largest accepted JSON field (context, data, metadata, '
                             'filters), in UTF-8 bytes.', lo=64, hi=16_777_216)
    max_json_depth: int = _e(16, 'Deepest accepted JSON nesting.', lo=1, hi=64)
    store_lock_timeout: float = _e(30.0, 'Seconds a starting node (or the CLI) waits while '
                                   'another process holds the write lock of the store, before '
                                   'it gives up with one fatal error.', lo=0.0, hi=3600.0,
                                   read_only=True)
    min_readability: float = _e(0.7, 'Share of tokens the model must read for cosine dedup and '
                                'the vector channel to be used for a text.', lo=0.0, hi=1.0)
    max_pending_embeddings: int = _e(
        100_000, 'Embedding backlog bound: past it the oldest waiting perceptions stay '
        'BM25-only (counted in diagnostics).', lo=1, hi=100_000_000)
    perception_stamp_max_future: float = _e(
        3600.0, 'Seconds a perception header stamp may lie ahead of the node clock; stamps '
        'further ahead, before 2000-01-01 or negative are replaced by the receive time and '
        'counted (stamps_replaced).', lo=0.0, hi=31_536_000.0)

    # --- write-time dedup --------------------------------------------------------------------
    dedup_jaccard_threshold: float = _e(0.70, 'Jaccard above which a new fact is a duplicate.',
                                        lo=0.0, hi=1.0)
    dedup_cosine_threshold: float = _e(0.80, 'Cosine at or above which a new fact is a '
                                       'duplicate when the judgment guard finds no content '
                                       'difference. 0.80 is calibrated for the default model '
                                       'minilm-l6-dq; other models: docs/performance.md, '
                                       'Thresholds.', lo=0.0, hi=1.0)
    session_cosine_threshold: float = _e(0.80, 'Cosine for duplicates within one session.',
                                         lo=0.0, hi=1.0)
    similar_jaccard_min: float = _e(0.40, 'Jaccard from which a fact is reported as similar.',
                                    lo=0.0, hi=1.0)
    similar_cosine_min: float = _e(0.40, 'Cosine from which a fact is reported as similar.',
                                   lo=0.0, hi=1.0)

    # --- consolidation, decay, retention -----------------------------------------------------
    consolidation_threshold: float = _e(0.60, 'Pairwise Jaccard above which session facts are '
                                        'merged at end_session.', lo=0.0, hi=1.0)
    consolidation_cosine_threshold: float = _e(0.85, 'Cosine at or above which session facts '
                                               'are merged (when both are embedded).',
                                               lo=0.0, hi=1.0)
    consolidation_numeric_cosine_threshold: float = _e(
        0.55, 'Cosine at or above which session facts that mention the same numbers are merged.',
        lo=0.0, hi=1.0)
    consolidation_max_confidence: float = _e(0.95, 'Facts at or above this confidence are never '
                                             'consolidated.', lo=0.0, hi=1.0)
    perception_retention_days: float = _e(
        0.0, 'Raw perceptions stored more than this many days ago (a replayed bag counts '
        'from its replay, not its stamps) that no recall returned are deleted at end_session '
        '(up to 5000 per call); 0 keeps them all.', lo=0.0, hi=100_000.0)
    decay_rate: float = _e(0.01, 'Daily confidence decay: c * (1 - rate) ^ days.',
                           lo=0.0, hi=1.0)
    episodic_half_life_days: float = _e(14.0, 'Recall-time half-life of episodic memories.',
                                        lo=0.01, hi=100_000.0)
    semantic_half_life_days: float = _e(180.0, 'Recall-time half-life of semantic memories.',
                                        lo=0.01, hi=100_000.0)

    # --- recall ------------------------------------------------------------------------------
    default_n: int = _e(5, 'Results when a request asks for n = 0.', lo=1, hi=100)
    default_min_confidence: float = _e(0.3, 'min_confidence when a request passes a negative '
                                       'value.', lo=0.0, hi=1.0)
    rrf_k: int = _e(60, 'Reciprocal-rank-fusion constant k in 1 / (k + rank + 1).',
                    lo=1, hi=10_000)
    fusion: str = _e('score', 'How recall merges the BM25 and vector rankings: score (weighted '
                     'sum of min-max normalized scores) or rrf (reciprocal-rank fusion).',
                     choices=('score', 'rrf'))
    bm25_weight: float = _e(0.6, 'Weight of the BM25 channel in score fusion; the vector '
                            'channel gets 1 - bm25_weight.', lo=0.0, hi=1.0)
    bm25_k1: float = _e(1.2, 'BM25 term-frequency saturation (FTS5 uses 1.2).', lo=0.0, hi=10.0)
    bm25_b: float = _e(0.3, 'BM25 length normalization: 0 ignores the length of a text, 1 '
                       'divides by it fully (FTS5 uses 0.75; 0.3 ranks long answers better).',
                       lo=0.0, hi=1.0)
    fusion_depth: int = _e(50, 'Candidates each channel contributes to fusion (at least 2 n, '
                           '4 n with filters).', lo=1, hi=10_000)
    adjacent_span: int = _e(2, 'How many places apart in storage order (same collection and '
                            'session) a recall candidate lends score to another candidate: a '
                            'turn or an episode step next to one that matches comes up; 0 = '
                            'off.', lo=0, hi=20)
    adjacent_weight: float = _e(0.35, 'Share of the best candidate score k places away (k <= '
                                'adjacent_span, on either side) that a candidate gains, per k '
                                '(engine/adjacency.py); 0 = off.', lo=0.0, hi=1.0)
    feedback_docs: int = _e(5, 'Best recall candidates read as a sample for pseudo-relevance '
                            'feedback: if they average at least feedback_min_tokens tokens, '
                            'their words expand the BM25 query (engine/feedback.py); 0 = off.',
                            lo=0, hi=100)
    feedback_terms: int = _e(20, 'Words pseudo-relevance feedback adds to the BM25 query; 0 = '
                             'off.', lo=0, hi=200)
    feedback_weight: float = _e(0.2, 'Weight of the feedback words in BM25 against the words of '
                                'the query; 0 = off.', lo=0.0, hi=1.0)
    feedback_min_tokens: int = _e(64, 'Tokens the feedback sample needs on average to lend its '
                                  'words to the query: conversation turns or one-line facts are '
                                  'no sample of a topic.', lo=1, hi=100_000)
    real_weight: float = _e(1.5, 'Score multiplier for memories with context.env.sim_or_real '
                            '== "real".', lo=0.0, hi=100.0)
    max_fetch: int = _e(2000, 'Deepest candidate fetch per channel when filters starve '
                        'results.', lo=10, hi=100_000)
    side_threads: int = _e(1, 'Spare threads that run one search of a call beside another: a '
                           "recall's vector channel (query embedding included) beside its "
                           "BM25 channel, a learn's nearest neighbours beside its Jaccard "
                           'layer. A call that finds none free runs them one after the other; '
                           '0 = always one after the other (engine/side_threads.py).', lo=0,
                           hi=64, read_only=True)
    ann_min_vectors: int = _e(20_000, 'Stored vectors from which an IVF index (faiss) '
                              'proposes the vector candidates instead of a scan of every '
                              'sign-bit code; built in the background at start and as the '
                              'store grows; 0 = never.', lo=0, hi=1_000_000_000, read_only=True)
    ann_nprobe: int = _e(24, 'Inverted lists the IVF index scans per unfiltered search (more: '
                         'higher recall, slower); a filter that keeps a share s of the rows '
                         'scans 1/sqrt(s) times more, up to all.', lo=1, hi=65_536,
                         read_only=True)
    int8_max_vectors: int = _e(100_000, 'Stored vectors up to which the vector index keeps an '
                               '8-bit copy of each in RAM (one byte per dimension) so that '
                               'only candidates that can reach the top k are rescored from '
                               'SQLite; above it every candidate is; 0 = never.', lo=0,
                               hi=1_000_000_000, read_only=True)
    text_index_min_rows: int = _e(20_000, 'FTS rows from which a tantivy index beside the '
                                  'store (<db>-tindex) proposes the BM25 candidates instead of '
                                  "FTS5's ranking of every match; built in the background; 0 = "
                                  'never (engine/text_index.py).', lo=0, hi=1_000_000_000,
                                  read_only=True)
    resident_text_max_rows: int = _e(20_000, 'FTS rows up to which every row and its tokens '
                                     'are held in RAM (about 1.6 KiB a row) for dedup, BM25 and '
                                     'the bodies, without FTS5 queries; built in the background; '
                                     '0 = never (engine/resident_text.py).', lo=0,
                                     hi=1_000_000_000, read_only=True)
    reader_cache_kib: int = _e(256, 'SQLite page cache of each connection but the writer, in KiB '
                               "(the threads' readers, the indexes', the checkpointer's; 0 = "
                               "SQLite's 2 000). The file's pages stay in the system's page "
                               'cache either way (engine/database.py).', lo=0, hi=1_048_576,
                               read_only=True)
    heap_mmap_threshold: int = _e(1_048_576, 'Bytes from which each heap block gets a memory '
                                  'map of its own, unmapped when freed (glibc mallopt '
                                  "M_MMAP_THRESHOLD, process-wide). glibc's own threshold rises "
                                  "with every large block freed, and the searches' temporaries "
                                  "then stay in the heap (engine/heap.py); 0 = glibc's rule.",
                                  lo=0, hi=33_554_432, read_only=True)
    max_collections: int = _e(10_000, 'Collections a store may hold; a write that names a new '
                              'collection beyond this is refused (any client can name one).',
                              lo=1, hi=10_000_000)
    recall_scope: str = _e('all', 'Whose memories local recall ranks: all, own (this robot) or '
                           'fleet (pulled from other robots); the context_filter key "origin" '
                           'narrows one request further.', choices=('all', 'own', 'fleet'))

    # --- decisions (contradictions and merges) -----------------------------------------------
    decider: str = _e('rules', 'Decision layer for updates/contradictions.',
                      choices=('rules', 'llm', 'none'))
    llm_url: str = _e('', 'OpenAI-compatible chat endpoint for decider=llm.')
    llm_model: str = _e('', 'Model name sent to the LLM endpoint.')
    llm_timeout: float = _e(5.0, 'Seconds before the LLM decider gives up (then CREATE).',
                            lo=0.1, hi=120.0)

    # === EMBEDDER LOADER: robotmem_ros.embedding (load_embedder) =============================
    embed_backend: str = _m('onnx', 'Embedding backend; "none" runs BM25-only.',
                            choices=('onnx', 'none'), read_only=True)
    embed_model: str = _m('minilm-l6-dq', 'Bundled model name (ignored when model_dir is '
                          'set).', read_only=True)
    model_dir: str = _m('', 'Directory with model.onnx + tokenizer.json of a user model.',
                        read_only=True)
    embed_device: str = _m('cpu', 'Execution provider; unavailable ones fall back to CPU.',
                           choices=('cpu', 'cuda', 'tensorrt', 'auto'), read_only=True)
    embed_threads: int = _m(2, 'Intra-op threads for CPU inference (0 = onnxruntime default).',
                            lo=0, hi=64, read_only=True)
    trt_cache_dir: str = _m('', 'TensorRT engine cache dir; empty = <db dir>/trt_cache.',
                            read_only=True)
    trt_fp16: bool = _m(True, 'Let TensorRT build fp16 engines (Jetson).', read_only=True)
    query_cache_size: int = _m(256, 'Recall query embeddings kept in an LRU cache.',
                               lo=0, hi=100_000, read_only=True)

    # === NODE: robotmem_ros.node (perception stream, status, re-sent requests) ===============
    perception_qos: str = _n('reliable', 'QoS of the perception subscription.',
                             choices=('reliable', 'best_effort', 'sensor_data'), read_only=True)
    perception_depth: int = _n(1000, 'KEEP_LAST depth of the perception subscription; bursts '
                               'longer than this need a deeper queue on both ends.',
                               lo=1, hi=100_000, read_only=True)
    service_queue_depth: int = _n(1000, 'Requests each service holds while the node is busy, '
                                  'and answers it keeps until acknowledged (the KEEP_LAST '
                                  'depth of its DDS queues); past it DDS drops the oldest '
                                  'request unanswered.', lo=10, hi=100_000, read_only=True)
    perception_batch_size: int = _n(200, 'Perceptions written per transaction.',
                                    lo=1, hi=100_000)
    perception_flush_interval: float = _n(0.5, 'Seconds between buffer flushes.',
                                          lo=0.01, hi=60.0)
    perception_max_buffer: int = _n(20_000, 'Perceptions held in memory before the oldest are '
                                    'dropped.', lo=1, hi=10_000_000)
    status_period: float = _n(5.0, 'Seconds between status/diagnostics heartbeats.',
                              lo=0.1, hi=3600.0)
    resend_window_s: float = _n(600.0, 'Seconds a write service remembers its answer to a '
                                'request_id, so a re-sent request is applied once.',
                                lo=0.0, hi=86_400.0)
    resend_window_max: int = _n(10_000, 'Most answers remembered for re-sent requests (oldest '
                                'forgotten first).', lo=0, hi=1_000_000)

    # === FLEET SYNC: robotmem_ros.fleet (docs/fleet.md; needs the fleet extra) ===============
    fleet_url: str = _f('', 'PostgreSQL connection string of the fleet hub (TLS via sslmode=); '
                        'empty = no fleet. Never put a password here: it comes from '
                        'fleet_password_file or $ROBOTMEM_FLEET_PASSWORD.', read_only=True)
    fleet_password_file: str = _f('', "File holding the hub password of this robot's role "
                                  "(else $ROBOTMEM_FLEET_PASSWORD, else libpq's .pgpass).",
                                  read_only=True)
    fleet_robot_id: str = _f('', "This robot's id at the hub (its rows carry it).",
                             read_only=True)
    fleet_collections: str = _f('', 'Comma-separated collections shared with the fleet (own '
                                "facts pushed, other robots' pulled); empty = the default "
                                'collection.', read_only=True)
    fleet_sync_period: float = _f(1.0, 'Seconds between sync rounds when no change or hub '
                                  'notification wakes the sync earlier.', lo=0.05, hi=3600.0)
    fleet_batch_size: int = _f(500, 'Rows per push or pull round trip.', lo=1, hi=100_000)
    fleet_outbox_limit: int = _f(10_000, 'Own changes queued for the hub at most; past it the '
                                 'status says "outbox full" and the sync catches up by '
                                 'comparing with the hub when it drains.', lo=1, hi=10_000_000)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = _coerce(f.name, f.default, getattr(self, f.name))
            object.__setattr__(self, f.name, value)
            check_value(f.name, f.metadata['spec'], value)

    def items(self) -> Iterator[tuple[str, ParamSpec, Any]]:
        """Yield (name, spec, value) for every setting, in declaration order."""
        for f in dataclasses.fields(self):
            yield f.name, f.metadata['spec'], getattr(self, f.name)

    def owned_by(self, owner: str) -> dict[str, Any]:
        """Return the settings ``owner`` (a key of OWNERS) reads, by name."""
        return {name: value for name, spec, value in self.items() if spec.owner == owner}

    def replace(self, **changes: Any) -> 'MemoryConfig':
        """Return a validated copy with ``changes`` applied."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f'unknown setting(s): {", ".join(sorted(unknown))}')
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> 'MemoryConfig':
        """Build from a dict (YAML file, ROS parameters), ignoring nothing silently."""
        return cls().replace(**dict(values))

    def resolved_db_path(self) -> pathlib.Path:
        """Where the store lives: db_path, else $ROBOTMEM_HOME/memory.db, else ~/.robotmem."""
        if self.db_path:
            return pathlib.Path(self.db_path).expanduser()
        home = os.environ.get('ROBOTMEM_HOME') or '~/.robotmem'
        return pathlib.Path(home).expanduser() / 'memory.db'


def spec_of(name: str) -> ParamSpec:
    """Return the spec of setting ``name``."""
    for f in dataclasses.fields(MemoryConfig):
        if f.name == name:
            return f.metadata['spec']
    raise ConfigError(f'unknown setting: {name}')


def _coerce(name: str, default: Any, value: Any) -> Any:
    """Accept an int where a float is expected; reject every other type change."""
    if isinstance(default, bool) or isinstance(value, bool):
        if isinstance(default, bool) and isinstance(value, bool):
            return value
    elif isinstance(default, float) and isinstance(value, (int, float)):
        return float(value)
    elif type(value) is type(default):
        return value
    raise ConfigError(f'{name} must be of type {type(default).__name__}, got {value!r}')


def check_value(name: str, spec: ParamSpec, value: Any) -> None:
    """Raise ConfigError when ``value`` is outside what ``spec`` allows."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f'{name} must be finite, got {value}')
    if spec.choices and value not in spec.choices:
        raise ConfigError(f'{name} must be one of {", ".join(spec.choices)}; got {value!r}')
    if spec.min is not None and value < spec.min:
        raise ConfigError(f'{name} must be >= {spec.min}; got {value}')
    if spec.max is not None and value > spec.max:
        raise ConfigError(f'{name} must be <= {spec.max}; got {value}')
