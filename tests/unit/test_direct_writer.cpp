// pipeline/io DirectWriter: which pages of a write go direct (hand-worked), and that
// large unaligned writes through the Writer land byte-exact with the buffered head and
// tail around the direct middle, leaving the neighbouring bytes alone.
#include <gtest/gtest.h>

#include <random>

#include "io_test_util.h"
#include "pipeline/io/direct_writer.h"
#include "pipeline/io/safetensors.h"

namespace shardq::io {
namespace {

using test::ScratchDir;
constexpr uint64_t kPage = DirectWriter::kPageBytes;

std::vector<uint8_t> random_bytes(size_t count, uint32_t seed) {
  std::mt19937 engine(seed);
  std::vector<uint8_t> bytes(count);
  for (auto& byte : bytes) byte = uint8_t(engine());
  return bytes;
}

TEST(DirectWriter, PagesInsideAreTheWholePagesOfALargeWrite) {
  ScratchDir dir;
  test::write_text(dir / "f", std::string(16, 'x'));
  DirectWriter direct(dir / "f");
  if (!direct.enabled()) GTEST_SKIP() << "the temp folder's file system refuses O_DIRECT";
  const uint64_t large = DirectWriter::kMinBytes;
  // [100, 100 + large): pages from 4096 up to the last page boundary below 100 + large.
  const auto unaligned = direct.pages_inside(100, large);
  EXPECT_EQ(unaligned.begin, kPage);
  EXPECT_EQ(unaligned.end, large); // large is a whole number of pages; 100 + large ends inside the next
  const auto aligned = direct.pages_inside(3 * kPage, large);
  EXPECT_EQ(aligned.begin, 3 * kPage);
  EXPECT_EQ(aligned.end, 3 * kPage + large);
  EXPECT_TRUE(direct.pages_inside(100, large - 1).empty()) << "writes under kMinBytes stay buffered";
}

// Writes into a large U8 tensor at unaligned offsets (and sizes that cross the staging
// buffer), over a tensor filled first: every byte must read back, the rest unchanged.
TEST(DirectWriter, UnalignedLargeWritesThroughTheWriterReadBack) {
  ScratchDir dir;
  test::write_text(dir / "probe", std::string(16, 'x'));
  if (!DirectWriter(dir / "probe").enabled()) GTEST_SKIP() << "the temp folder's file system refuses O_DIRECT";
  const uint64_t size = 3 * DirectWriter::kStagingBytes;
  Writer writer(dir / "big.safetensors", {{"header_pad", Dtype::U8, {77}}, {"t", Dtype::U8, {size}}});
  writer.open(false);
  const TensorInfo& t = writer.tensor("t");
  std::vector<uint8_t> expected = random_bytes(size, 1);
  writer.write_bytes(t.begin, expected);
  const struct {
    uint64_t at, bytes;
  } writes[] = {{123, DirectWriter::kStagingBytes + 5 * kPage + 999}, // crosses the staging buffer
                {size - DirectWriter::kMinBytes - 3, DirectWriter::kMinBytes}, // ends 3 bytes short of the end
                {2 * DirectWriter::kStagingBytes + 1, kPage}}; // small: buffered only
  uint32_t seed = 2;
  for (const auto& w : writes) {
    const auto bytes = random_bytes(w.bytes, seed++);
    writer.write_bytes(t.begin + w.at, bytes);
    std::copy(bytes.begin(), bytes.end(), expected.begin() + std::ptrdiff_t(w.at));
  }
  writer.finish();
  Reader reader(dir / "big.safetensors");
  std::vector<uint8_t> got(size);
  reader.read_bytes(reader.tensor("t").begin, got);
  EXPECT_TRUE(got == expected) << "the bytes read back differ from those written";
}

} // namespace
} // namespace shardq::io
