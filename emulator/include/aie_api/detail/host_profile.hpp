// SPDX-License-Identifier: MIT
// Profiling build of the host aie_api (-DAIE_HOST_PROFILE; off by default and
// then free): what a kernel call issues, per AIE2P issue-slot class, per
// software-pipelined loop, read back by the cost model
// (int4awq/kernel_cost.py) through aie_host_profile_read().
//
// Slot classes (llvm-aie AIE2PSlots.td: lda, ldb, st, vec, mv, alu, lng): MAC =
// vector MAC / matmul, LOAD = vector loads and block-stream pops (with the FIFO
// refills), STORE = vector stores and block-stream pushes (push + flush),
// SHUFFLE = transposes, interleaves, shuffles and broadcasts, CONVERT = srs /
// ups / float and block conversions, ALU = element-wise vector add / sub /
// compare, SCALAR = moves of one element between a vector register and the
// scalar unit (vextract / vinsert; an element loop's scalar loads, stores and
// address arithmetic come with them and are not seen). Counted in instructions
// of the 512-bit datapath (a 1024-bit operand counts twice); register views
// (extract, insert, concat, casts) are free. Loops: a kernel marks its
// pipelined loops with AIE_HOST_LOOP_ENTRY(_AT) / AIE_PREPARE_FOR_PIPELINING
// before the `for` (one scope per entry) or chess_prepare_for_pipelining after
// it (one per iteration); the profile keeps, per marked loop (by source line),
// its entries and what it issued. A marked loop is a rolled loop; an unmarked
// one counts as fully unrolled. Block streams: the number live at once, against
// the core's two load FIFOs and one store FIFO (AIE2PRegisterInfo.td), and
// their FIFO fills: aie_api fills a load FIFO only where the compiler can prove
// the stream's fill counter (static: one fill per 512-bit word the pops enter),
// and issues a fill with every pop otherwise (dynamic: a pop inside a rolled
// loop that the stream was opened outside of; aie2p/array_helpers.hpp,
// fifo_buffer_stream::pop, chess_manifest). Accumulators: the bits of accum and
// mmul values alive at once, against the core's five 2048-bit accumulator
// registers (AIE2PRegisterInfo.td); a value that comes alive beyond them
// spills as many bits (stored and later reloaded). C++ temporaries count while
// they live, so both are estimates of what the register allocator faces.
#pragma once

#include <cstdint>

namespace host::profile {

enum slot : unsigned { MAC, LOAD, STORE, SHUFFLE, CONVERT, ALU, SCALAR, SLOTS };

#if defined(AIE_HOST_PROFILE)
constexpr unsigned MAX_SITES = 64;

struct site {
  unsigned line;
  uint64_t entries;
  uint64_t ops[SLOTS];
  int peak_in, peak_out; // block streams live while the loop runs
  uint64_t fills_static, fills_dynamic;
  long peak_acc_bits; // accumulator bits live at once while the loop runs
  uint64_t
      acc_spill_bits;  // accumulator bits that came alive beyond the registers
  uint64_t iterations; // per-iteration scopes, or AIE_HOST_ITERATION marks
};

struct state {
  site sites[MAX_SITES];
  unsigned n_sites;
  uint64_t outside[SLOTS];
  int current = -1; // the innermost marked loop running, or -1
  int last_closed =
      -1; // the loop whose iteration just ended, while nothing has issued since
  int live_in, live_out, peak_in, peak_out;
  int rolled; // marked (rolled) loops running
  uint64_t outside_fills_static, outside_fills_dynamic;
  long live_acc_bits, peak_acc_bits;
  uint64_t outside_acc_spill_bits;
};

__attribute__((visibility("hidden"))) inline state g_state;

inline void count(slot s, unsigned n = 1) {
  state &st = g_state;
  (st.current >= 0 ? st.sites[st.current].ops : st.outside)[s] += n;
  st.last_closed = -1;
}

inline int find_site(unsigned line) {
  state &st = g_state;
  for (unsigned i = 0; i < st.n_sites; ++i)
    if (st.sites[i].line == line)
      return int(i);
  if (st.n_sites == MAX_SITES)
    return -1;
  st.sites[st.n_sites] = site{line, 0, {}, 0, 0, 0, 0, 0, 0, 0};
  return int(st.n_sites++);
}

// One scope per loop entry (per_iteration false) or per iteration (true:
// consecutive iterations of the same loop with nothing issued between them are
// one entry).
class loop {
public:
  loop(unsigned line, bool per_iteration)
      : prev_(g_state.current), site_(find_site(line)) {
    state &st = g_state;
    ++st.rolled;
    if (site_ < 0)
      return;
    site &here = st.sites[site_];
    if (!(per_iteration && st.last_closed == site_))
      ++here.entries;
    if (per_iteration)
      ++here.iterations;
    here.peak_in = here.peak_in > st.live_in ? here.peak_in : st.live_in;
    here.peak_out = here.peak_out > st.live_out ? here.peak_out : st.live_out;
    if (st.live_acc_bits > here.peak_acc_bits)
      here.peak_acc_bits = st.live_acc_bits;
    st.current = site_;
    st.last_closed = -1;
  }
  ~loop() {
    --g_state.rolled;
    if (site_ < 0)
      return;
    g_state.current = prev_;
    g_state.last_closed = site_;
  }
  explicit operator bool() const { return true; }

private:
  int prev_, site_;
};

inline void stream_opened(bool input) {
  state &st = g_state;
  int &live = input ? st.live_in : st.live_out;
  int &peak = input ? st.peak_in : st.peak_out;
  if (++live > peak)
    peak = live;
  if (st.current >= 0) {
    site &here = st.sites[st.current];
    int &p = input ? here.peak_in : here.peak_out;
    p = p > live ? p : live;
  }
}
inline void stream_closed(bool input) {
  --(input ? g_state.live_in : g_state.live_out);
}

// How many rolled loops run now: a stream remembers it when opened.
inline int rolled_depth() { return g_state.rolled; }

// A load-FIFO fill: static (placed by the compiler) or dynamic (one per pop).
inline void fill(bool dynamic, unsigned n = 1) {
  state &st = g_state;
  if (st.current >= 0)
    (dynamic ? st.sites[st.current].fills_dynamic
             : st.sites[st.current].fills_static) += n;
  else
    (dynamic ? st.outside_fills_dynamic : st.outside_fills_static) += n;
}

constexpr long ACC_REGISTER_BITS = 5 * 2048; // dm0-dm4

// An accumulator value of `bits` bits comes alive (+) or dies (-).
inline void acc_live(long bits) {
  state &st = g_state;
  if (bits > 0 && st.live_acc_bits + bits > ACC_REGISTER_BITS) {
    const long over = st.live_acc_bits + bits - ACC_REGISTER_BITS;
    const uint64_t spilled = uint64_t(over < bits ? over : bits);
    (st.current >= 0 ? st.sites[st.current].acc_spill_bits
                     : st.outside_acc_spill_bits) += spilled;
  }
  st.live_acc_bits += bits;
  if (st.live_acc_bits > st.peak_acc_bits)
    st.peak_acc_bits = st.live_acc_bits;
  if (st.current >= 0 && st.live_acc_bits > st.sites[st.current].peak_acc_bits)
    st.sites[st.current].peak_acc_bits = st.live_acc_bits;
}

// One iteration of the innermost marked loop: a statement at the top of the
// body of a loop marked before its `for` (whose scope is the whole loop), so
// that the cost model can see what one iteration issues.
inline void iteration() {
  state &st = g_state;
  if (st.current >= 0)
    ++st.sites[st.current].iterations;
}

#define AIE_HOST_LOOP_ENTRY AIE_HOST_LOOP_ENTRY_AT(__LINE__)
// A marked loop whose site the kernel numbers itself (a kernel of several
// files keeps its sites apart: file base + __LINE__).
#define AIE_HOST_LOOP_ENTRY_AT(site)                                           \
  if (::host::profile::loop aie_host_loop_{(site), false})
#define AIE_HOST_ITERATION ::host::profile::iteration()
#define AIE_HOST_LOOP_ITERATION                                                \
  if (::host::profile::loop aie_host_loop_{__LINE__, true})
#else
inline void count(slot, unsigned = 1) {}
inline void stream_opened(bool) {}
inline void stream_closed(bool) {}
inline int rolled_depth() { return 0; }
inline void fill(bool, unsigned = 1) {}
inline void acc_live(long) {}
#define AIE_HOST_LOOP_ENTRY
#define AIE_HOST_LOOP_ENTRY_AT(site)
#define AIE_HOST_LOOP_ITERATION
#define AIE_HOST_ITERATION ((void)0)
#endif

// 512-bit datapath instructions for an operand of `bits` bits.
constexpr unsigned words512(unsigned bits) { return (bits + 511) / 512; }

// A member of accum and mmul values: counts their bits as live accumulator
// bits from construction to destruction (nothing without -DAIE_HOST_PROFILE).
// Made with `view`: the value is another's register (mmul::to_accum reads the
// mmul's own accumulator; a mac writes the accumulator it reads), so it does
// not count.
struct view_t {};
inline constexpr view_t view{};
#if defined(AIE_HOST_PROFILE)
template <unsigned Bits>
struct live_acc {
  bool counted_ = true;
  live_acc() { acc_live(long(Bits)); }
  explicit live_acc(view_t) : counted_(false) {}
  live_acc(const live_acc &) { acc_live(long(Bits)); }
  live_acc &operator=(const live_acc &) { return *this; }
  ~live_acc() {
    if (counted_)
      acc_live(-long(Bits));
  }
};
#else
template <unsigned Bits>
struct live_acc {
  live_acc() = default;
  explicit live_acc(view_t) {}
};
#endif

} // namespace host::profile

#if defined(AIE_HOST_PROFILE)
// Read back by the cost model: [n_sites, then per site line, entries,
// ops[SLOTS], peak live input and output streams in the loop, static and
// dynamic fills, peak live accumulator bits, spilled accumulator bits,
// iterations (0: not marked);
// outside[SLOTS], static and dynamic fills and spilled accumulator bits outside
// loops; peak live input streams, peak live output streams, peak live
// accumulator bits of the call]; returns the number of values written.
extern "C" __attribute__((weak, visibility("default"))) unsigned
aie_host_profile_read(uint64_t *out, unsigned cap) {
  using namespace host::profile;
  const state &st = g_state;
  unsigned n = 0;
  auto put = [&](uint64_t v) {
    if (n < cap)
      out[n] = v;
    ++n;
  };
  put(st.n_sites);
  for (unsigned i = 0; i < st.n_sites; ++i) {
    put(st.sites[i].line);
    put(st.sites[i].entries);
    for (unsigned s = 0; s < SLOTS; ++s)
      put(st.sites[i].ops[s]);
    put(uint64_t(st.sites[i].peak_in));
    put(uint64_t(st.sites[i].peak_out));
    put(st.sites[i].fills_static);
    put(st.sites[i].fills_dynamic);
    put(uint64_t(st.sites[i].peak_acc_bits));
    put(st.sites[i].acc_spill_bits);
    put(st.sites[i].iterations);
  }
  for (unsigned s = 0; s < SLOTS; ++s)
    put(st.outside[s]);
  put(st.outside_fills_static);
  put(st.outside_fills_dynamic);
  put(st.outside_acc_spill_bits);
  put(uint64_t(st.peak_in));
  put(uint64_t(st.peak_out));
  put(uint64_t(st.peak_acc_bits));
  return n;
}
extern "C" __attribute__((weak, visibility("default"))) void
aie_host_profile_reset() {
  host::profile::g_state = host::profile::state{};
}
#endif
