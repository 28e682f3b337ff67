// The fixed cost a many-tensor run pays before its first chunk and beside its chunks:
// make_plan (headers, index, recipe, layouts, fingerprint), its first steps apart, and the
// output index rendered from the plan, for jobs/demo-w8a8-int8.toml on the real-count
// fixture (40 layers x 384 routed experts: ~100K source tensors; 638 tasks, small linears
// sharing them). The fixture is written once at SHARDQ_BENCH_PLAN_DIR (default
// /tmp/shardq_bench_plan/src) and kept for later runs; headers are read warm. One core's
// figure: the plan's own threads take the other.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "fixture/fixture.h"
#include "pipeline/io/index.h"
#include "pipeline/job.h"
#include "pipeline/plan.h"

namespace {

std::filesystem::path bench_dir() {
  const char* env = std::getenv("SHARDQ_BENCH_PLAN_DIR");
  return env ? env : "/tmp/shardq_bench_plan/src";
}

// The real-count fixture, unless one is there already (its index is written last).
const std::filesystem::path& ensure_fixture() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path target = bench_dir();
    if (!std::filesystem::exists(target / shardq::io::kIndexFileName)) {
      shardq::FixtureArgs args;
      args.shape = "real-count";
      args.out = target.string();
      shardq::write_fixture(args);
    }
    return target;
  }();
  return dir;
}

shardq::Job int8_job() {
  const std::string job_file = std::string(SHARDQ_SOURCE_DIR) + "/jobs/demo-w8a8-int8.toml";
  return shardq::load_job(job_file, {"job.src=\"" + ensure_fixture().string() + "\"", "job.dst=\"/tmp/shardq_bench_plan/out\""});
}

void BM_plan_int8_real_count(benchmark::State& state) {
  const shardq::Job job = int8_job();
  size_t tasks = 0;
  for (auto _ : state) {
    const shardq::Plan plan = shardq::make_plan(job, 1);
    tasks = plan.tasks().size();
  }
  state.counters["tasks"] = double(tasks);
}
BENCHMARK(BM_plan_int8_real_count)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

// The plan's first two steps on their own: the source index (read before any shard can be
// opened: the shard list comes from it), then every shard header (parsed on both cores).
void BM_read_index_real_count(benchmark::State& state) {
  const auto index_file = ensure_fixture() / shardq::io::kIndexFileName;
  size_t names = 0;
  for (auto _ : state) names = shardq::io::read_index(index_file).size();
  state.counters["names"] = double(names);
}
BENCHMARK(BM_read_index_real_count)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

void BM_checkpoint_view_real_count(benchmark::State& state) {
  size_t tensors = 0;
  for (auto _ : state) tensors = shardq::read_checkpoint_view(ensure_fixture()).tensors.size();
  state.counters["tensors"] = double(tensors);
}
BENCHMARK(BM_checkpoint_view_real_count)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

void BM_output_index_int8_real_count(benchmark::State& state) {
  const shardq::Plan plan = shardq::make_plan(int8_job(), 1);
  size_t names = 0;
  for (auto _ : state) names = shardq::output_index(plan).size();
  state.counters["names"] = double(names);
}
BENCHMARK(BM_output_index_int8_real_count)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

} // namespace
