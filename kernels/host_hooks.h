// SPDX-License-Identifier: MIT
// Host build only (kernels/Makefile passes it with -include): the profiling
// hooks the kernel's device source leaves out. The source marks its
// software-pipelined loops with AIE_LOOP_MIN_ITERATION_COUNT and their first
// statement with KERNEL_ITERATION; here those become the host aie_api's
// profiling scopes (empty without -DAIE_HOST_PROFILE).
#pragma once

#include <aie_api/aie.hpp>

namespace kernel_host {

constexpr bool ends_with(const char *s, const char *tail) {
  unsigned n = 0, m = 0;
  while (s[n])
    ++n;
  while (tail[m])
    ++m;
  if (m > n)
    return false;
  for (unsigned i = 0; i < m; ++i)
    if (s[n - m + i] != tail[i])
      return false;
  return true;
}

// A loop's profile site: its file's index in
// int4awq/design/kernel_profile.py KERNEL_FILES times SITE_BASE, plus its line,
// so that the header's loops and each entry file's stay apart.
constexpr unsigned SITE_BASE = 100000;
constexpr unsigned site(const char *file, unsigned line) {
  return (ends_with(file, "mv_int4_bf16.cc")   ? 2 * SITE_BASE
          : ends_with(file, "mm_int4_bf16.cc") ? SITE_BASE
                                               : 0) +
         line;
}

} // namespace kernel_host

// Read by emulator/include/aie_kernel_utils.h's AIE_LOOP_MIN_ITERATION_COUNT.
#define AIE_HOST_LOOP_SITE ::kernel_host::site(__FILE__, __LINE__)
// One iteration of the marked loop, for the profile.
#define KERNEL_ITERATION AIE_HOST_ITERATION
