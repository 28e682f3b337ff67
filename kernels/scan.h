// Whole-buffer scans of source codes, run on every chunk before it is decoded: a NaN
// anywhere is refused with its row and column (stages/source_rows.cpp finds which), so the
// common case, no NaN, must cost little next to the decode itself.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardq {

// Whether any of the n bytes is an E4M3 NaN code (E4M3::is_nan). The scalar truth.
bool any_e4m3_nan_ref(const uint8_t* codes, size_t n);

// Same answer, Highway SIMD with runtime dispatch (kernels/cpu/scan_simd.cpp).
bool any_e4m3_nan_simd(const uint8_t* codes, size_t n);

} // namespace shardq
