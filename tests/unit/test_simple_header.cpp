// The DOM-free header parse: what it accepts it reads exactly, and every other shape it
// declines (nullopt) so that parse_header's strict path decides.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline/io/safetensors.h"
#include "pipeline/io/plain_json.h"
#include "pipeline/io/simple_header.h"

namespace {

using shardq::Dtype;
using shardq::io::parse_simple_header;

TEST(SimpleHeader, ReadsTensorsAndMetadataInHeaderOrder) {
  const auto header = parse_simple_header(
      R"({"b":{"shape":[2,3],"dtype":"BF16","data_offsets":[12,24]},"__metadata__":{"format":"pt","k":"v"},)"
      R"("a":{"data_offsets":[0,12],"dtype":"F32","shape":[3]},"s":{"dtype":"U8","shape":[],"data_offsets":[24,25]}}   )");
  ASSERT_TRUE(header.has_value());
  ASSERT_EQ(header->tensors.size(), 3u);
  EXPECT_EQ(header->tensors[0].name, "b");
  EXPECT_EQ(header->tensors[0].dtype, Dtype::BF16);
  EXPECT_EQ(header->tensors[0].shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(header->tensors[0].begin, 12u);
  EXPECT_EQ(header->tensors[0].end, 24u);
  EXPECT_EQ(header->tensors[1].name, "a");
  EXPECT_EQ(header->tensors[1].dtype, Dtype::F32);
  EXPECT_EQ(header->tensors[1].shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(header->tensors[2].name, "s");
  EXPECT_TRUE(header->tensors[2].shape.empty());
  EXPECT_EQ(header->metadata.at("format"), "pt");
  EXPECT_EQ(header->metadata.at("k"), "v");
}

TEST(SimpleHeader, AcceptsAnEmptyHeaderAndLeavesEscapedNamesToTheStrictPath) {
  const auto empty = parse_simple_header(" {\n} \t");
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->tensors.empty());
  const std::string escaped = R"({"a\"b\u00e9":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_FALSE(parse_simple_header(escaped).has_value());
  const auto tensors = shardq::io::parse_header(escaped, escaped.size(), 8 + escaped.size() + 1, "f", nullptr);
  EXPECT_EQ(tensors.at(0).name, "a\"b\xc3\xa9");
}

TEST(PlainJson, ReadsOnlyPlainUnsignedIntegersAndStrings) {
  using shardq::io::PlainJson;
  for (const char* text : {"0", "7", " 18446744073709551615"}) EXPECT_TRUE(PlainJson(text).number().has_value()) << text;
  for (const char* text : {"", "01", "-1", "1.5", "1e5", "18446744073709551616", "+1", "x"})
    EXPECT_FALSE(PlainJson(text).number().has_value()) << text;
  EXPECT_EQ(PlainJson("18446744073709551615").number(), UINT64_MAX);
  EXPECT_EQ(PlainJson(R"("layers.0.w")").string(), "layers.0.w");
  for (const char* text : {R"("a\n")", "\"caf\xc3\xa9\"", "\"tab\t\"", "\"open", "name"})
    EXPECT_FALSE(PlainJson(text).string().has_value()) << text;
}

// Each of these is either refused by the strict path or needs its judgement.
// The run a word at a time ends where the byte-by-byte rule first fails: every byte value
// at every place of strings around the 8-byte word edges, over plain text of every length.
TEST(PlainJson, PlainRunEndsAtTheFirstByteThatNeedsEscaping) {
  const auto bytewise = [](std::string_view text) {
    size_t at = 0;
    while (at < text.size() && shardq::io::plain_json_byte(text[at])) ++at;
    return at;
  };
  for (size_t length = 0; length <= 24; ++length) {
    const std::string plain(length, 'a');
    EXPECT_EQ(shardq::io::plain_json_run(plain), length);
    for (size_t at = 0; at < length; ++at) {
      for (int byte = 0; byte < 256; ++byte) {
        std::string text = plain;
        text[at] = char(byte);
        ASSERT_EQ(shardq::io::plain_json_run(text), bytewise(text)) << "length " << length << " byte " << byte << " at " << at;
        text.back() = '"'; // a second stop after it: the first decides
        ASSERT_EQ(shardq::io::plain_json_run(text), bytewise(text)) << "length " << length << " byte " << byte << " at " << at;
      }
    }
  }
}

TEST(SimpleHeader, DeclinesEveryOtherShape) {
  const char* entry = R"("dtype":"U8","shape":[1],"data_offsets":[0,1])";
  const std::vector<std::string> declined = {
      "",                                                                         // empty
      "[]",                                                                       // not an object
      "{\"a\":{" + std::string(entry) + "}",                                      // unclosed
      "{\"a\":{" + std::string(entry) + "}} x",                                   // trailing bytes
      "{\"a\":{" + std::string(entry) + "},\"a\":{" + std::string(entry) + "}}",  // name twice
      "{\"\":{" + std::string(entry) + "}}",                                      // empty name
      "{\"a\":{" + std::string(entry) + ",\"extra\":1}}",                         // another field
      R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})",    // field twice
      R"({"a":{"dtype":"U8","data_offsets":[0,1]}})",                             // field missing
      R"({"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})",                 // unknown dtype
      R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})",                    // dtype not a string
      R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})",                // negative
      R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})",               // float
      R"({"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})",               // nested array
      R"({"a":{"dtype":"U8","shape":1,"data_offsets":[0,1]}})",                   // not an array
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})",               // three offsets
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,99999999999999999999]}})", // past 64 bits
      R"({"a":null})",                                                            // entry not an object
      R"({"__metadata__":{"k":1}})",                                              // metadata value not a string
      R"({"__metadata__":{"k":"v","k":"w"}})",                                    // metadata key twice
      R"({"__metadata__":{},"__metadata__":{}})",                                 // metadata twice
      R"({"__metadata__":"pt"})",                                                 // metadata not an object
      "{\"a\xff\":{" + std::string(entry) + "}}",                                 // not UTF-8
  };
  for (const auto& text : declined) EXPECT_FALSE(parse_simple_header(text).has_value()) << text;
}

// parse_header gives the same answer whichever path reads a header: the strict path's
// messages for sizes still come out of simple headers.
TEST(SimpleHeader, ParseHeaderChecksSizesOfSimpleHeaders) {
  const std::string header = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,10]}})";
  ASSERT_TRUE(parse_simple_header(header).has_value());
  try {
    shardq::io::parse_header(header, header.size(), 8 + header.size() + 10, "f", nullptr);
    FAIL() << "accepted";
  } catch (const shardq::io::IoError& e) {
    EXPECT_EQ(std::string(e.what()), "f: tensor 'x': data_offsets [0, 10) hold 10 bytes but F32 [3] needs 12");
  }
}

} // namespace
