"""Per-row instrumentation that every attention backend can return (`return_stats=True`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttentionStats:
    """What one attention call saw, per query row; shapes are batch × heads × seq_q.

    lse: fp32 log-sum-exp of the scaled scores (natural log), as the backward uses it.
    row_max: fp32 largest scaled score of the row (the max attention logit to monitor).
    tie_events: int32 number of key tiles in which the row had more than one score within
        `tie_tolerance` of that tile's max: the stabilized softmax's trigger (paper Fig. 13).
    p_bar_ones: int32 number of P̄ entries exactly 1.0 that entered the P̄V product.
    """

    lse: torch.Tensor
    row_max: torch.Tensor
    tie_events: torch.Tensor
    p_bar_ones: torch.Tensor
