#!/usr/bin/env bash
# One device call runs everything (docs/gpu-runs/README.md): from the repository root, with carry [".gpu"] made by
# scripts/gpu/bundle.sh,   bash scripts/gpu/suite.sh
# and writes ONE tarball, $OUT/kiln-gpu-run.tar.xz, with every log. Its stages, in this order, each under a time limit
# drawn from what is left of $BUDGET seconds (default 450, inside the 8 minutes one call should take):
#   info     rt/bin/vulkaninfo (text: memory types and heaps; --json: the Vulkan profile: properties, features,
#            extensions, formats), nvidia-smi, kiln devices
#   tests    every packed test executable at once, validation on (KILN_VALIDATION=1), each spawned kiln through rt/run
#            (KILN_TEST_RUNNER); tests.txt has one line each
#   kernels  kiln bench --kernels: the linear kernel table of this device
#   bench    PyTorch's side (../shared/gpu-peer/bench_torch.py with diffusers, when bundle.sh --diffusers packed it), then
#            kiln bench --mode all, on $ARCH (default dit-xl-2-256), in the same call so both share the card's clocks
#   kernels  also f16 kernels on q8_0 and q4_k weights (cooperative matrices dequantize them since 2026-11-28), and
#            f16 at DiT-XL/2's own linear shapes (M = 512: the split-K kernels' case) and one of SD3's (8192 rows)
#   variants the attention op alone per kernel (test_ops "attention throughput": flash, coopmat, coopmat4, rows on
#            DiT-XL/2-256's, Gemma-2's and SD3-1024's shapes, the last also with f16 q/k/v), then kiln bench on $ARCH in regional mode, 3 steps, once per
#            attention kernel (KILN_ATTENTION=coopmat4, coopmat, flash, rows), per forced linear kernel
#            (KILN_LINEAR=coopmat, coopmat_sk, gemm, smem64, reg), with one f16 per cooperative-matrix operand (KILN_PRECISION=fast,
#            first) and with f16 activations (KILN_ACT_F16=1), then the VK_NV_cooperative_matrix2 linear, which takes x
#            stored f16 only: KILN_ACT_F16=1+KILN_LINEAR=coopmat2 (a variant joins several VAR=value with '+' or ',')
#   stream   (only when STAGES names it) the streaming tests on the transfer-only queue, kiln bench --stream (#12)
# Here: bash scripts/gpu/suite.sh --ci  runs the same set-up and stages on this machine's lavapipe (Debian 12's 22.3)
# with short limits: each test executable on a few quick test cases, the kernel table at one shape, kiln bench on
# dit-tiny, no PyTorch. CI runs it, so a set-up that fails does so here, not on a lent device.
# Env: STAGES ("info tests kernels bench variants"), BUDGET, ARCH (a list: bench runs each, variants the first),
# BENCH_STEPS, TESTS (executables, e.g. "jit models"),
# TEST_FILTERS ("jit=[stream];ops=[coopmat]": a Catch2 test spec per executable), VARIANTS (the variants stage's
# list, space-separated VAR=value[+VAR=value]), TORCH_MODES.
set -uo pipefail
ci=0
[ "${1:-}" = "--ci" ] && ci=1
root=$(pwd)
[ -f .gpu/kiln.tar.xz ] || { echo "suite: no .gpu/kiln.tar.xz: run scripts/gpu/bundle.sh and carry .gpu" >&2; exit 1; }
t0=$(date +%s)
budget=${BUDGET:-$([ $ci = 1 ] && echo 420 || echo 450)}
left() { echo $((budget - ($(date +%s) - t0))); }
lim() { local l=$(($(left) - ${2:-15})); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l : 5)); }  # WANT [RESERVE]
work=${SUITE_WORK:-/tmp/kiln-gpu}
o="$work/out"
rm -rf "$work" && mkdir -p "$o"
log() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$o/suite.log"; }
finish() {
  local dest=${OUT:-$root/gpu-out}
  mkdir -p "$dest"
  # The device's measured kernel tables (linear and attention: what auto picked and why), beside the logs.
  for f in "$work"/cache/linear-*.txt "$work"/cache/attention-*.txt; do [ -f "$f" ] && cp "$f" "$o/"; done
  tar -C "$work" -cf - out | xz -6 -T0 > "$dest/kiln-gpu-run.tar.xz"
  log "wrote $dest/kiln-gpu-run.tar.xz ($(du -h "$dest/kiln-gpu-run.tar.xz" | cut -f1))"
}

# --- set-up: the binaries and rt/ ---------------------------------------------------------------------------------------
# There, the copy of the tree is the build tree: kiln.tar.xz unpacks into it (build/release, rt). Here (--ci) the checkout
# is the real build tree: it unpacks into a folder that links the tree's top-level entries instead.
if [ $ci = 1 ]; then
  tree="$work/tree"
  mkdir -p "$tree"
  for e in "$root"/* ; do [ "$(basename "$e")" = build ] || ln -s "$e" "$tree/"; done
else
  tree="$root"
fi
xz -dc .gpu/kiln.tar.xz | tar -C "$tree" -xf - || { log "FAILED: unpacking .gpu/kiln.tar.xz"; finish; exit 1; }
built=$(cat .gpu/built_in)  # the binaries name tests/data and build/release by the path they were built in
if [ "$built" != "$tree" ] && [ ! -e "$built" ]; then mkdir -p "$(dirname "$built")" && ln -s "$tree" "$built"; fi
rt="$tree/rt"
run="$rt/run"
bin="$tree/build/release"
export KILN_TEST_RUNNER="$run" KILN_TEST_DATA="$tree/tests/data" KILN_CACHE_DIR="$work/cache"
unset VK_DRIVER_FILES VK_ADD_DRIVER_FILES  # the driver through VK_ICD_FILENAMES, which tests override to hide it
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ $ci = 1 ]; then
  export VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
elif [ -f "$icd" ]; then
  export VK_ICD_FILENAMES="$icd"
fi
# The built-in model, as apps/CMakeLists.txt makes it (the bundle packs kiln-convert with test_apps, its only reader,
# not the 6 MiB file).
[ -f "$bin/dit-digits.kiln" ] || [ ! -x "$bin/apps/kiln-convert" ] ||
  "$run" "$bin/apps/kiln-convert" models/default/dit-digits -o "$bin/dit-digits.kiln" --dtype f16 --quiet
kiln() { "$run" "$bin/apps/kiln" "$@"; }
log "set-up done: $(head -n1 "$tree/MANIFEST" >/dev/null && wc -l < "$tree/MANIFEST") packed files, driver ${VK_ICD_FILENAMES:-found by the loader}"
if ! kiln devices > "$o/devices.txt" 2>&1 && [ $ci = 0 ]; then
  # Not seen on a device so far; the device README's own recipe, then again: its GL libraries into /, ldconfig.
  log "kiln devices failed: $(tail -n1 "$o/devices.txt"); trying the NVIDIA library folders and ldconfig"
  export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:/usr/local/nvidia/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ldconfig 2>/dev/null
  kiln devices > "$o/devices.txt" 2>&1
fi
cat "$o/devices.txt"

stages=${STAGES:-info tests kernels bench variants}
for st in $stages; do
  [ "$(left)" -lt 20 ] && { log "skip $st: no time left"; continue; }
  case $st in
    info)
      (cd "$o" && timeout "$(lim 60)" "$run" "$rt/bin/vulkaninfo" --json > /dev/null 2> vulkaninfo-json.err)
      timeout "$(lim 60)" "$run" "$rt/bin/vulkaninfo" > "$o/vulkaninfo.txt" 2>&1
      log "vulkaninfo rc=$? ($(ls "$o"/VP_VULKANINFO_*.json 2>/dev/null | wc -l) profile); $(grep -m1 deviceName "$o/vulkaninfo.txt" | tr -s ' \t' ' ')"
      { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true; } > "$o/gpu.txt" 2>&1
      ;;
    tests)
      declare -A filt=()
      if [ $ci = 1 ]; then  # a few quick test cases each: the set-up, not the suite (ctest runs that)
        filt=([core]="[settings]" [ir]="[ir]" [converter]="[gguf]" [layouts]="[lora]" [schedulers]="[sana]"
          [text]="[clip_tokenizer]" [ops]="[op:softmax]" [jit]="[pipeline_cache]" [models]="[dit]"
          [apps]="[vulkan_loader],[text]")  # apps: kiln spawned through rt/run, ICU's data through the tokenizers
      fi
      # TEST_FILTERS="jit=[stream],[window];models=[flux]": a Catch2 test spec per executable (e.g. only the cases
      # that failed on the last run, or a new kernel's), to spend the call's minutes on what is unknown.
      IFS=';' read -ra tfs <<< "${TEST_FILTERS:-}"
      for tf in "${tfs[@]}"; do [ -n "$tf" ] && filt[${tf%%=*}]=${tf#*=}; done
      tl=$(lim $([ $ci = 1 ] && echo 150 || echo 300) 150)
      log "tests: ${TESTS:-all packed}, validation on, ${tl} s each at most"
      for t in ${TESTS:-core ir converter layouts schedulers text ops jit models apps}; do
        [ -x "$bin/tests/test_$t" ] || continue
        ( cd "$bin/tests" && KILN_VALIDATION=1 timeout "$tl" "$run" "./test_$t" ${filt[$t]:+"${filt[$t]}"} \
            > "$o/test_$t.log" 2>&1
          echo "test_$t rc=$? $(tail -n 2 "$o/test_$t.log" | tr -s '\n' ' ')" >> "$o/tests.txt" ) &
      done
      wait
      sort -o "$o/tests.txt" "$o/tests.txt"
      log "tests done"
      cat "$o/tests.txt"
      ;;
    kernels)
      if [ $ci = 1 ]; then ka=(--shape 2x64x64 --kernel-dtypes f16); else ka=(); fi
      timeout "$(lim $([ $ci = 1 ] && echo 90 || echo 60))" "$run" "$bin/apps/kiln" bench --kernels "${ka[@]}" \
        > "$o/kernels.txt" 2>&1
      log "kernels rc=$?"
      cat "$o/kernels.txt"
      if [ $ci = 0 ]; then  # the quantized rows (not written to the table file: bench measures what it needs)
        timeout "$(lim 40)" "$run" "$bin/apps/kiln" bench --kernels --kernel-dtypes q8_0,q4_k > "$o/kernels-quant.txt" 2>&1
        log "kernels quant rc=$?"
        cat "$o/kernels-quant.txt"
        # DiT-XL/2-256's linears (M = 2 x 256 tokens): 144 tiles of 64 x 64 for 132 SMs, where split-K should help;
        # and SD3-medium-1024's (M = 2 x 4096 image tokens, 38.7 GFLOP): a GEMM large enough to show its throughput
        timeout "$(lim 50)" "$run" "$bin/apps/kiln" bench --kernels --kernel-dtypes f16 --shape 512x1152x1152 \
          --shape 512x1152x4608 --shape 8192x1536x1536 > "$o/kernels-dit.txt" 2>&1
        log "kernels dit rc=$?"
        cat "$o/kernels-dit.txt"
      fi
      ;;
    bench)  # per arch of ARCH (a list; the variants stage takes the first)
      for arch in ${ARCH:-$([ $ci = 1 ] && echo dit-tiny || echo dit-xl-2-256)}; do
        if [ $ci = 0 ] && [ -f .gpu/peer.tar.xz ]; then
          [ -d "$work/peer" ] || { mkdir -p "$work/peer" && xz -dc .gpu/peer.tar.xz | tar -C "$work/peer" -xf -; }
          (cd "$work/peer" && PYTHONPATH="$work/peer" timeout "$(lim 200 60)" python3 bench_torch.py --arch "$arch" \
             --modes "${TORCH_MODES:-eager,regional,cudagraphs}" --iters 20 > "$o/torch-$arch.jsonl" 2> "$o/torch-$arch.err")
          log "bench_torch $arch rc=$?"
          cat "$o/torch-$arch.jsonl"
        fi
        steps=${BENCH_STEPS:-$([ $ci = 1 ] && echo 1 || echo 10)}
        timeout "$(lim 120 5)" "$run" "$bin/apps/kiln" bench --synthetic "$arch" --mode all --steps "$steps" --warmup 1 \
          --json "$o/kiln-$arch.json" > "$o/kiln-$arch.txt" 2>&1
        log "kiln bench $arch rc=$?"
        tail -n 12 "$o/kiln-$arch.txt"
      done
      ;;
    variants)  # one regional step time per forced kernel (each line: the variable, then kiln bench's regional row)
      arch=${ARCH:-$([ $ci = 1 ] && echo dit-tiny || echo dit-xl-2-256)}
      arch=${arch%% *}
      steps=$([ $ci = 1 ] && echo 1 || echo 3)  # 3: the 2026-11-28 run fitted 2 of 7 rows at 10 steps
      if [ $ci = 0 ] && [ -x "$bin/tests/test_ops" ]; then  # the op alone, each kernel: attention-ops.txt
        (cd "$bin/tests" && timeout "$(lim 50)" "$run" ./test_ops "attention throughput" > "$o/attention-ops.txt" 2>&1)
        log "attention throughput rc=$?"
        grep '^attention' "$o/attention-ops.txt"
      fi
      vs="KILN_ATTENTION=coopmat4 KILN_ATTENTION=coopmat KILN_ATTENTION=flash KILN_ATTENTION=rows"
      vs="$vs KILN_LINEAR=coopmat KILN_LINEAR=coopmat_sk KILN_LINEAR=gemm"
      vs="KILN_PRECISION=fast KILN_LEVEL_ORDER=0 $vs KILN_LINEAR=smem64 KILN_LINEAR=reg KILN_ACT_F16=1"
      vs="$vs KILN_ACT_F16=1+KILN_LINEAR=coopmat2"  # coopmat2 takes x stored f16 only
      [ $ci = 1 ] && vs="KILN_ATTENTION=rows KILN_LINEAR=coopmat"  # here: one that runs, one that is refused
      vs=${VARIANTS:-$vs}  # VARIANTS="A=x B=y,C=z": these, in this order (commas join variables in one variant)
      for v in $vs; do
        [ "$(left)" -lt 30 ] && { log "variants: no time left at $v"; break; }
        # shellcheck disable=SC2046  # "A=x+B=y" or "A=x,B=y": two assignments (values without spaces)
        r=$(env $(printf '%s' "$v" | tr '+,' '  ') timeout "$(lim 30)" "$run" "$bin/apps/kiln" bench --synthetic "$arch" --mode regional \
              --steps "$steps" --warmup 1 2>&1 | grep -E '^(regional|error|kiln: error)' | head -n 2 | tr -s ' \n' ' ')
        echo "$v $r" | tee -a "$o/variants.txt"
      done
      log "variants done"
      ;;
    stream)  # not in the default stages: the streaming tests with ring copies on the transfer-only queue family
      # (KILN_TRANSFER_QUEUE=1), then kiln bench --stream on DiT-XL/2-256 with --transfer-queue 0 against 1
      for t in jit models; do
        ( cd "$bin/tests" && KILN_VALIDATION=1 KILN_TRANSFER_QUEUE=1 timeout "$(lim 120)" "$run" "./test_$t" "[stream]" \
            > "$o/test_${t}_transfer.log" 2>&1
          echo "test_${t}_transfer rc=$? $(tail -n 2 "$o/test_${t}_transfer.log" | tr -s '\n' ' ')" >> "$o/tests.txt" )
      done
      for q in 0 1; do
        timeout "$(lim 60)" "$run" "$bin/apps/kiln" bench --synthetic dit-xl-2-256 --mode none --stream --vram-budget 1G \
          --transfer-queue "$q" --steps 5 --json "$o/stream-tq$q.json" > "$o/stream-tq$q.txt" 2>&1
        log "stream --transfer-queue $q rc=$?"
      done
      ;;
    *) log "unknown stage $st" ;;
  esac
done
fails=$(grep -vc ' rc=0 ' "$o/tests.txt" 2>/dev/null)
log "summary: $(grep -c . "$o/tests.txt" 2>/dev/null || echo 0) test executables, ${fails:-0} failed"
finish
# Here, the suite must work end to end: every executable passes its quick cases, kiln benches.
if [ $ci = 1 ]; then
  [ "${fails:-1}" = 0 ] && grep -q ' rc=0 ' "$o/tests.txt" && ! grep -q 'No tests ran' "$o/tests.txt" &&
    grep -q 'kiln bench .* rc=0' "$o/suite.log" && grep -q 'kernels rc=0' "$o/suite.log" &&
    grep -q 'vulkaninfo rc=0' "$o/suite.log" || { echo "suite: FAILED here (see above)" >&2; exit 1; }
fi
