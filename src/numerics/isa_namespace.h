#pragma once
// The inline namespace every header of src/numerics puts its collage::math code in.
//
// Why: the cpu optimizer's element loop is one source compiled twice, for the build's baseline
// ISA and once more for AVX-512 (src/backend/cpu/optimizer_chunks.cpp, chosen at run time;
// docs/ARCHITECTURE.md, "The cpu optimizer"). Both compilations instantiate the same inline
// functions of these headers (rn, grow, step_bf16<...>), and where the compiler keeps one out
// of line it emits a weak copy that the linker merges with the other translation units' copies
// of the same name, keeping any one of them. An AVX-512 copy kept for every caller would stop
// the program with SIGILL on an AVX2-only CPU. The AVX-512 compilation therefore defines
// COLLAGE_ISA_NAMESPACE=avx512 (CMakeLists.txt), so its copies have names of their own:
// collage::math::avx512::rn instead of collage::math::baseline::rn. Code that includes the
// headers still writes collage::math::rn; the inline namespace is invisible to it.
// tests/optim/isa_object_test.sh checks the AVX-512 objects for weak names outside it. The cpu
// backend's lane kernels (src/backend/cpu/lane_kernels.h) are compiled twice the same way.
#ifndef COLLAGE_ISA_NAMESPACE
#define COLLAGE_ISA_NAMESPACE baseline
#endif
