#!/usr/bin/env bash
# The AVX-512 compilation of the cpu backend (the optimizer's element loop and its gradient norm,
# and the lane kernels of src/backend/cpu/lane_kernels.h) must define no name that another
# translation unit also defines (src/numerics/isa_namespace.h says
# why: the linker would keep one copy, perhaps the AVX-512 one, for every caller). So every
# global or weak symbol of its objects must name an entity of namespace collage::cpu::avx512
# or collage::math::avx512 (a mangled name that mentions one cannot collide with a baseline
# name), except the C++ personality routine's data reference, which is the same bytes in every
# object.
# Usage: isa_object_test.sh OBJECT...
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 OBJECT..." >&2; exit 2; }

symbols=$(nm --defined-only "$@" | awk 'NF == 3 && $2 ~ /^([A-Z]|[uvwi])$/ { print $3 }')
if ! grep -q '^_ZN7collage3cpu6avx51211step_chunks' <<<"$symbols"; then
  echo "FAIL: no collage::cpu::avx512::step_chunks in $* (not the AVX-512 object?)" >&2
  exit 1
fi
foreign=$(grep -v -E '7collage(3cpu|4math)6avx512|^DW\.ref\.__gxx_personality_v0$' \
  <<<"$symbols" || true)
if [[ -n "$foreign" ]]; then
  echo "FAIL: the AVX-512 object defines names outside namespace avx512; another object may" >&2
  echo "define them too, and the linker could hand AVX-512 code to every caller:" >&2
  c++filt <<<"$foreign" | sed 's/^/  /' >&2
  exit 1
fi
echo "ok: $(wc -l <<<"$symbols") global or weak symbols, all in namespace avx512"
