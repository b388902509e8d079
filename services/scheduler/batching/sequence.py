"""A request as the client sent it, and the scheduler's state of one sequence."""

from dataclasses import dataclass
from enum import Enum

from .client_text import ClientText

PRIORITIES = {"high": 0, "normal": 1, "low": 2}  # lower rank runs first


@dataclass(frozen=True)
class Request:
    """What the service shell hands to submit(): token ids already rendered by the tokenizer."""

    request_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    priority: str = "normal"
    stop: tuple[str, ...] = ()
    seed: int = 0
    deadline_s: float | None = None   # from submission; past it the request fails ("deadline")
    # A continuation: tokens this request generated (and its client saw) under a scheduler that
    # is gone. They count as generated (the sampler's step, max_tokens, penalties) and their text
    # is not sent again.
    generated: tuple[int, ...] = ()
    # An embedding: "mean", "cls" or "last" (how its final hidden states are pooled). It is a
    # prefill and nothing else: no token is sampled, and it ends once its last chunk is computed.
    pooling: str = ""
    # A grammar holds the whole answer (a JSON format, a forced tool call): the loop stops do not
    # cut it, since a cut answer would not parse. Its schema bounds it (a string's maxLength), and
    # max_tokens does.
    held: bool = False


class Status(Enum):
    WAITING = "waiting"    # no KV pages; (re-)prefill from all its tokens when admitted
    RUNNING = "running"    # holds pages; prefilling in chunks or decoding
    FINISHED = "finished"


class Sequence:
    """Tokens (prompt + generated), KV progress and page table of one request."""

    def __init__(self, request: Request, max_tokens: int, arrival: int, text: ClientText,
                 deadline: float | None = None):
        self.request = request
        self.request_id = request.request_id
        self.max_tokens = max_tokens
        self.arrival = arrival
        self.rank = PRIORITIES[request.priority]
        self.text = text
        self.tokens: list[int] = [*request.prompt, *request.generated]
        self.prompt_len = len(request.prompt)
        self.num_computed = 0          # tokens whose KV is on the shards
        self.num_cached = 0            # of those, how many came from the prefix cache
        self.pages: list[int] = []     # page table: page i holds positions [i*P, (i+1)*P)
        self.page_keys: list[int] = []  # chain keys of the leading full, computed pages
        self.status = Status.WAITING
        self.busy_batch: int | None = None  # id of the in-flight micro-batch holding it
        self.deadline = deadline       # on the policy's clock; None: none
        self.refilling = False         # its KV was lost: re-prefilled at the pace of recoveries
        self.solo = False              # runs alone: a batch holding it was refused as a whole
        self.retries = 0               # unusable results of its chunks in a row
        self.submitted_at = 0.0        # policy clock at submit()
        self.first_scheduled_at: float | None = None  # policy clock when a batch first held it

    @property
    def key(self) -> tuple[int, int]:
        """Scheduling order: priority, then arrival (FIFO within a priority)."""
        return (self.rank, self.arrival)

    @property
    def busy(self) -> bool:
        return self.busy_batch is not None

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def remaining(self) -> int:
        """Tokens still to feed before the next token can be sampled."""
        return len(self.tokens) - self.num_computed

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, {self.status.value}, tokens={len(self.tokens)}, "
                f"computed={self.num_computed}, pages={len(self.pages)}, busy={self.busy_batch})")
