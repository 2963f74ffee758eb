#!/usr/bin/env bash
# Regenerates every number and plot of docs/experiments/: seed 000's Figures 6-12 in paper mode
# and rondo mode, seeds 001, 003 and 004, the capacity runs, the failure-tolerance cost and every investigation.
# Run from the repository root after `cargo build --release -p rondo-cli`:
#   bash docs/experiments/tools/run-all.sh            # everything (about 40 min on 2 cores)
#   bash docs/experiments/tools/run-all.sh figures    # only the figures (paper, rondo, capacity)
#   bash docs/experiments/tools/run-all.sh investigations
# Results go to results/ (gitignored); wall-clock times to results/times.txt; compressed PNG
# copies of the figures' plots to docs/experiments/img/ (needs pngquant).
set -euo pipefail
RONDO=${RONDO:-./target/release/rondo}
what=${1:-all}
mkdir -p results
run() { # out-dir file [--set ...]
  local out=$1 file=$2; shift 2
  local start=$(date +%s.%N)
  "$RONDO" experiment run "$file" --out "results/$out" "$@" > "results/$out.log" 2>&1 \
    || { cat "results/$out.log"; exit 1; }
  printf '%s %.1f s\n' "$out" "$(echo "$(date +%s.%N) - $start" | bc)" | tee -a results/times.txt
}
png() { # out-dir image-name
  pngquant --quality=60-90 --strip --force --output "docs/experiments/img/$2.png" "results/$1/plot.png"
}
if [[ $what == all || $what == figures ]]; then
  for n in 6 7 8 9 10 11 12; do
    run seed000-fig$n experiments/seed000-fig$n.toml
    png seed000-fig$n seed000-fig$n
    run seed000-fig$n-rondo experiments/seed000-fig$n.toml --set bound=rondo
    png seed000-fig$n-rondo seed000-fig$n-rondo
  done
  for n in 6 7 10; do
    run seed000-fig$n-capacity experiments/seed000-fig$n.toml --set load=1.5
    run seed000-fig$n-rondo-capacity experiments/seed000-fig$n.toml --set bound=rondo --set load=1.5
  done
fi
if [[ $what == all || $what == figures ]]; then
  # Seed 004 (docs/experiments/seed004-*.md): the pages show the second reading (kbit/s, 16 MB).
  for f in fig3 fig4 fig3-lifetimes fig4-lifetimes fig5a fig5b; do
    run seed004-$f experiments/seed004-$f.toml
  done
  for f in fig3 fig4; do
    for k in streams memory cycle; do
      pngquant --quality=60-90 --strip --force --output "docs/experiments/img/seed004-$f-$k.png" \
        "results/seed004-$f/plot-2-$k.png"
    done
  done
  for f in fig5a fig5b; do
    pngquant --quality=60-90 --strip --force --output "docs/experiments/img/seed004-$f.png" \
      "results/seed004-$f/plot-2.png"
  done
  # Seed 003 (docs/experiments/seed003-*.md).
  for f in fig4 fig5 rate; do
    run seed003-$f experiments/seed003-$f.toml
    png seed003-$f seed003-$f
  done
  pngquant --quality=60-90 --strip --force --output docs/experiments/img/seed003-fig4-memory.png \
    results/seed003-fig4/plot-against.png
  # Seed 001 (docs/experiments/seed001-*.md): the simulated cluster.
  q() { pngquant --quality=60-90 --strip --force --output "docs/experiments/img/$2.png" "results/$1.png"; }
  for f in fig4 fig7 fig10 fig11 fig11-steady admission; do
    run seed001-$f experiments/seed001-$f.toml
  done
  for f in fig4 fig7; do
    for k in avg-1 avg-4 max-1 max-4 summary-15 summary-50; do q seed001-$f/plot-$k seed001-$f-$k; done
  done
  for k in avg-1 avg-2 max-1 max-2; do q seed001-fig10/plot-$k seed001-fig10-$k; done
  q seed001-fig11/plot seed001-fig11
  q seed001-fig11-steady/plot seed001-fig11-steady
  q seed001-admission/plot seed001-admission
fi
if [[ $what == all || $what == investigations ]]; then
  I=experiments/investigations
  for v in scene-length trace-seed lookahead load; do
    run inv-fig6-$v $I/seed000-fig6-$v.toml
  done
  run inv-fig6-scene-length-8 $I/seed000-fig6-scene-length.toml --set disks=8
  run inv-fig6-failure $I/seed000-fig6-failure.toml
  run inv-buffer $I/seed000-buffer.toml
  for d in 4 8 16 32; do
    run inv-fig7-scene-length-$d $I/seed000-fig7-scene-length.toml --set disks=$d
  done
  run inv-fig9-placement-8 $I/seed000-fig9-placement.toml
  run inv-fig9-placement-16 $I/seed000-fig9-placement.toml --set disks=16
  run inv-fig9-placement-8-rondo $I/seed000-fig9-placement.toml --set bound=rondo
  run inv-fig9-failure-start $I/seed000-fig9-failure-start.toml
  run inv-fig9-failure-window-short $I/seed000-fig9-failure-window.toml --set end_round=3100
  run inv-fig9-failure-window-long $I/seed000-fig9-failure-window.toml
  run inv-fig9-inner-8-short $I/seed000-fig9-inner-data.toml --set end_round=3100
  run inv-fig9-inner-16-short $I/seed000-fig9-inner-data.toml --set disks=16 --set end_round=3100
  run inv-fig9-inner-8-mirroring $I/seed000-fig9-inner-data.toml --set scheme=mirroring
  run inv-fig9-inner-8-mirroring-short $I/seed000-fig9-inner-data.toml --set scheme=mirroring --set end_round=3100
  run inv-fig10-lookahead $I/seed000-fig10-lookahead.toml
  run inv-fig10-lookahead-load1 $I/seed000-fig10-lookahead.toml --set load=1.0
  run inv-fig10-lookahead-capacity $I/seed000-fig10-lookahead.toml --set load=1.5
  run inv-fig10-scene-length $I/seed000-fig10-scene-length.toml
  for d in 4 8 16; do
    run inv-fig10-scene-length-$d $I/seed000-fig10-scene-length.toml --set disks=$d
  done
  run inv-fig10-scene-length-w32 $I/seed000-fig10-scene-length.toml --set lookahead_rounds=32
  run inv-fig10-scene-length-capacity $I/seed000-fig10-scene-length.toml --set load=1.5
  run inv-fig10-lookahead-rondo-capacity $I/seed000-fig10-lookahead.toml --set bound=rondo --set load=1.5
  for v in scene-length trace-seed lookahead gop-variation fragment-sequence round-robin-counter; do
    run inv-fig11-$v $I/seed000-fig11-$v.toml
  done
  run inv-fig11-round-robin-counter-rondo $I/seed000-fig11-round-robin-counter.toml --set bound=rondo
  run inv-fig11-fine-x $I/seed000-fig11-fine-x.toml
  run inv-fig12-per-title experiments/seed000-fig12.toml --set round_robin_counter=per-title
  run inv-fig7-round-robin-counter $I/seed000-fig7-round-robin-counter.toml
  run inv-fig7-rrc-lookahead $I/seed000-fig7-round-robin-counter-lookahead.toml
  run inv-ftc-paper $I/failure-tolerance-cost.toml
  run inv-ftc-rondo $I/failure-tolerance-cost.toml --set bound=rondo
  run inv-ftc-paper-capacity $I/failure-tolerance-cost.toml --set load=1.5
  run inv-ftc-rondo-capacity $I/failure-tolerance-cost.toml --set bound=rondo --set load=1.5
  run inv-ftcd-paper-capacity $I/failure-tolerance-cost-declustered.toml --set load=1.5
  run inv-ftcd-rondo-capacity $I/failure-tolerance-cost-declustered.toml --set bound=rondo --set load=1.5
  run inv-seed001-fig11-interface-bound $I/seed001-fig11-interface-bound.toml
  pngquant --quality=60-90 --strip --force --output docs/experiments/img/seed001-fig11-interface-bound.png \
    results/inv-seed001-fig11-interface-bound/plot.png
  run inv-seed001-fig5-sensitivity $I/seed001-fig5-sensitivity.toml
  run inv-seed001-mesh $I/seed001-mesh.toml
  run inv-seed001-fig11-steady-interface-bound $I/seed001-fig11-steady-interface-bound.toml
fi
