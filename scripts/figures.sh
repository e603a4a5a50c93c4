#!/usr/bin/env bash
# Regenerates the README's figures: autoshape and classic on the embedded
# Verizon LTE trace pair (seed 1, budget 15 ms), drawn by `autoshape-tools plot`.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/autoshape-tools" ./cmd/autoshape-tools
"$tmp/autoshape-tools" simulate --json --series --policy autoshape,classic --duration 60s >"$tmp/sim.json"
"$tmp/autoshape-tools" plot --in "$tmp/sim.json" --out docs/figures/timeseries.png
"$tmp/autoshape-tools" simulate --json --series --policy autoshape,classic,unshaped,oracle >"$tmp/sim-all.json"
"$tmp/autoshape-tools" plot --in "$tmp/sim-all.json" --kind cdf --out docs/figures/cdf.png
