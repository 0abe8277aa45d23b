// SPDX-License-Identifier: MIT
// Stands in for mlir-aie's aie_kernel_utils.h (the same name, found first on
// the include path) in the host aie_api's profiling build of an upstream kernel
// (host/calibrate_kernels.py). Upstream's host branch makes every loop
// annotation nothing, so a kernel's pipelined loops would count as
// straight-line code; here a loop marked for the (post-)pipeliner opens a
// profiled loop scope, as our kernel's AIE_LOOP_MIN_ITERATION_COUNT does. The
// other annotations steer Peano only.
#pragma once
#include <aie_api/aie.hpp>

#define AIE_PREPARE_FOR_PIPELINING AIE_HOST_LOOP_ENTRY
#define AIE_PREPARE_FOR_POSTPIPELINING AIE_HOST_LOOP_ENTRY
#define AIE_LOOP_UNROLL(x)
#define AIE_LOOP_UNROLL_FULL
#define AIE_LOOP_NO_UNROLL
#define AIE_LOOP_MIN_ITERATION_COUNT(x)
#define AIE_LOOP_MAX_ITERATION_COUNT(x)
#define AIE_LOOP_RANGE(a, ...)
#define AIE_NO_PREPARE_FOR_PIPELINING
#define AIE_MODULO_SCHEDULING_BUDGET_RATIO(x)
#define AIE_KEEP_SW_LOOP
#define AIE_PEEL_PIPELINED_LOOP(x)
#define AIE_KEEP_FREE_FOR_PIPELINING(x)
#define AIE_ALLOCATE(x)
#define AIE_NO_HW_LOOP
#define AIE_TRY_INITIATION_INTERVAL(x)
#define AIE_LOOP_FLATTEN
#define AIE_LOOP_HINT(k, v)
#define AIE_LOOP_GPR_REALLOC
