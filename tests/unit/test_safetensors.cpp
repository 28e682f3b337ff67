// pipeline/io safetensors: Writer -> Reader round trips, and one test per malformed header
// (docs/formats.md "Untrusted input"); every error must name the file and the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <xxhash.h>

#include <numeric>

#include "pipeline/io/atomic_file.h"
#include "pipeline/io/safetensors.h"
#include "pipeline/io/shard_readers.h"
#include "io_test_util.h"

namespace shardq::io {
namespace {

using test::ScratchDir;
using ::testing::HasSubstr;

std::vector<uint8_t> iota_bytes(size_t count, uint8_t first) {
  std::vector<uint8_t> bytes(count);
  std::iota(bytes.begin(), bytes.end(), first);
  return bytes;
}

// Specs whose layout is worked out by hand: a F32 [3, 4] = 48 bytes at [0, 48),
// b U8 [5] at [48, 53), c BF16 [] (scalar) at [53, 55), d F4 [2, 6] = 6 bytes at [55, 61).
std::vector<TensorSpec> sample_specs() {
  return {{"a", Dtype::F32, {3, 4}}, {"b", Dtype::U8, {5}}, {"c", Dtype::BF16, {}}, {"d", Dtype::F4, {2, 6}}};
}

TEST(SafetensorsWriter, PlansOffsetsInOrderAndAlignsTheBuffer) {
  const auto layout = Writer::plan(sample_specs(), {});
  const auto& [tensors, data_offset, header, by_name] = layout;
  ASSERT_EQ(tensors.size(), 4u);
  for (const auto& t : tensors) EXPECT_EQ(layout.find(t.name), &t) << t.name;
  EXPECT_EQ(layout.find("e"), nullptr);
  const std::vector<std::pair<uint64_t, uint64_t>> expected = {{0, 48}, {48, 53}, {53, 55}, {55, 61}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(tensors[i].begin, expected[i].first) << tensors[i].name;
    EXPECT_EQ(tensors[i].end, expected[i].second) << tensors[i].name;
  }
  EXPECT_EQ(data_offset, 4096u);
  EXPECT_EQ(8 + header.size(), data_offset);
  EXPECT_EQ(tensors[0].row_bytes(), 16u);
  EXPECT_EQ(tensors[3].row_bytes(), 3u);
  // The header is plain JSON (trailing spaces allowed) in the given order.
  const auto json = nlohmann::ordered_json::parse(header);
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(json["d"]["dtype"], "F4");
  EXPECT_EQ(json["a"]["data_offsets"], nlohmann::json::array({0, 48}));
}

// The run's threads look shards up with opened(): it finds what get() or open_all opened
// and opens nothing itself.
TEST(ShardReaders, OpenedFindsOnlyShardsOpenedBefore) {
  ScratchDir dir;
  Writer writer(dir / "a.safetensors", sample_specs());
  writer.open(false);
  writer.finish();
  ShardReaders readers(dir.path());
  try {
    readers.opened("a.safetensors");
    FAIL() << "opened() returned a shard nothing opened";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "a.safetensors").string()));
    EXPECT_THAT(e.what(), HasSubstr("not opened"));
  }
  const Reader& reader = readers.get("a.safetensors");
  EXPECT_EQ(&readers.opened("a.safetensors"), &reader);
  EXPECT_EQ(readers.opened("a.safetensors").tensors().size(), sample_specs().size());
}

// Headers parsed ahead (start_opening_folder, while the caller reads the index) are the
// ones open_all keeps: listed shards open once, an unlisted file that is no shard is
// dropped without a word, and a listed one that is no shard still throws from open_all.
TEST(ShardReaders, OpensTheFolderAheadAndKeepsOnlyListedShards) {
  ScratchDir dir;
  for (const char* name : {"a.safetensors", "b.safetensors"}) {
    Writer writer(dir / name, sample_specs());
    writer.open(false);
    writer.finish();
  }
  test::write_text(dir / "junk.safetensors", "not a shard");
  ShardReaders readers(dir.path());
  readers.start_opening_folder();
  readers.open_all({"a.safetensors"});
  EXPECT_EQ(readers.opened("a.safetensors").tensors().size(), sample_specs().size());
  EXPECT_THROW(readers.opened("b.safetensors"), IoError) << "an unlisted shard was kept";
  readers.start_opening_folder(); // a is open already: b and junk are parsed again
  try {
    readers.open_all({"b.safetensors", "junk.safetensors"});
    FAIL() << "open_all kept quiet about a listed file that is no shard";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "junk.safetensors").string()));
  }
}

TEST(SafetensorsWriter, RoundTripsThroughTheReader) {
  ScratchDir dir;
  const auto final_path = dir / "model-00001-of-00001.safetensors";
  Writer writer(final_path, sample_specs(), {{"format", "pt"}});
  writer.open(false);
  EXPECT_EQ(writer.partial_path(), dir / "model-00001-of-00001.safetensors.partial");
  EXPECT_TRUE(std::filesystem::exists(writer.partial_path()));
  const auto a = iota_bytes(48, 1), b = iota_bytes(5, 100), c = iota_bytes(2, 200), d = iota_bytes(6, 50);
  // Rows out of order, as ranks would write them.
  writer.write_rows(writer.tensor("a"), 2, std::span(a).subspan(32, 16));
  writer.write_rows(writer.tensor("a"), 0, std::span(a).subspan(0, 32));
  writer.write_rows(writer.tensor("d"), 1, std::span(d).subspan(3, 3));
  writer.write_rows(writer.tensor("d"), 0, std::span(d).subspan(0, 3));
  writer.write_bytes(48, b);
  writer.write_rows(writer.tensor("c"), 0, c);
  writer.sync();
  EXPECT_FALSE(std::filesystem::exists(final_path)) << "renamed before finish()";
  writer.finish();
  EXPECT_TRUE(std::filesystem::exists(final_path));
  EXPECT_FALSE(std::filesystem::exists(writer.partial_path()));

  // Independent check of the bytes on disk: length field, then tensors at 4096 + begin.
  const std::string raw = test::read_text(final_path);
  ASSERT_EQ(raw.size(), 4096u + 61u);
  EXPECT_EQ(raw.substr(0, 8), test::le64(4096 - 8));
  EXPECT_EQ(raw.substr(4096, 48), std::string(a.begin(), a.end()));
  EXPECT_EQ(raw.substr(4096 + 48, 5), std::string(b.begin(), b.end()));
  EXPECT_EQ(raw.substr(4096 + 55, 6), std::string(d.begin(), d.end()));

  Reader reader(final_path);
  EXPECT_EQ(reader.data_offset(), 4096u);
  EXPECT_EQ(reader.data_offset() % Writer::kAlignment, 0u);
  EXPECT_EQ(reader.file_size(), 4096u + 61u);
  EXPECT_EQ(reader.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(reader.tensors().size(), 4u);
  const TensorInfo& ta = reader.tensor("a");
  EXPECT_EQ(ta.dtype, Dtype::F32);
  EXPECT_EQ(ta.shape, (std::vector<uint64_t>{3, 4}));
  std::vector<uint8_t> rows(32);
  reader.read_rows(ta, 1, 2, rows);
  EXPECT_EQ(rows, std::vector<uint8_t>(a.begin() + 16, a.end()));
  std::vector<uint8_t> d_row(3);
  reader.read_rows(reader.tensor("d"), 1, 1, d_row);
  EXPECT_EQ(d_row, std::vector<uint8_t>(d.begin() + 3, d.end()));
  std::vector<uint8_t> scalar(2);
  reader.read_rows(reader.tensor("c"), 0, 1, scalar);
  EXPECT_EQ(scalar, c);
  std::vector<uint8_t> some(4);
  reader.read_bytes(47, some);
  EXPECT_EQ(some, (std::vector<uint8_t>{a[47], b[0], b[1], b[2]}));
  EXPECT_EQ(reader.find("missing"), nullptr);
  EXPECT_THROW(reader.tensor("missing"), IoError);
}

// The header hash (a run's fingerprint keeps it of each source shard) is the xxh3-64 of the
// header's bytes as stored, read here independently from the file; a header that differs
// in one tensor's shape, or in the metadata alone, hashes differently; the same header in
// another file hashes the same.
TEST(SafetensorsReader, HeaderHashIsOfTheStoredHeaderBytes) {
  ScratchDir dir;
  const auto write = [&](const std::string& name, std::vector<TensorSpec> specs, const std::string& format) {
    Writer writer(dir / name, std::move(specs), {{"format", format}});
    writer.open(false);
    writer.finish();
    return dir / name;
  };
  const auto first = write("first.safetensors", sample_specs(), "pt");
  const Reader reader(first);
  const std::string raw = test::read_text(first);
  const std::string header = raw.substr(8, reader.data_offset() - 8);
  EXPECT_EQ(reader.header_hash(), XXH3_64bits(header.data(), header.size()));

  EXPECT_EQ(Reader(write("same.safetensors", sample_specs(), "pt")).header_hash(), reader.header_hash());
  std::vector<TensorSpec> reshaped = sample_specs();
  reshaped[0].shape = {4, 3};
  EXPECT_NE(Reader(write("reshaped.safetensors", reshaped, "pt")).header_hash(), reader.header_hash());
  EXPECT_NE(Reader(write("metadata.safetensors", sample_specs(), "np")).header_hash(), reader.header_hash());
}

// Names are found at their own tensors whether the header lists them in offset order (as
// ours do: the simple parse's name table is kept) or not (as the Python writer's sorted
// keys often do: the tensors are sorted by offset and the table built again), by either
// parse (an escaped name takes the strict one).
TEST(SafetensorsReader, FindsEachNameWhateverTheHeaderOrder) {
  ScratchDir dir;
  const std::string entry_a = R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  const std::string entry_b = R"({"dtype":"U8","shape":[2,3],"data_offsets":[4,10]})";
  const std::string entry_c = R"({"dtype":"U8","shape":[1],"data_offsets":[10,11]})";
  const std::vector<std::pair<std::string, std::string>> headers = {
      {"in_order", "{\"a\":" + entry_a + ",\"b\":" + entry_b + ",\"c\":" + entry_c + "}"},
      {"reversed", "{\"c\":" + entry_c + ",\"b\":" + entry_b + ",\"a\":" + entry_a + "}"},
      {"escaped", "{\"c\":" + entry_c + ",\"\\u0062\":" + entry_b + ",\"a\":" + entry_a + "}"},
  };
  for (const auto& [name, header] : headers) {
    const auto path = dir / (name + ".safetensors");
    test::write_safetensors_raw(path, header, 11);
    const Reader reader(path);
    ASSERT_EQ(reader.tensors().size(), 3u) << name;
    EXPECT_EQ(reader.tensors()[0].name, "a") << name;
    EXPECT_EQ(reader.tensors()[2].name, "c") << name;
    for (const auto& [tensor, begin] : std::vector<std::pair<std::string, uint64_t>>{{"a", 0}, {"b", 4}, {"c", 10}}) {
      const TensorInfo* found = reader.find(tensor);
      ASSERT_NE(found, nullptr) << name << ": " << tensor;
      EXPECT_EQ(found->name, tensor) << name;
      EXPECT_EQ(found->begin, begin) << name << ": " << tensor;
    }
    EXPECT_EQ(reader.find("d"), nullptr) << name;
  }
}

// More pieces than one pwritev takes (IOV_MAX, 1024), empty ones among them and one as
// large as a direct write (written on its own), land back to back; a run that leaves the
// buffer is refused like any write.
TEST(SafetensorsWriter, GatheredPiecesLandBackToBack) {
  ScratchDir dir;
  const auto final_path = dir / "gathered.safetensors";
  constexpr size_t kSmall = 2500, kLarge = 300000, kTotal = kSmall + kLarge + 500;
  std::vector<uint8_t> bytes(kTotal);
  for (size_t i = 0; i < kTotal; ++i) bytes[i] = uint8_t(i * 7 + i / 251);
  Writer writer(final_path, {{"t", Dtype::U8, {kTotal}}});
  writer.open(false);
  std::vector<std::span<const uint8_t>> pieces;
  for (size_t at = 0; at < kSmall; ++at) {
    pieces.push_back(std::span(bytes).subspan(at, 1));
    if (at % 100 == 0) pieces.push_back({});
  }
  pieces.push_back(std::span(bytes).subspan(kSmall, kLarge));
  pieces.push_back(std::span(bytes).subspan(kSmall + kLarge, 500));
  writer.write_gathered(0, pieces);
  EXPECT_THROW(writer.write_gathered(kTotal - 1, std::vector<std::span<const uint8_t>>{std::span(bytes).subspan(0, 2)}), IoError);
  writer.finish();
  Reader reader(final_path);
  std::vector<uint8_t> back(kTotal);
  reader.read_bytes(0, back);
  EXPECT_EQ(back, bytes);
}

// Rows of several tensors back to back come in one gathered read, into separate buffers;
// a range past the data buffer is refused.
TEST(SafetensorsReader, GatheredReadFillsEachPiece) {
  ScratchDir dir;
  const auto path = dir / "read.safetensors";
  const auto a = iota_bytes(48, 1), b = iota_bytes(5, 100), c = iota_bytes(2, 200), d = iota_bytes(6, 50);
  {
    Writer writer(path, sample_specs());
    writer.open(false);
    writer.write_bytes(0, a);
    writer.write_bytes(48, b);
    writer.write_bytes(53, c);
    writer.write_bytes(55, d);
    writer.finish();
  }
  const Reader reader(path);
  std::vector<uint8_t> a_rows(32), b_all(5), c_all(2), none;
  const uint64_t at = reader.rows_offset(reader.tensor("a"), 1, 2, a_rows.size());
  EXPECT_EQ(at, 16u);
  reader.read_gathered(at, std::vector<std::span<uint8_t>>{a_rows, none, b_all, c_all});
  EXPECT_EQ(a_rows, std::vector<uint8_t>(a.begin() + 16, a.end()));
  EXPECT_EQ(b_all, b);
  EXPECT_EQ(c_all, c);
  std::vector<uint8_t> past(7);
  EXPECT_THROW(reader.read_gathered(55, std::vector<std::span<uint8_t>>{past}), IoError);
  EXPECT_THROW(reader.rows_offset(reader.tensor("a"), 2, 2, 32), IoError);
}

TEST(SafetensorsWriter, WithoutMetadataWritesNoMetadataKey) {
  const std::string header = Writer::plan({{"x", Dtype::U8, {1}}}, {}).header;
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);
}

TEST(SafetensorsWriter, DestructorLeavesThePartialUnrenamed) {
  ScratchDir dir;
  const auto final_path = dir / "out.safetensors";
  {
    Writer writer(final_path, sample_specs());
    writer.open(false);
    writer.write_bytes(0, iota_bytes(8, 1));
  }
  EXPECT_FALSE(std::filesystem::exists(final_path));
  EXPECT_TRUE(std::filesystem::exists(dir / "out.safetensors.partial"));
}

// finish_file fsyncs only when bytes were written since the last sync (a job syncs each
// shard's last chunks before recording them): every way of writing must count.
TEST(SafetensorsWriter, FinishSyncsOnlyWhatTheLastSyncMissed) {
  ScratchDir dir;
  const auto final_path = dir / "out.safetensors";
  Writer writer(final_path, sample_specs());
  EXPECT_TRUE(writer.has_unsynced_bytes()) << "a writer never synced";
  writer.open(false);
  EXPECT_TRUE(writer.has_unsynced_bytes()) << "the header";
  writer.sync();
  EXPECT_FALSE(writer.has_unsynced_bytes());
  const auto a = iota_bytes(48, 1), b = iota_bytes(5, 100), c = iota_bytes(2, 200), d = iota_bytes(6, 50);
  writer.write_rows(writer.tensor("a"), 0, a);
  EXPECT_TRUE(writer.has_unsynced_bytes()) << "write_rows";
  writer.sync();
  writer.write_bytes(48, b);
  EXPECT_TRUE(writer.has_unsynced_bytes()) << "write_bytes";
  writer.sync();
  const std::array<std::span<const uint8_t>, 2> pieces = {std::span<const uint8_t>(c), std::span<const uint8_t>(d)};
  writer.write_gathered(53, pieces); // c, then d behind it
  EXPECT_TRUE(writer.has_unsynced_bytes()) << "write_gathered";
  Writer moved(std::move(writer));
  EXPECT_TRUE(moved.has_unsynced_bytes()) << "kept by a move";
  moved.finish();
  EXPECT_FALSE(moved.has_unsynced_bytes()) << "finish syncs what is pending";
  const std::string raw = test::read_text(final_path);
  ASSERT_EQ(raw.size(), 4096u + 61u);
  EXPECT_EQ(raw.substr(4096, 48), std::string(a.begin(), a.end()));
  EXPECT_EQ(raw.substr(4096 + 48, 5), std::string(b.begin(), b.end()));
  EXPECT_EQ(raw.substr(4096 + 55, 6), std::string(d.begin(), d.end()));
  EXPECT_EQ(raw.substr(4096 + 53, 2), std::string(c.begin(), c.end()));
}

TEST(SafetensorsWriter, ResumeKeepsBytesOfAPartialOfTheRightSize) {
  ScratchDir dir;
  const auto final_path = dir / "out.safetensors";
  const auto a = iota_bytes(48, 1);
  {
    Writer writer(final_path, sample_specs());
    writer.open(false);
    writer.write_rows(writer.tensor("a"), 0, a);
    writer.sync();
  }
  {
    Writer resumed(final_path, sample_specs());
    resumed.open(true);
    resumed.write_bytes(48, iota_bytes(13, 9));
    resumed.finish();
  }
  Reader reader(final_path);
  std::vector<uint8_t> rows(48);
  reader.read_rows(reader.tensor("a"), 0, 3, rows);
  EXPECT_EQ(rows, a);
}

TEST(SafetensorsWriter, FreshOpenDiscardsAnOldPartial) {
  ScratchDir dir;
  const auto final_path = dir / "out.safetensors";
  {
    Writer writer(final_path, sample_specs());
    writer.open(false);
    writer.write_rows(writer.tensor("a"), 0, iota_bytes(48, 1));
  }
  Writer fresh(final_path, sample_specs());
  fresh.open(false);
  fresh.finish();
  Reader reader(final_path);
  std::vector<uint8_t> rows(48);
  reader.read_rows(reader.tensor("a"), 0, 3, rows);
  EXPECT_EQ(rows, std::vector<uint8_t>(48, 0));
}

TEST(SafetensorsWriter, ResumeRecreatesAPartialOfTheWrongSize) {
  ScratchDir dir;
  const auto final_path = dir / "out.safetensors";
  test::write_text(dir / "out.safetensors.partial", "short");
  Writer writer(final_path, sample_specs());
  writer.open(true);
  writer.finish();
  EXPECT_EQ(std::filesystem::file_size(final_path), 4096u + 61u);
}

TEST(SafetensorsWriter, RefusesWritesOutsideTheTensor) {
  ScratchDir dir;
  Writer writer(dir / "out.safetensors", sample_specs());
  writer.open(false);
  try {
    writer.write_rows(writer.tensor("a"), 2, iota_bytes(32, 0));
    FAIL() << "rows 2..4 of a 3-row tensor were accepted";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("out.safetensors.partial"));
    EXPECT_THAT(e.what(), HasSubstr("tensor 'a': rows [2, 4) outside its 3 rows"));
  }
  EXPECT_THROW(writer.write_rows(writer.tensor("a"), 0, iota_bytes(10, 0)), IoError); // not whole rows
  EXPECT_THROW(writer.write_bytes(60, iota_bytes(2, 0)), IoError);                      // past the buffer
}

TEST(SafetensorsWriter, RefusesDuplicateAndOverflowingSpecs) {
  EXPECT_THROW(Writer::plan({{"x", Dtype::U8, {1}}, {"x", Dtype::U8, {1}}}, {}), IoError);
  EXPECT_THROW(Writer::plan({{"x", Dtype::F32, {1ull << 62}}}, {}), IoError);
  EXPECT_THROW(Writer::plan({{"x", Dtype::F4, {3}}}, {}), IoError);
}

TEST(SafetensorsReader, RefusesRowsOutsideTheTensorAndWrongBufferSizes) {
  ScratchDir dir;
  const auto path = dir / "ok.safetensors";
  Writer writer(path, sample_specs());
  writer.open(false);
  writer.finish();
  Reader reader(path);
  std::vector<uint8_t> out(32);
  try {
    reader.read_rows(reader.tensor("a"), 2, 2, out);
    FAIL() << "rows [2, 4) of a 3-row tensor were read";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
    EXPECT_THAT(e.what(), HasSubstr("tensor 'a': rows [2, 4) outside its 3 rows"));
  }
  EXPECT_THROW(reader.read_rows(reader.tensor("a"), UINT64_MAX, 2, out), IoError);
  EXPECT_THROW(reader.read_rows(reader.tensor("a"), 0, 1, out), IoError); // buffer is 2 rows
  EXPECT_THROW(reader.read_bytes(60, out), IoError);
  TensorInfo forged = reader.tensor("b"); // [48, 53): 5 bytes
  forged.shape = {2, 4};
  std::vector<uint8_t> two_rows(8);
  EXPECT_THROW(reader.read_rows(forged, 0, 2, two_rows), IoError);
}

// ---------------------------------------------------------------- malformed files

// Opens `path`, expecting an IoError whose message names the file and contains `problem`.
void expect_rejected(const std::filesystem::path& path, const std::string& problem) {
  try {
    Reader reader(path);
    FAIL() << path << " was accepted; expected: " << problem;
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
    EXPECT_THAT(e.what(), HasSubstr(problem));
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(begin) +
         "," + std::to_string(end) + "]}";
}

TEST(SafetensorsReader, RejectsFileShorterThanTheLengthField) {
  ScratchDir dir;
  test::write_text(dir / "tiny.safetensors", "\x05\0\0");
  expect_rejected(dir / "tiny.safetensors", "shorter than the 8-byte header length");
}

TEST(SafetensorsReader, RejectsTruncatedFile) {
  ScratchDir dir;
  const auto path = dir / "cut.safetensors";
  Writer writer(path, sample_specs());
  writer.open(false);
  writer.finish();
  std::filesystem::resize_file(path, 4096 + 58); // d [55, 61) now lies past the end
  expect_rejected(path, "tensor 'd' data_offsets [55, 61) reach past the end of the file (data buffer holds 58 bytes)");
}

TEST(SafetensorsReader, RejectsHeaderLengthBeyondTheFile) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "long.safetensors", "{}", 0, 1000);
  expect_rejected(dir / "long.safetensors", "header length 1000 reaches past the end of the file (10 bytes)");
}

TEST(SafetensorsReader, RejectsHeaderLengthU64Max) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "max.safetensors", "{}", 0, UINT64_MAX);
  expect_rejected(dir / "max.safetensors", "header length 18446744073709551615 exceeds the cap of 100000000 bytes");
}

TEST(SafetensorsReader, RejectsHeaderLengthJustOverTheCap) {
  ScratchDir dir;
  // The file really is large enough (sparse), so only the cap can refuse it.
  test::write_safetensors_raw(dir / "cap.safetensors", "{}", 100'000'000, 100'000'001);
  expect_rejected(dir / "cap.safetensors", "header length 100000001 exceeds the cap of 100000000 bytes");
}

TEST(SafetensorsReader, RejectsHeaderThatIsNotJson) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "text.safetensors", "{not json at all", 0);
  expect_rejected(dir / "text.safetensors", "header is not valid JSON");
}

// A FIFO named like a shard (or like the index) is refused at once: a blocking open would
// wait for a writer for ever, the run with it.
TEST(SafetensorsReader, RefusesAFifoWithoutWaiting) {
  ScratchDir dir;
  const auto fifo = dir / "stray.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_rejected(fifo, "not a regular file");
  try {
    read_file_bounded(fifo, 1024);
    FAIL() << "a FIFO was read";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
  }
}

// A NUL ends nlohmann's input: the tensor after it was dropped, silently.
TEST(SafetensorsReader, RejectsANulInTheHeader) {
  ScratchDir dir;
  const std::string header = std::string(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]})") + '\0' +
                             R"(, "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})";
  test::write_safetensors_raw(dir / "nul.safetensors", header, 8);
  expect_rejected(dir / "nul.safetensors", "header is not valid JSON: a NUL byte at offset 59");
}

// Found by the fuzzer: a number beyond double range made the JSON parser throw an
// exception the reader did not turn into its own error.
TEST(SafetensorsReader, RejectsNumberOutOfRange) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "huge.safetensors", "{\"a\": {\"dtype\": 999e999999}}", 0);
  expect_rejected(dir / "huge.safetensors", "header has a number out of range");
}

TEST(SafetensorsReader, RejectsHeaderThatIsNotAnObject) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "array.safetensors", "[1, 2]", 0);
  expect_rejected(dir / "array.safetensors", "header does not start with '{'");
}

TEST(SafetensorsReader, RejectsNonUtf8Names) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "latin1.safetensors", "{" + entry("caf\xe9", "U8", "[1]", 0, 1) + "}", 1);
  expect_rejected(dir / "latin1.safetensors", "header is not valid JSON");
}

TEST(SafetensorsReader, RejectsOverlappingOffsets) {
  ScratchDir dir;
  const std::string header = "{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}";
  test::write_safetensors_raw(dir / "overlap.safetensors", header, 12);
  expect_rejected(dir / "overlap.safetensors", "tensor 'b' data_offsets [4, 12) overlap tensor 'a' [0, 8)");
}

TEST(SafetensorsReader, RejectsGappedOffsets) {
  ScratchDir dir;
  const std::string header = "{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}";
  test::write_safetensors_raw(dir / "gap.safetensors", header, 12);
  expect_rejected(dir / "gap.safetensors", "tensor 'b' starts at 8 but the bytes before it end at 4: a gap of 4 bytes");
}

TEST(SafetensorsReader, RejectsBufferNotStartingAtZero) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "late.safetensors", "{" + entry("a", "U8", "[4]", 4, 8) + "}", 8);
  expect_rejected(dir / "late.safetensors", "a gap of 4 bytes");
}

TEST(SafetensorsReader, RejectsOffsetsPastTheEndOfTheFile) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "eof.safetensors", "{" + entry("a", "F32", "[2]", 0, 8) + "}", 4);
  expect_rejected(dir / "eof.safetensors", "tensor 'a' data_offsets [0, 8) reach past the end of the file (data buffer holds 4 bytes)");
}

TEST(SafetensorsReader, RejectsTrailingBytesAfterTheLastTensor) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "trail.safetensors", "{" + entry("a", "F32", "[1]", 0, 4) + "}", 9);
  expect_rejected(dir / "trail.safetensors", "5 trailing bytes");
}

TEST(SafetensorsReader, RejectsUnknownDtype) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "dtype.safetensors", "{" + entry("a", "F33", "[1]", 0, 4) + "}", 4);
  expect_rejected(dir / "dtype.safetensors", "tensor 'a': unknown dtype \"F33\"");
}

TEST(SafetensorsReader, RejectsShapeThatDisagreesWithTheBytes) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "x.safetensors", "{" + entry("x", "F32", "[3]", 0, 10) + "}", 10);
  expect_rejected(dir / "x.safetensors", "tensor 'x': data_offsets [0, 10) hold 10 bytes but F32 [3] needs 12");
}

TEST(SafetensorsReader, RejectsSubByteTensorOfFractionalBytes) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "f4.safetensors", "{" + entry("x", "F4", "[3]", 0, 1) + "}", 1);
  expect_rejected(dir / "f4.safetensors", "tensor 'x': F4 [3] is not a whole number of bytes");
}

TEST(SafetensorsReader, RejectsDimensionWhoseElementCountWraps) {
  // (2^42 + 1) * 2^22 = 2^64 + 2^22 wraps to 2^22: a 4 MiB buffer would "match" a wrapped count.
  ScratchDir dir;
  test::write_safetensors_raw(dir / "wrap.safetensors", "{" + entry("w", "U8", "[4398046511105, 4194304]", 0, 4194304) + "}", 4194304);
  expect_rejected(dir / "wrap.safetensors", "tensor 'w': shape U8 [4398046511105, 4194304] overflows 64 bits");
}

TEST(SafetensorsReader, RejectsByteCountThatWrapsToZero) {
  // 2^62 F32 elements are 2^67 bits: wrapped to 64 bits that is 0, matching an empty range.
  ScratchDir dir;
  test::write_safetensors_raw(dir / "zero.safetensors", "{" + entry("z", "F32", "[4611686018427387904]", 0, 0) + "}", 0);
  expect_rejected(dir / "zero.safetensors", "tensor 'z': F32 [4611686018427387904] is not a whole number of bytes (or overflows)");
}

TEST(SafetensorsReader, RejectsDuplicateKeys) {
  ScratchDir dir;
  const std::string header = "{" + entry("a", "U8", "[4]", 0, 4) + "," + entry("a", "U8", "[4]", 4, 8) + "}";
  test::write_safetensors_raw(dir / "dup.safetensors", header, 8);
  expect_rejected(dir / "dup.safetensors", "duplicate key 'a'");
}

TEST(SafetensorsReader, RejectsNegativeAndFractionalNumbers) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "neg.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0);
  expect_rejected(dir / "neg.safetensors", "tensor 'a': shape holds -1, not a non-negative integer");
  test::write_safetensors_raw(dir / "frac.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}}", 1);
  expect_rejected(dir / "frac.safetensors", "tensor 'a': data_offsets holds 1.0, not a non-negative integer");
}

TEST(SafetensorsReader, RejectsMissingFieldsAndEmptyNames) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "field.safetensors", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1);
  expect_rejected(dir / "field.safetensors", "tensor 'a': missing 'shape'");
  test::write_safetensors_raw(dir / "empty.safetensors", "{" + entry("", "U8", "[1]", 0, 1) + "}", 1);
  expect_rejected(dir / "empty.safetensors", "a tensor has an empty name");
}

TEST(SafetensorsReader, RejectsMetadataThatIsNotStrings) {
  ScratchDir dir;
  test::write_safetensors_raw(dir / "meta.safetensors", "{\"__metadata__\":{\"format\":1}}", 0);
  expect_rejected(dir / "meta.safetensors", "__metadata__ 'format' is number, not a string");
}

TEST(SafetensorsReader, AcceptsPaddedHeaderAndZeroSizeTensors) {
  ScratchDir dir;
  const std::string header = "{\"__metadata__\":{\"format\":\"pt\"}," + entry("e", "F32", "[0, 4]", 0, 0) + "," +
                             entry("a", "U8", "[2]", 0, 2) + "}    ";
  test::write_safetensors_raw(dir / "pad.safetensors", header, 2);
  Reader reader(dir / "pad.safetensors");
  EXPECT_EQ(reader.tensors().size(), 2u);
  EXPECT_EQ(reader.tensor("e").rows(), 0u);
  EXPECT_EQ(reader.metadata().at("format"), "pt");
}

} // namespace
} // namespace shardq::io
