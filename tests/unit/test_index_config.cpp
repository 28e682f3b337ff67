// pipeline/io index.json, config.json and atomic file writes: order kept, shard names that
// could escape the folder refused, missing shards and shard files the index does not name
// found.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pipeline/io/atomic_file.h"
#include "pipeline/io/config.h"
#include "pipeline/io/index.h"
#include "pipeline/io/strict_json.h"
#include "io_test_util.h"

namespace shardq::io {
namespace {

using test::ScratchDir;
using ::testing::HasSubstr;

TEST(IoAtomicFile, ReplacesTheFileAndLeavesNoTemporary) {
  ScratchDir dir;
  const auto path = dir / "report.json";
  test::write_text(path, "old");
  write_file_atomic(path, "new contents");
  EXPECT_EQ(test::read_text(path), "new contents");
  EXPECT_FALSE(std::filesystem::exists(dir / "report.json.tmp"));
}

TEST(IoAtomicFile, ReportsAnUnwritableFolder) {
  ScratchDir dir;
  try {
    write_file_atomic(dir / "no_such_folder" / "x.json", "{}");
    FAIL() << "wrote into a missing folder";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no_such_folder/x.json.tmp: cannot create"));
  }
}

TEST(IoAtomicFile, StagedFileAppearsOnlyAtCommit) {
  ScratchDir dir;
  const auto path = dir / "model.safetensors.index.json";
  test::write_text(path, "old");
  stage_file(path, "new index");
  EXPECT_EQ(test::read_text(path), "old");
  EXPECT_EQ(test::read_text(staged_path(path)), "new index");
  commit_staged_file(path);
  EXPECT_EQ(test::read_text(path), "new index");
  EXPECT_FALSE(std::filesystem::exists(staged_path(path)));
}

TEST(IoAtomicFile, CommitWithoutAStagedFileNamesIt) {
  ScratchDir dir;
  try {
    commit_staged_file(dir / "config.json");
    FAIL() << "committed a file never staged";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("config.json.tmp: rename to"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "config.json"));
}

TEST(IoAtomicFile, BoundedReadRefusesLargerFiles) {
  ScratchDir dir;
  test::write_text(dir / "big.json", std::string(100, ' '));
  EXPECT_EQ(read_file_bounded(dir / "big.json", 100).size(), 100u);
  try {
    read_file_bounded(dir / "big.json", 99);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("big.json: file is 100 bytes, more than the 99 allowed"));
  }
}

TEST(IoConfig, KeepsKeyOrderAndWritesIndentedWithNewline) {
  ScratchDir dir;
  const auto path = dir / "config.json";
  test::write_text(path, R"({"zeta": 1, "alpha": {"y": true, "b": [1, 2]}, "mid": "x"})");
  nlohmann::ordered_json config = read_config(path);
  config["new_key"] = nullptr;
  write_json_file(path, config);
  const std::string expected =
      "{\n"
      "  \"zeta\": 1,\n"
      "  \"alpha\": {\n"
      "    \"y\": true,\n"
      "    \"b\": [\n"
      "      1,\n"
      "      2\n"
      "    ]\n"
      "  },\n"
      "  \"mid\": \"x\",\n"
      "  \"new_key\": null\n"
      "}\n";
  EXPECT_EQ(test::read_text(path), expected);
}

TEST(IoConfig, RejectsDuplicateKeysAndNonObjects) {
  ScratchDir dir;
  test::write_text(dir / "dup.json", R"({"a": 1, "b": {"c": 1, "c": 2}})");
  try {
    read_config(dir / "dup.json");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("dup.json: content: duplicate key 'c'"));
  }
  test::write_text(dir / "list.json", "[1]");
  try {
    read_config(dir / "list.json");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("list.json: content is array, not a JSON object"));
  }
}

using Entries = std::vector<std::pair<std::string, std::string>>;

ShardIndex index_of(const Entries& entries) {
  ShardIndex index;
  for (const auto& [tensor, shard] : entries) index.add(tensor, shard);
  return index;
}

Entries entries_of(const ShardIndex& index) {
  Entries entries;
  for (const auto& [tensor, shard] : index.entries()) entries.emplace_back(tensor, shard);
  return entries;
}

const Entries kSampleEntries = {{"z.weight", "model-00002-of-00002.safetensors"},
                                {"a.weight", "model-00001-of-00002.safetensors"},
                                {"m.weight", "model-00002-of-00002.safetensors"}};

ShardIndex sample_index() {
  ShardIndex index = index_of(kSampleEntries);
  index.total_size = 1234;
  index.extra_metadata["format"] = "pt";
  return index;
}

// Entries keep their order and names; each shard is kept once, numbered in order of first
// appearance, however the entries alternate between shards.
TEST(IoIndex, KeepsEntriesInOrderAndEachShardOnce) {
  const Entries entries = {{"b", "s2"}, {"a", "s1"}, {"c", "s2"}, {"d", "s2"}, {"e", "s3"}, {"f", "s1"}};
  const ShardIndex index = index_of(entries);
  EXPECT_EQ(entries_of(index), entries);
  EXPECT_EQ(index.shard_files(), (std::vector<std::string>{"s2", "s1", "s3"}));
  std::vector<uint32_t> numbers;
  for (size_t i = 0; i < index.size(); ++i) numbers.push_back(index.shard_number(i));
  EXPECT_EQ(numbers, (std::vector<uint32_t>{0, 1, 0, 0, 2, 1}));
  EXPECT_EQ(index.first_entries(), (std::vector<size_t>{0, 1, 4}));
  EXPECT_EQ(index, index_of(entries));
  Entries other = entries;
  other[3].second = "s1";
  EXPECT_FALSE(index == index_of(other));
  other = entries;
  other[5].first = "g";
  EXPECT_FALSE(index == index_of(other));
  EXPECT_FALSE(index == index_of(Entries(entries.begin(), entries.end() - 1)));
}

TEST(IoIndex, RoundTripsInOrder) {
  ScratchDir dir;
  const auto path = dir / std::string(kIndexFileName);
  write_index(path, sample_index());
  const std::string expected =
      "{\n"
      "  \"metadata\": {\n"
      "    \"total_size\": 1234,\n"
      "    \"format\": \"pt\"\n"
      "  },\n"
      "  \"weight_map\": {\n"
      "    \"z.weight\": \"model-00002-of-00002.safetensors\",\n"
      "    \"a.weight\": \"model-00001-of-00002.safetensors\",\n"
      "    \"m.weight\": \"model-00002-of-00002.safetensors\"\n"
      "  }\n"
      "}\n";
  EXPECT_EQ(test::read_text(path), expected);
  const ShardIndex back = read_index(path);
  EXPECT_EQ(back.total_size, 1234u);
  EXPECT_EQ(entries_of(back), kSampleEntries);
  EXPECT_EQ(back, sample_index());
  EXPECT_EQ(back.extra_metadata, sample_index().extra_metadata);
  EXPECT_EQ(back.shard_files(), (std::vector<std::string>{"model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"}));
  ASSERT_NE(back.shard_of("a.weight"), nullptr);
  EXPECT_EQ(*back.shard_of("a.weight"), "model-00001-of-00002.safetensors");
  EXPECT_EQ(back.shard_of("nope"), nullptr);
}

// Writes an index with one entry pointing at `shard` and expects read_index to refuse it.
void expect_shard_refused(const std::string& shard, const std::string& problem) {
  ScratchDir dir;
  const auto path = dir / std::string(kIndexFileName);
  const nlohmann::json json = {{"metadata", {{"total_size", 4}}}, {"weight_map", {{"t.weight", shard}}}};
  test::write_text(path, json.dump());
  try {
    read_index(path);
    FAIL() << "accepted shard name " << shard;
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
    EXPECT_THAT(e.what(), HasSubstr("weight_map entry 't.weight': shard name '" + shard + "' " + problem));
  }
}

TEST(IoIndex, RefusesShardEscapingTheFolderWithDotDot) { expect_shard_refused("../x.safetensors", "contains '/'"); }
TEST(IoIndex, RefusesBareDotDot) { expect_shard_refused("..", "contains '..'"); }
TEST(IoIndex, RefusesAbsoluteShard) { expect_shard_refused("/etc/passwd", "is an absolute path"); }
TEST(IoIndex, RefusesShardInASubfolder) { expect_shard_refused("a/b.safetensors", "contains '/'"); }
TEST(IoIndex, RefusesBackslash) { expect_shard_refused("a\\b.safetensors", "contains '\\'"); }
TEST(IoIndex, RefusesEmptyShard) { expect_shard_refused("", "is empty"); }

TEST(IoIndex, WriteRefusesEscapingShardNames) {
  ScratchDir dir;
  const ShardIndex index = index_of({{"t", "../evil.safetensors"}});
  EXPECT_THROW(write_index(dir / "i.json", index), IoError);
  EXPECT_FALSE(std::filesystem::exists(dir / "i.json"));
}

TEST(IoIndex, FindsMissingShard) {
  ScratchDir dir;
  const auto path = dir / std::string(kIndexFileName);
  write_index(path, sample_index());
  test::write_text(dir / "model-00002-of-00002.safetensors", "x");
  try {
    load_index(path);
    FAIL() << "a missing shard went unnoticed";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
    EXPECT_THAT(e.what(), HasSubstr("missing shard 'model-00001-of-00002.safetensors' (holds tensor 'a.weight')"));
  }
  test::write_text(dir / "model-00001-of-00002.safetensors", "x");
  EXPECT_EQ(load_index(path).size(), 3u);
}

// Only .safetensors files count (not the index, not .partial files, not folders), sorted.
TEST(IoIndex, ShardFilesOutsideTheIndex) {
  ScratchDir dir;
  const std::vector<std::string> named = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  for (const auto& file : named) test::write_text(dir / file, "x");
  test::write_text(dir / std::string(kIndexFileName), "{}");
  test::write_text(dir / "model-00002-of-00002.safetensors.partial", "x");
  test::write_text(dir / "tokenizer.json", "{}");
  std::filesystem::create_directory(dir / "extra.safetensors"); // a folder, not a file
  EXPECT_TRUE(shard_files_outside(dir.path(), named).empty());
  test::write_text(dir / "model-00003-of-00003.safetensors", "x");
  test::write_text(dir / "consolidated.safetensors", "x");
  EXPECT_EQ(shard_files_outside(dir.path(), named),
            (std::vector<std::string>{"consolidated.safetensors", "model-00003-of-00003.safetensors"}));
  EXPECT_EQ(shard_files_outside(dir.path(), {}).size(), 4u);
}

TEST(IoIndex, RefusesDuplicateTensorsAndBadTotals) {
  ScratchDir dir;
  test::write_text(dir / "dup.json", R"({"weight_map": {"a": "s.safetensors", "a": "t.safetensors"}})");
  try {
    read_index(dir / "dup.json");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("dup.json: content: duplicate key 'a'"));
  }
  test::write_text(dir / "neg.json", R"({"metadata": {"total_size": -5}, "weight_map": {}})");
  EXPECT_THROW(read_index(dir / "neg.json"), IoError);
  test::write_text(dir / "nomap.json", R"({"metadata": {}})");
  EXPECT_THROW(read_index(dir / "nomap.json"), IoError);
}

// The usual shape is read without a DOM, any other through the strict parser: both give
// the same index for the same content.
TEST(IoIndex, ReadsEveryShapeToTheSameIndex) {
  ScratchDir dir;
  const std::string map = R"("weight_map": {"b": "s2.safetensors", "a": "s1.safetensors"})";
  test::write_text(dir / "usual.json", R"({"metadata": {"total_size": 7, "format": "pt", "n": 3}, )" + map + "}");
  test::write_text(dir / "swapped.json", "{" + map + R"(, "metadata": {"format": "pt", "total_size": 7, "n": 3}})");
  test::write_text(dir / "unusual.json", R"({"metadata": {"total_size": 7, "format": "pt", "n": 3}, "other": [1], )" + map + "}");
  const Entries expected = {{"b", "s2.safetensors"}, {"a", "s1.safetensors"}};
  EXPECT_TRUE(read_simple_index(test::read_text(dir / "usual.json")).has_value());
  EXPECT_TRUE(read_simple_index(test::read_text(dir / "swapped.json")).has_value());
  EXPECT_FALSE(read_simple_index(test::read_text(dir / "unusual.json")).has_value());
  for (const char* file : {"usual.json", "swapped.json", "unusual.json"}) {
    const ShardIndex index = read_index(dir / file);
    EXPECT_EQ(index.total_size, 7u) << file;
    EXPECT_EQ(entries_of(index), expected) << file;
    EXPECT_EQ(index.extra_metadata.size(), 2u) << file;
    EXPECT_EQ(index.extra_metadata.value("format", ""), "pt") << file;
    EXPECT_EQ(index.extra_metadata.value("n", 0), 3) << file;
  }
  // A negative or nested metadata value leaves the usual shape; the strict path keeps it.
  test::write_text(dir / "negative.json", R"({"metadata": {"total_size": 7, "n": -1.5}, )" + map + "}");
  EXPECT_FALSE(read_simple_index(test::read_text(dir / "negative.json")).has_value());
  EXPECT_EQ(read_index(dir / "negative.json").extra_metadata.value("n", 0.0), -1.5);
  test::write_text(dir / "nested.json", R"({"metadata": {"total_size": 7, "nested": {"k": [1, 2]}}, )" + map + "}");
  EXPECT_EQ(read_index(dir / "nested.json").extra_metadata["nested"]["k"][1], 2);
  // Shard names are checked on either path.
  test::write_text(dir / "escape.json", R"({"weight_map": {"a": "../s.safetensors"}})");
  EXPECT_THROW(read_index(dir / "escape.json"), IoError);
}

// Names are quoted without a JSON value when they are plain ASCII: the same bytes as
// dump() for every kind of text (after what `out` held), and the same refusal of invalid UTF-8.
TEST(IoJson, AppendedJsonStringIsWhatDumpWrites) {
  // After a prefix, to show it appends: "[" then the literal.
  const auto appended = [](const std::string& text) {
    std::string out(1, '[');
    append_json_string(out, text);
    return out;
  };
  const auto dumped = [](const std::string& text) {
    std::string out(1, '[');
    out += nlohmann::ordered_json(text).dump();
    return out;
  };
  const std::vector<std::string> texts = {"",      "layers.0.ffn.experts.7.w1.weight", "a\"b", "back\\slash", "tab\there",
                                          "\x7f", "\x01", "caf\xc3\xa9", "\xe2\x82\xac", "/", "'"};
  for (const auto& text : texts) EXPECT_EQ(appended(text), dumped(text)) << text;
  for (int c = 0; c < 128; ++c) {
    const std::string text{'x', char(c), 'y'};
    EXPECT_EQ(appended(text), dumped(text)) << c;
  }
  EXPECT_THROW(appended("bad\xff"), nlohmann::ordered_json::type_error);
}

} // namespace
} // namespace shardq::io
