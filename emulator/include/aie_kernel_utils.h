// SPDX-License-Identifier: MIT
// Host stand-in for mlir-aie's aie_kernel_utils.h (installed with mlir-aie's
// headers, include/aie_kernels/): the same macro names, so a kernel that uses
// them builds on the host aie_api (-I emulator/include). Under Peano they are
// clang loop pragmas that steer scheduling; here they do nothing, except that
// a loop given a trip-count hint (AIE_LOOP_MIN_ITERATION_COUNT) counts as a
// software-pipelined loop in the host aie_api's profiling build (empty without
// -DAIE_HOST_PROFILE). Its profile site is AIE_HOST_LOOP_SITE: the loop's line,
// unless the build numbers sites itself (kernels/host_hooks.h). Only the loop
// annotations: upstream's VERSIONED_LOOP helper is not here (no kernel of
// ours uses it).
#pragma once

#include <aie_api/aie.hpp>

#ifndef AIE_HOST_LOOP_SITE
#define AIE_HOST_LOOP_SITE __LINE__
#endif

#define AIE_LOOP_MIN_ITERATION_COUNT(n)                                        \
  AIE_HOST_LOOP_ENTRY_AT(AIE_HOST_LOOP_SITE)
#define AIE_LOOP_MAX_ITERATION_COUNT(n)
#define AIE_LOOP_RANGE(lo, ...)
#define AIE_LOOP_UNROLL(n)
#define AIE_LOOP_UNROLL_FULL
#define AIE_LOOP_NO_UNROLL
#define AIE_LOOP_FLATTEN
#define AIE_LOOP_HINT(key, value)
#define AIE_LOOP_GPR_REALLOC
#define AIE_PREPARE_FOR_PIPELINING
#define AIE_NO_PREPARE_FOR_PIPELINING
#define AIE_PREPARE_FOR_POSTPIPELINING
#define AIE_TRY_INITIATION_INTERVAL(n)
#define AIE_MODULO_SCHEDULING_BUDGET_RATIO(n)
#define AIE_KEEP_SW_LOOP
#define AIE_PEEL_PIPELINED_LOOP(n)
#define AIE_KEEP_FREE_FOR_PIPELINING(n)
#define AIE_ALLOCATE(n)
#define AIE_NO_HW_LOOP
