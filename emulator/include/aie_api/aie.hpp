// SPDX-License-Identifier: MIT
// Host (x86-64) implementation of the subset of AMD's aie_api that this
// project's kernels use, with AIE2P (__AIE_ARCH__ == 21) semantics, so the same
// kernel source builds with g++ for the CPU emulator. Header-only C++20;
// include as <aie_api/aie.hpp> with -I emulator/include.
//
// What is modelled and how is listed in docs/kernel.md#host-aie_api. Anything
// outside the subset, or outside what AIE2P has, fails at compile time with a
// static_assert that says so.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "the host aie_api needs C++20 (-std=c++20)"
#endif

#include "detail/host_scalar.hpp"
#include "detail/host_vector.hpp"
#include "detail/host_ops.hpp"
#include "detail/host_mmul.hpp"
#include "detail/host_block.hpp"
#include "detail/host_intrinsics.hpp"
