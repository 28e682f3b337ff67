// Reader::read_rows streaming one 1 GiB tensor in 64 MiB (and 1 MiB) chunks vs `cat FILE > /dev/null`
// on the same file: the reader should run at the speed of the page cache / disk, i.e. a
// ratio near 1. The file (one U8 [4194304, 256] tensor, written with Writer) is created
// once at SHARDQ_BENCH_READER_FILE (default /tmp/shardq_bench_reader.safetensors) and kept
// for later runs; both benchmarks read it warm (dropping caches needs privileges).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "pipeline/io/safetensors.h"

namespace {

constexpr uint64_t kRowBytes = 256;
constexpr uint64_t kRows = (uint64_t(1) << 30) / kRowBytes;
constexpr uint64_t kChunkRows = (uint64_t(64) << 20) / kRowBytes;

std::filesystem::path bench_file() {
  const char* env = std::getenv("SHARDQ_BENCH_READER_FILE");
  return env ? env : "/tmp/shardq_bench_reader.safetensors";
}

// Writes the file unless a valid one of the right shape is already there.
const std::filesystem::path& ensure_bench_file() {
  static const std::filesystem::path path = [] {
    const std::filesystem::path target = bench_file();
    try {
      shardq::io::Reader existing(target);
      const auto* t = existing.find("data");
      if (t && t->rows() == kRows && t->row_bytes() == kRowBytes) return target;
    } catch (const shardq::io::IoError&) {
    }
    shardq::io::Writer writer(target, {{"data", shardq::io::Dtype::U8, {kRows, kRowBytes}}});
    writer.open(false);
    std::vector<uint8_t> chunk(kChunkRows * kRowBytes);
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = uint8_t(i * 131 + 7);
    for (uint64_t row = 0; row < kRows; row += kChunkRows) writer.write_rows(writer.tensor("data"), row, chunk);
    writer.finish();
    return target;
  }();
  return path;
}

// Arg: chunk size in MiB. 64 MiB is what the pipeline reads; 1 MiB fits in cache like
// cat's 128 KiB buffer, which separates the Reader's overhead from DRAM write traffic.
void BM_reader_read_rows(benchmark::State& state) {
  const shardq::io::Reader reader(ensure_bench_file());
  const shardq::io::TensorInfo& tensor = reader.tensor("data");
  const uint64_t chunk_rows = (uint64_t(state.range(0)) << 20) / kRowBytes;
  std::vector<uint8_t> chunk(chunk_rows * kRowBytes);
  for (auto _ : state) {
    for (uint64_t row = 0; row < kRows; row += chunk_rows) reader.read_rows(tensor, row, chunk_rows, chunk);
    benchmark::DoNotOptimize(chunk.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kRows * kRowBytes));
}
BENCHMARK(BM_reader_read_rows)->Arg(64)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_cat_file(benchmark::State& state) {
  const std::string command = "cat '" + ensure_bench_file().string() + "' > /dev/null";
  for (auto _ : state) {
    if (std::system(command.c_str()) != 0) state.SkipWithError("cat failed");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(std::filesystem::file_size(ensure_bench_file())));
}
BENCHMARK(BM_cat_file)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace
