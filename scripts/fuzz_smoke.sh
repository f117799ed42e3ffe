#!/usr/bin/env bash
# Runs each libFuzzer target of the fuzz preset for a fixed time on its seed corpus (CI's fuzz smoke).
#   scripts/fuzz_smoke.sh [SECONDS]     (default 20; after `cmake --preset fuzz && cmake --build --preset fuzz`)
# A crash, leak, timeout or sanitizer report fails the run; the input that caused it is printed in hex.
# For the long runs the README quotes: build/fuzz/converter/fuzz_gguf -runs=1000000 /tmp/c converter/fuzz/corpus/gguf
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
b=build/fuzz
fail=0
for t in converter/fuzz_safetensors converter/fuzz_gguf converter/fuzz_layouts models/fuzz_t5_tokenizer \
         models/fuzz_clip_tokenizer converter/fuzz_serve_request; do
  name=${t#*/fuzz_}
  work=$(mktemp -d)  # new units go here, not into the committed corpus
  mkdir -p "$work/corpus" "$work/crash"
  seeds=(converter/fuzz/corpus/$name)
  if [ "$name" = layouts ]; then  # real single files as seeds: Flux GGUF (Q8_0), BFL Flux, LDM VAE, CLIP, T5
    seeds=(converter/fuzz/corpus/gguf converter/fuzz/corpus/safetensors)
    cp tests/data/fixtures/flux_pipeline_singlefile/flux1-tiny-Q8_0.gguf "$work/corpus/"
    # the safetensors ones are not committed: the tests make them from the diffusers folder into the build tree
    for f in flux1-tiny.safetensors ae.safetensors clip_l.safetensors t5xxl.safetensors; do
      for d in build/*/test-data/flux_pipeline_singlefile; do [ -f "$d/$f" ] && { cp "$d/$f" "$work/corpus/"; break; }; done
    done
  fi
  [ "$name" = t5_tokenizer ] && cp tests/data/fixtures/tok_t5/spiece.model "$work/corpus/"  # a real model as seed
  if "$b/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$work/crash/" "$work/corpus" "${seeds[@]}" >"$work/log" 2>&1; then
    echo "fuzz_$name: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$') runs in ${secs} s, no crash"
  else
    fail=1
    echo "fuzz_$name: FAILED"
    tail -40 "$work/log"
    for f in "$work"/crash/*; do [ -f "$f" ] && { echo "input $f:"; od -A x -t x1z "$f" | head -64; }; done
  fi
  rm -rf "$work"
done
exit $fail
