#!/usr/bin/env bash
# Install, build and train the demo GPT (configs/demo/gpt-demo.yaml) on the Gutenberg books.
# The first run tokenises the books once into data/cache/ (cached afterwards).
# Extra arguments go to `collage train`, e.g. scripts/demo.sh --set training.max_steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if ! command -v nvcc >/dev/null && [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"  # build the cuda backend too
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target collage
# Running the demo again starts it over (--overwrite deletes the earlier run's checkpoints),
# unless you ask to continue it: scripts/demo.sh --resume
fresh=(--overwrite)
for arg in "$@"; do [[ $arg == --resume* ]] && fresh=(); done
exec ./build/collage train configs/demo/gpt-demo.yaml "${fresh[@]}" "$@"
