#!/usr/bin/env bash
# The structural measures of issue #29, on the product code (apps lib models runtime converter include):
#  1. each family's diffusers class names appear in at most 2 product files (the families DiT, PixArt, SD3, Flux;
#     the components they share, VAE, CLIP and T5, are reported);
#  2. getenv appears in at most 2 product files;
#  3. runtime/ has no guidance, CFG or scheduler code;
#  4. README.md is at most 300 lines;
#  5. no product function is over 150 lines (universal-ctags' function extents; lambdas count as functions).
# Prints each measure and exits 1 when one is not met.
set -uo pipefail
cd "$(dirname "$0")/.."
P="apps lib models runtime converter include"
inc=(--include=*.cpp --include=*.h --include=*.c)
bad=0
declare -A family=(
  [DiT]="DiTPipeline DiTTransformer2DModel"
  [PixArt]="PixArtAlphaPipeline PixArtSigmaPipeline PixArtTransformer2DModel"
  [SD3]="StableDiffusion3Pipeline SD3Transformer2DModel"
  [Flux]="FluxPipeline FluxTransformer2DModel"
  [VAE]="AutoencoderKL"
  [CLIP]="CLIPTextModel CLIPTextModelWithProjection CLIPTokenizer CLIPTokenizerFast"
  [T5]="T5EncoderModel T5Tokenizer T5TokenizerFast")
echo "1. diffusers class names per family (files; at most 2; the shared components VAE, CLIP, T5 reported):"
# models/layouts/published_configs.cpp is the text of the published models' config files (data, not code).
for f in DiT PixArt SD3 Flux VAE CLIP T5; do
  files=$(for c in ${family[$f]}; do grep -rlw "$c" $P "${inc[@]}" --exclude=published_configs.cpp; done | sort -u)
  n=$(printf '%s' "$files" | grep -c .)
  echo "   $f: $n  $(echo $files)"
  case $f in VAE|CLIP|T5) ;; *) [ "$n" -le 2 ] || bad=1 ;; esac
done
files=$(grep -rl getenv $P "${inc[@]}")
n=$(printf '%s' "$files" | grep -c .)
echo "2. files calling getenv: $n (at most 2)  $(echo $files)"
[ "$n" -le 2 ] || bad=1
hits=$(grep -rniE 'guidance|cfg|schedul|denois' runtime | wc -l)
echo "3. runtime/ lines naming guidance, CFG, schedulers or denoising: $hits (0)"
grep -rniE 'guidance|cfg|schedul|denois' runtime | head -5 | sed 's/^/     /'
[ "$hits" -eq 0 ] || bad=1
n=$(wc -l < README.md)
echo "4. README.md lines: $n (at most 300)"
[ "$n" -le 300 ] || bad=1
long=$(ctags -R --c++-kinds=fp --fields=+ne --languages=C++ -o - $P 2>/dev/null |
  awk -F'\t' '{l="";e="";for(i=4;i<=NF;i++){if($i~/^line:/)l=substr($i,6);if($i~/^end:/)e=substr($i,5)}
              if(l!=""&&e!=""&&e-l+1>150)print e-l+1, $1, $2}' | sort -rn)
n=$(printf '%s' "$long" | grep -c .)
echo "5. product functions over 150 lines: $n (0)"
[ -n "$long" ] && echo "$long" | sed 's/^/     /'
[ "$n" -eq 0 ] || bad=1
exit $bad
