#!/usr/bin/env bash
# Regenerate the AdamW results in docs/results from its digests: the report (markdown, its first
# line the command) and the figures under the names the docs link to. Run from the repo root
# after merging a device session's digest into its claim's file, e.g.
#
#   flashprobe digest-merge docs/results/loss-explosion-adamw-attribution.json \
#     docs/results/loss-explosion-adamw-attribution.json session.json --force
#
#   bash scripts/adamw_results.sh            # rewrites the report and the linked figures
#
# The new cells' numbers for the findings and the closing note (loss, gradient norm, logits,
# ΣP − 1, tokens/s): python scripts/run_stats.py <digest> --cell VARIANT:SEED ...
#
# Figures that digest-report does not draw for the current digests (e.g. no δ replay) are left
# as they are; new ones (the attribution's) are listed at the end, to be named and linked.
set -euo pipefail
cd "$(dirname "$0")/.."
results=docs/results
args=(--reference paper-code --rise-from 500 --cell paper-code:0)
command="flashprobe digest-report docs/results/loss-explosion-adamw-*.json ${args[*]} --format markdown"
{
  echo "<!-- $command -->"
  flashprobe digest-report "$results"/loss-explosion-adamw-*.json "${args[@]}" --format markdown
} >"$results/loss-explosion-adamw-report.md.tmp"
mv "$results/loss-explosion-adamw-report.md.tmp" "$results/loss-explosion-adamw-report.md"
plots=$(mktemp -d)
trap 'rm -rf "$plots"' EXIT
flashprobe digest-report "$results"/loss-explosion-adamw-*.json "${args[@]}" --plot "$plots" >/dev/null
# digest-report's file → the name docs/ links to
declare -A names=(
  [quick_max_logit.png]=loss-explosion-adamw-max-logit.png
  [quick_tie_counts.png]=loss-explosion-adamw-tie-counts.png
  [quick_paper-code_seed0_spectral_norm.png]=loss-explosion-adamw-spectral-norms-paper-code-seed0.png
  [quick_paper-code_seed0_attention_per_layer.png]=loss-explosion-adamw-attention-per-layer-paper-code-seed0.png
  [quick_paper-code_seed0_delta_running_sum.png]=loss-explosion-adamw-delta-replay-paper-code-seed0.png
  [adamw-controls_loss_grad_norm.png]=loss-explosion-adamw-controls-loss.png
  [adamw-controls_max_logit.png]=loss-explosion-adamw-controls-max-logit.png
  [adamw-attribution_loss_grad_norm.png]=loss-explosion-adamw-attribution-loss.png
  [adamw-attribution_max_logit.png]=loss-explosion-adamw-attribution-max-logit.png
  [adamw-attribution_outcomes.png]=loss-explosion-adamw-attribution-outcomes.png
  [adamw-controls_outcomes.png]=loss-explosion-adamw-controls-outcomes.png
  [adamw-attribution_tie_counts.png]=loss-explosion-adamw-attribution-tie-counts.png
  [adamw-attribution_softmax_sum_bias.png]=loss-explosion-adamw-attribution-softmax-sum-bias.png
  [adamw-controls_softmax_sum_bias.png]=loss-explosion-adamw-controls-softmax-sum-bias.png
  [quick_softmax_sum_bias.png]=loss-explosion-adamw-baseline-softmax-sum-bias.png
  [quick_loss_grad_norm.png]=loss-explosion-adamw-quick-pair-unused-seeds-loss.png
  [quick-settings_loss_grad_norm.png]=loss-explosion-adamw-quick-settings-loss.png
)
for made in "$plots"/*.png; do
  name=${names[$(basename "$made")]:-}
  if [ -n "$name" ]; then
    cp "$made" "$results/$name" && echo "wrote $results/$name"
  else
    echo "not linked yet: $(basename "$made")"
  fi
done
