#!/usr/bin/env bash
# Install, build and train the demo GPT (configs/demo/gpt-demo.yaml) on the Gutenberg books,
# then let it write a sample (collage generate, fixed seed).
# The first run tokenises the books once into data/cache/ (cached afterwards).
# Extra arguments go to `collage train`, e.g. scripts/demo.sh --set training.max_steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if ! command -v nvcc >/dev/null && [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"  # build the cuda backend too
fi
generator=()  # Ninja for a new build directory, as scripts/test.sh
[[ ! -f build/CMakeCache.txt ]] && command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target collage
# Running the demo again starts it over (--overwrite deletes the earlier run's checkpoints),
# unless you ask to continue it: scripts/demo.sh --resume
fresh=(--overwrite)
logging_dir=runs/demo checkpoint_dir=
previous=
for arg in "$@"; do
  [[ $arg == --resume* ]] && fresh=()
  if [[ $previous == --set ]]; then
    case $arg in
      logging.dir=*) logging_dir=${arg#logging.dir=} ;;
      checkpoint.dir=*) checkpoint_dir=${arg#checkpoint.dir=} ;;
    esac
  fi
  previous=$arg
done
# A run stopped by a signal (exit 75, resumable) or an error ends the demo here (set -e).
./build/collage train configs/demo/gpt-demo.yaml "${fresh[@]}" "$@"
echo
echo "A sample from the model just trained (collage generate, seed 1234):"
./build/collage generate "${checkpoint_dir:-$logging_dir/checkpoints}" \
  --prompt "And the LORD said unto" --max-new-tokens 60 --temperature 0.8 --top-k 40 --seed 1234
