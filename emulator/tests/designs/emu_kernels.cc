// SPDX-License-Identifier: MIT
// Tiny host kernels for the emulator's own tests (built by
// tests/test_emulator*.py with g++). Sizes are fixed per symbol, as an AIE
// kernel's would be by its -D macros.
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t f32_to_bf16(float f) { // round to nearest even
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

extern "C" {

// c[i] = a[i] + b[i] for 256 bf16 values.
void add_bf16_256(const uint16_t *a, const uint16_t *b, uint16_t *c) {
  for (int i = 0; i < 256; i++)
    c[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

// p[i] = v for 16 int32 values (a scalar argument).
void fill_i32_16(int32_t *p, int32_t v) {
  for (int i = 0; i < 16; i++)
    p[i] = v;
}

// p[i] = v for n int32 values (host/generated_designs.py's `call` buffers).
void fill_i32(int32_t *p, int32_t n, int32_t v) {
  for (int i = 0; i < n; i++)
    p[i] = v;
}

// p[i] += 1 for 64 int32 values.
void inc_i32_64(int32_t *p) {
  for (int i = 0; i < 64; i++)
    p[i] += 1;
}

// Writes one element past a 64-float buffer: the emulator must catch it.
void overrun_f32_64(float *p) {
  for (int i = 0; i <= 64; i++)
    p[i] = 0.f;
}

// Do nothing: the interpreter-overhead benchmark.
void noop1(void *a) { (void)a; }
void noop3(void *a, void *b, void *c) {
  (void)a;
  (void)b;
  (void)c;
}
}
