// The size of a chunk's message to the rank that writes its shard, and the plan-time
// refusal of a rows_per_chunk whose messages MPI could not carry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline/pipeline_error.h"
#include "pipeline/work.h"
#include "stages/recipes/recipe.h"

namespace shardq {
namespace {

// An Engram table to NVFP4 as the recipe plans it: [rows, 256] -> U8 [rows, 128] codes and
// F8_E4M3 [rows, 16] block scales, 144 bytes a row.
Task engram_task(uint64_t rows, uint64_t rows_per_chunk) {
  Task task;
  task.name = "layers.1.engram.embed";
  task.rows = rows;
  task.cols = 256;
  task.rows_per_chunk = rows_per_chunk;
  task.outputs = {{"layers.1.engram.embed.weight", Dtype::U8, {rows, 128}},
                  {"layers.1.engram.embed.weight_scale", Dtype::F8_E4M3, {rows, 16}}};
  return task;
}

// A W8A8 linear: I8 [out, in] and F32 [out, 1], chunks aligned to its 32-row scale blocks.
Task int8_task(uint64_t out, uint64_t in, uint64_t rows_per_chunk) {
  Task task;
  task.name = "layers.0.attn.wq_b";
  task.rows = out;
  task.cols = int(in);
  task.row_alignment = 32;
  task.rows_per_chunk = rows_per_chunk;
  task.outputs = {{"layers.0.attn.wq_b.weight", Dtype::I8, {out, in}}, {"layers.0.attn.wq_b.weight_scale", Dtype::F32, {out, 1}}};
  return task;
}

TEST(ChunkMessage, HoldsTheResultAndTheChunksRowsOfEveryOutput) {
  const Task task = engram_task(1000, 300);
  EXPECT_EQ(chunk_message_bytes(task, 0), sizeof(ChunkResult) + 300 * 144);
  EXPECT_EQ(chunk_message_bytes(task, 3), sizeof(ChunkResult) + 100 * 144); // the last chunk is short
}

TEST(ChunkMessage, RowsPerChunkWithinALimitIsAlignedAndFits) {
  const Task task = int8_task(4096, 1000, 4096); // 1004 bytes a row
  const uint64_t limit = sizeof(ChunkResult) + 100 * 1004;
  EXPECT_EQ(rows_per_chunk_within(task, limit), 96u); // 99 rows fit, 96 is the aligned count below
  Task at_limit = task;
  at_limit.rows_per_chunk = rows_per_chunk_within(task, limit);
  EXPECT_LE(chunk_message_bytes(at_limit, 0), limit);
  at_limit.rows_per_chunk += at_limit.row_alignment;
  EXPECT_GT(chunk_message_bytes(at_limit, 0), limit);
  EXPECT_EQ(rows_per_chunk_within(task, sizeof(ChunkResult) + 31 * 1004), 0u); // not one block of 32 rows
}

std::string refusal(const std::vector<Task>& tasks, int ranks, bool owner_writes, uint64_t limit) {
  try {
    refuse_chunk_messages_past(tasks, ranks, owner_writes, limit);
  } catch (const PipelineError& e) {
    return e.what();
  }
  return {};
}

TEST(ChunkMessage, AChunkPastTheLimitIsRefusedWithTheRowsPerChunkThatFits) {
  const std::vector<Task> tasks{int8_task(4096, 1000, 4096), engram_task(100000, 4096)};
  const uint64_t limit = sizeof(ChunkResult) + 2000 * 1004;
  const std::string message = refusal(tasks, 4, true, limit);
  EXPECT_NE(message.find("task layers.0.attn.wq_b: a chunk of 4096 rows"), std::string::npos) << message;
  EXPECT_NE(message.find("4 ranks"), std::string::npos) << message;
  // The smaller of what each oversized task allows: 1984 rows of the linear (aligned to 32).
  EXPECT_NE(message.find("set run.rows_per_chunk to at most 1984"), std::string::npos) << message;
  EXPECT_NE(message.find("run.write_mode = \"direct\""), std::string::npos) << message;
}

TEST(ChunkMessage, NamesTheTaskWithTheLargestMessage) {
  const std::vector<Task> tasks{engram_task(100000, 20000), int8_task(4096, 1000, 4096)};
  const std::string message = refusal(tasks, 2, true, sizeof(ChunkResult) + 1000 * 144);
  EXPECT_NE(message.find("task layers.0.attn.wq_b"), std::string::npos) << message; // 4.1 MB beats 2.9 MB
  // The table fits 1000 rows; the linear 143, 128 aligned: the smaller is what fits both.
  EXPECT_NE(message.find("at most 128"), std::string::npos) << message;
}

TEST(ChunkMessage, NoMessageTravelsWithOneRankOrDirectWrites) {
  const std::vector<Task> tasks{engram_task(100000, 100000)};
  const uint64_t limit = 1000;
  EXPECT_EQ(refusal(tasks, 1, true, limit), "");
  EXPECT_EQ(refusal(tasks, 4, false, limit), "");
  EXPECT_NE(refusal(tasks, 2, true, limit), "");
  EXPECT_EQ(refusal(tasks, 2, true, chunk_message_bytes(tasks[0], 0)), ""); // exactly at the limit fits
}

TEST(ChunkMessage, RowsTooWideForAnyChunkSayOnlyDirect) {
  const std::vector<Task> tasks{int8_task(64, 100000, 64)};
  const std::string message = refusal(tasks, 2, true, sizeof(ChunkResult) + 31 * 100004);
  EXPECT_NE(message.find("too wide for any rows_per_chunk"), std::string::npos) << message;
  EXPECT_EQ(message.find("at most"), std::string::npos) << message;
}

} // namespace
} // namespace shardq
