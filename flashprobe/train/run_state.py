"""What a run records: the state the loop carries (and checkpoints) and the summary it ends with."""

from __future__ import annotations

import dataclasses
from typing import Any

#: The phases of RunSummary.time_by_phase_s, in the order they are reported.
PHASES = ("train", "eval", "spectral", "checkpoint", "capture", "other")
#: The run folder's record of a run cut short (KeyboardInterrupt: Ctrl-C, a time limit's SIGINT,
#: a shard's SIGTERM), written as it stops: interrupted_record. Not a summary: the run is not
#: finished, and a resumed run deletes it as it starts (a new cut writes a new one).
INTERRUPTED = "interrupted.json"


@dataclasses.dataclass(frozen=True)
class RunSummary:
    out_dir: str
    steps_done: int
    final_loss: float | None
    min_loss: float | None
    final_val_loss: float | None
    diverged: bool
    diverged_step: int | None
    divergence_rule: str | None
    tokens_per_s: float
    wall_time_s: float
    #: Where the wall time went (seconds, PHASES): the training steps, the periodic metrics,
    #: checkpoints, capture writes, and the rest (logging, data offsets): tells a slow cell's
    #: overhead from its kernels. A branched run's includes its source's, as wall_time_s does.
    time_by_phase_s: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Why a resume started before the newest checkpoint (a damaged checkpoint or log line;
    #: checkpoint.ResumePoint): empty when it did not.
    resume_notes: tuple[str, ...] = ()
    #: The token stream's content hash (TokenDataset.digest: pysource's sha256, the stdlib
    #: corpus's sha256 prefix; None for a token folder): tells runs on different corpora apart.
    data_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "resume_notes": list(self.resume_notes)}


@dataclasses.dataclass
class RunState:
    """What the loop carries from step to step (saved in checkpoints)."""

    step: int = 0  # optimizer steps completed
    last_loss: float | None = None
    min_loss: float | None = None
    last_val_loss: float | None = None
    train_time_s: float = 0.0  # forward/backward/update time only
    wall_time_s: float = 0.0
    tokens: int = 0
    #: Seconds spent in each non-training phase (eval, spectral, checkpoint, capture).
    phase_time_s: dict[str, float] = dataclasses.field(default_factory=dict)

    def add_phase_time(self, phase: str, seconds: float) -> None:
        self.phase_time_s[phase] = self.phase_time_s.get(phase, 0.0) + seconds


def time_by_phase(state: RunState) -> dict[str, float]:
    """RunSummary.time_by_phase_s: every phase of PHASES, rounded to milliseconds."""
    phases = {"train": state.train_time_s, **state.phase_time_s}
    phases["other"] = max(state.wall_time_s - sum(phases.values()), 0.0)
    return {name: round(phases.get(name, 0.0), 3) for name in PHASES}


def interrupted_record(state: RunState) -> dict[str, Any]:
    """What a run cut short records of itself (INTERRUPTED): the steps it did, its wall time so
    far and where that time went (as RunSummary's fields of the same names)."""
    return {
        "steps_done": state.step,
        "wall_time_s": state.wall_time_s,
        "time_by_phase_s": time_by_phase(state),
    }
