"""What each kind of service tells about itself in its heartbeats (and handshake): one typed
record per kind, checked when a heartbeat is decoded, so that a reader finds `entry.info.layers`
rather than a string key that may be missing. A kind without its own record tells `ServiceInfo`.

On the wire `info` is the record's map (`to_wire`); `info_of(kind, map)` reads it back.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ..errors import BadFrame
from ..schema import from_wire, record, to_wire


@record
class ServiceInfo:
    """Every kind's: the model identity it serves ("" when none, or none yet)."""
    model: str = ""


@record
class ShardInfo(ServiceInfo):
    """A shard runner: the layers it serves and how, and what placement reads of it."""
    layers: tuple[int, ...] = ()     # (start, end) of the range served; () while none is
    n_layers: int = 0                # the model's
    num_pages: int = 0               # KV pages, and tokens per page
    page_size: int = 0
    memory: int = 0                  # bytes offered to placement; 0: pinned by --layers
    kv_per_layer: int = 0            # KV bytes one layer costs here (for placement)
    weight_scale: float = 1.0        # bytes its weights take per byte of the file (a GPU's float16
                                     # where a block kind has no kernel there; float32 dequantized)
    plan: int = 0                    # the placement plan served (0: pinned, or none yet)
    codec: str = ""                  # of the activations it sends on
    device: str = ""
    weights: str = ""                # quantized (quantized_t16: Q4_0 in tiles, on AVX-512) or float32
    weights_mb: float = 0.0
    kv_mb: float = 0.0
    load_s: float = 0.0              # how long its range took to load, and whether from the
    cold_load: bool = False          # GGUF (cold) or the range cache
    max_rss_mb: float = 0.0
    threads: int = 0
    # Where its threads run: shards that show one kernel (bus.machine.kernel_id) share its
    # `cores`, so the scheduler keeps no more of its micro-batches computing at once than fit.
    kernel: str = ""
    cores: int = 0
    gpu_mb: float = 0.0              # what a cuda shard holds on its GPU: weights, KV, step buffers
    # The scheduler run whose page tables the KV follows ("": none), and the pages that hold
    # keys written for it: a page of a run that is gone is dropped (services.shard.kv_owner).
    kv_owner: str = ""
    kv_owner_epoch: int = 0
    kv_pages: int = 0

    def check(self):
        if self.layers and (len(self.layers) != 2 or not 0 <= self.layers[0] < self.layers[1]):
            raise ValueError(f"layers {list(self.layers)}: (start, end) with 0 <= start < end")

    @property
    def serving(self) -> bool:
        """Whether it holds a layer range of a known model now."""
        return bool(self.layers) and bool(self.model)


@record
class SchedulerInfo(ServiceInfo):
    """A scheduler: its pipelines and how full they are."""
    pipeline: list[str] = field(default_factory=list)   # the first pipeline's shards, in order
    pipelines: list[dict[str, Any]] = field(default_factory=list)   # each, as busctl shows it
    waiting: int = 0
    running: int = 0
    inflight_batches: int = 0
    pages_total: int = 0
    pages_used: int = 0
    page_use: float = 0.0
    pages_cached: int = 0
    prefix_hit_rate: float = 0.0
    tokens_per_s: float = 0.0
    placement: dict[str, Any] = field(default_factory=dict)       # the plan in force, if any
    name_clashes: dict[str, list[str]] = field(default_factory=dict)
    # Last shards whose pipelines are refused, with why (they cannot reach this scheduler).
    refused: dict[str, str] = field(default_factory=dict)


@record
class TokenizerInfo(ServiceInfo):
    vocab_size: int = 0


@record
class GatewayInfo(ServiceInfo):
    http: str = ""                   # the base URL it serves, "" before it listens
    model_id: str = ""               # the model's name as clients use it


@record
class FailedService:
    """A service a health watcher gave up on, and what it last told in its heartbeats."""
    reason: str
    kind: str = ""
    info: dict[str, Any] = field(default_factory=dict)   # the kind's info record

    def check(self):
        check_info(self.kind, self.info)

    @property
    def last_info(self) -> ServiceInfo:
        return info_of(self.kind, self.info)


@record
class HealthInfo(ServiceInfo):
    mode: str = ""                   # children or systemd
    machine: str = ""
    watching: list[str] = field(default_factory=list)
    failed: dict[str, FailedService] = field(default_factory=dict)


INFO: dict[str, type[ServiceInfo]] = {"shard": ShardInfo, "scheduler": SchedulerInfo,
                                      "tokenizer": TokenizerInfo, "gateway": GatewayInfo,
                                      "health": HealthInfo}


def info_type(kind: str) -> type[ServiceInfo]:
    return INFO.get(kind, ServiceInfo)


def _no_tensors(value, path):
    raise BadFrame("schema", f"{path}: a service's info carries no tensors")


def _put_no_tensor(tensor):
    raise TypeError("a service's info carries no tensors")


def info_map(info: ServiceInfo) -> dict[str, Any]:
    """An info record as the map a heartbeat carries."""
    return to_wire(info, _put_no_tensor)


def info_of(kind: str, raw: dict[str, Any]) -> ServiceInfo:
    """The info record of a service of `kind` from its wire map; BadFrame if it does not fit."""
    return from_wire(info_type(kind), raw, _no_tensors, "info")


def check_info(kind: str, raw: dict[str, Any]) -> None:
    """ValueError (BadFrame) unless `raw` is a valid info record of `kind`."""
    info_of(kind, raw)
