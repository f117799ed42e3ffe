#!/usr/bin/env bash
# kiln serve against kiln generate on the built-in digits model (docs/benchmarks.md): one image, 25 steps, CFG.
#   scripts/serve_bench.sh [KILN_BINARY] [REQUESTS]     (default build/release/apps/kiln, 12)
# 1. kiln generate, one process per image (context, model load and planning paid every time): median wall time.
# 2. kiln serve on a free loopback port, one client: median request latency (load paid once, at start).
# 3. Throughput with 1 and 4 concurrent clients (curl), REQUESTS images each run: images per second.
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=${1:-build/release/apps/kiln}
reqs=${2:-12}
tmp=$(mktemp -d)
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
now() { date +%s.%N; }

for i in $(seq 5); do
  t0=$(now); "$kiln" generate --class-labels 3 --seed "$i" -o "$tmp/g.png" 2>/dev/null; t1=$(now)
  awk "BEGIN {print $t1 - $t0}"
done | median | xargs printf 'kiln generate, 1 image: median %.3f s (5 runs)\n'

"$kiln" serve --port 0 >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q listening "$tmp/out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$tmp/out")
url=http://127.0.0.1:$port/v1/images/generations
req() { curl -sf -o /dev/null -w '%{time_total}\n' "$url" -d "{\"prompt\":\"3\",\"seed\":$1}"; }
req 0 >/dev/null  # the first request plans the pipelines
lat=$(for i in $(seq "$reqs"); do req "$i"; done | median)
printf 'kiln serve, 1 image: median latency %.3f s (%s requests)\n' "$lat" "$reqs"

for clients in 1 4; do
  t0=$(now)
  pids=()
  for c in $(seq "$clients"); do
    (for i in $(seq $((reqs / clients))); do req $((c * 1000 + i)) >/dev/null; done) &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(now)
  awk "BEGIN {print $reqs / ($t1 - $t0)}" | xargs printf "kiln serve, $clients client(s): %.2f images/s ($reqs requests)\n"
done
