"""`flashprobe ablate --dry-run`: the plan, its cost (tokens, and time where a throughput was
measured) and what only the target machine can check."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashprobe.reporting.render import render

if TYPE_CHECKING:
    from flashprobe.runner.suite_run import SuitePlan

PLAN_COLUMNS = ["variant", "point", "seed", "action", "branch", "steps", "tokens", "cell"]
HEADERS = {"point": "axes"}


def render_plan(fmt: str, planned: SuitePlan) -> str:
    """The plan rows (with the tokens each cell trains) and, as a table, the estimate lines;
    json and csv stay one document (rows only)."""
    from flashprobe.suites.estimate import format_tokens

    rows = planned.rows()
    if fmt != "table":
        return render(fmt, rows, columns=PLAN_COLUMNS, headers=HEADERS)
    shown = [{**row, "tokens": format_tokens(row["tokens"])} for row in rows]
    table = render(fmt, shown, columns=PLAN_COLUMNS, headers=HEADERS)
    return "\n".join([table, "", *estimate_lines(planned)])


def estimate_lines(planned: SuitePlan, *, problems: bool = True) -> list[str]:
    """Cells and tokens to train, the time where a throughput is known, and (with `problems`)
    what only the target machine can check."""
    from flashprobe.suites.estimate import (
        describe_times,
        format_tokens,
        machine_device,
        parallel_units,
        throughputs,
    )

    plan, suite = planned.cells, planned.suite
    tokens = sum(row["tokens"] for row in planned.rows())
    to_run = [p for p in plan if p.action != "skip"]
    device = machine_device()
    lines = [
        f"{len(to_run)} of {len(plan)} cells to train ({len(plan) - len(to_run)} finished): "
        f"{format_tokens(tokens)} tokens."
    ]
    if to_run:
        known = throughputs(suite)
        times = describe_times(tokens, parallel_units([p.cell for p in to_run]), known, device)
        if times and any(p.setup.train.divergence.stop for p in to_run):
            times[-1] += ", every cell to its last step (one that diverges stops sooner)"
        if not any(t.matches(device) for t in known):
            times.append(f"no throughput measured for this machine ({device})")
        lines.append("Time: " + "; ".join(times) + ".")
        if planned.jobs > 1:
            lines.append(f"Trains in {planned.jobs} processes side by side (--jobs, or the "
                         "suite's jobs:).")  # fmt: skip
    if problems and planned.problems:
        lines.append("Not checked here (only the machine that runs the suite can):")
        lines += [f"- {p}" for p in planned.problems]
    return lines
