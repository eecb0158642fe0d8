#!/usr/bin/env bash
# The seven CLI checksums (benchmarks/RESULTS.md, "Behaviour changes"): the first 12 hex digits
# of each metrics.csv's sha256, cold (PRIVRL_CACHE_DIR=off). A refactor must leave them as they
# are, or declare the change. Usage: bash benchmarks/checksums.sh [PRIVRL]  (default .venv/bin/privrl)
set -euo pipefail
PRIVRL=${1:-.venv/bin/privrl}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {
  local name=$1; shift
  PRIVRL_CACHE_DIR=off "$PRIVRL" run "$@" --no-progress --out "$tmp/$name" > "$tmp/$name.log" 2>&1 \
    || { echo "$name FAILED"; tail -5 "$tmp/$name.log"; return 0; }
  echo "$name $(sha256sum "$tmp/$name/metrics.csv" | cut -c1-12)"
}
run pgc-tuned pgc-a3c --preset tuned --mechanism laplace --epsilon 5 --trials 2 --submissions 3000 --seed 3
run pgc-paper pgc-a3c --preset paper --trials 1 --submissions 1800 --seed 5
run dp-reinforce dp-reinforce --noise-multiplier 0.6 --episodes 60 --seed 4
run fedpg-cen fedpg-cen --episodes 300 --seed 5
run dp-dqn dp-dqn --noise-multiplier 1.0 --episodes 40 --seed 1
run ldp-reinforce ldp-reinforce --mode box --episodes 40 --seed 3
run fedpg-dec fedpg-dec --episodes 300 --seed 5
