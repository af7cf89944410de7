"""One row per cell of a suite's plan (`ablate --dry-run`) or of its outcomes (the summary)."""

from __future__ import annotations

from typing import Any

from flashprobe.attribution.loss_rise import held_loss_rise, held_records
from flashprobe.attribution.runaway import gradient_runaway
from flashprobe.runner.plan import PlannedCell
from flashprobe.runner.training import CellOutcome
from flashprobe.store.reader import METRICS_FILE, scan_metrics
from flashprobe.store.result_store import RUN_DIR
from flashprobe.suites.estimate import cell_tokens


def plan_row(planned: PlannedCell) -> dict[str, Any]:
    cell = planned.cell
    action: str = planned.action
    if action == "resume" and planned.checkpoint_step is not None:
        action = f"resume from step {planned.checkpoint_step}"
    elif action == "extend" and planned.extends is not None:
        action = f"extend {planned.extends.path.name} from step {planned.checkpoint_step}"
    return {
        "variant": cell.variant,
        "point": _point(planned),
        "seed": cell.seed,
        "action": action,
        "branch": f"{cell.branch_from}@{cell.branch_step}" if cell.branch_from else None,
        "steps": planned.steps,
        "cell": planned.path.name,
        # what this invocation trains: none when finished, the rest when resumed or extended
        "tokens": cell_tokens(cell, planned.first_step) if planned.action != "skip" else 0,
    }


def outcome_row(outcome: CellOutcome) -> dict[str, Any]:
    planned, summary = outcome.planned, outcome.summary or {}
    diverged = summary.get("diverged")
    records, _ = scan_metrics(planned.path / RUN_DIR / METRICS_FILE)
    min_step, in_a_row = held_records(planned.cell.config)
    return {
        "variant": planned.cell.variant,
        "point": _point(planned),
        "seed": planned.cell.seed,
        "status": outcome.status.replace("_", " "),
        "diverged": diverged,
        "step": summary.get("diverged_step") if diverged else summary.get("steps_done"),
        "final_loss": summary.get("final_loss"),
        "min_loss": summary.get("min_loss"),
        "loss_rise": held_loss_rise(
            ((r["step"], r.get("loss")) for r in records), min_step=min_step, in_a_row=in_a_row
        ),
        "grad_runaway": None if diverged else _runaway_step(records),
        "final_val_loss": summary.get("final_val_loss"),
        "tokens_per_s": _rounded(summary.get("tokens_per_s")),
        "cell": planned.path.name,
    }


def _runaway_step(records: list[dict[str, Any]]) -> int | None:
    """The step where a run the loss rule let pass ran away in its gradient norm
    (attribution.runaway), from its logged metrics: a slow blow-up shows in the table too."""
    found = gradient_runaway((r["step"], r.get("grad_norm")) for r in records)
    return None if found is None else found.step


def _point(planned: PlannedCell) -> str:
    return ",".join(f"{k}={v}" for k, v in planned.cell.point) or "-"


def _rounded(value: float | None) -> int | None:
    return None if value is None else round(value)
