// The miniature checkpoint: determinism, the prime layout of its tables, where they sit,
// the content figures the quantizers rely on (row spread, zero and tiny rows, wkv
// anisotropy) and that no stored code is NaN.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "kernels/formats.h"
#include "stages/engram_config.h"
#include "fixture/fixture.h"
#include "fixture/fixture_content.h"
#include "pipeline/io/safetensors.h"
#include "stages/engram_layout.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;
using io::Dtype;

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("shardq_test_fixture_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

FixtureResult make(const fs::path& dir, const std::string& preset, uint64_t seed, uint64_t vocab) {
  FixtureArgs args;
  args.preset = preset;
  args.out = dir.string();
  args.seed = seed;
  args.engram_vocab = vocab;
  return write_fixture(args);
}

std::map<std::string, uint64_t> file_hashes(const fs::path& dir) {
  std::map<std::string, uint64_t> hashes;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    hashes[entry.path().filename().string()] = XXH3_64bits(bytes.data(), bytes.size());
  }
  return hashes;
}

nlohmann::ordered_json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::ordered_json::parse(in);
}

std::vector<uint8_t> read_tensor(const io::Reader& reader, const std::string& name) {
  const io::TensorInfo& info = reader.tensor(name);
  std::vector<uint8_t> bytes(info.end - info.begin);
  reader.read_bytes(info.begin, bytes);
  return bytes;
}

// Smallest primes > vocab - 1, distinct across layers, 24 per layer (docs/formats.md "Prime layout"), by trial division.
std::vector<uint64_t> expected_table_rows(uint64_t vocab) {
  auto is_prime = [](uint64_t n) {
    for (uint64_t d = 2; d * d <= n; ++d) {
      if (n % d == 0) return false;
    }
    return n >= 2;
  };
  std::set<uint64_t> seen;
  std::vector<uint64_t> totals;
  for (int layer = 0; layer < 2; ++layer) {
    uint64_t total = 0;
    for (int n = 2; n <= 4; ++n) {
      uint64_t cur = vocab - 1;
      for (int h = 0; h < 8; ++h) {
        do ++cur;
        while (!is_prime(cur) || seen.count(cur));
        seen.insert(cur);
        total += cur;
      }
    }
    totals.push_back(total);
  }
  return totals;
}

class FixtureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(temp_dir("default"));
    make(*dir_, "dsv41-mini", 1, 0);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path shard(int index) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-00006.safetensors", index);
    return *dir_ / name;
  }
  static fs::path* dir_;
};
fs::path* FixtureTest::dir_ = nullptr;

TEST(Fixture, SameSeedSameBytesOtherSeedOtherTables) {
  const fs::path a = temp_dir("a"), b = temp_dir("b"), c = temp_dir("c");
  make(a, "dsv41-mini", 7, 300);
  make(b, "dsv41-mini", 7, 300);
  make(c, "dsv41-mini", 8, 300);
  const auto hashes_a = file_hashes(a), hashes_b = file_hashes(b), hashes_c = file_hashes(c);
  EXPECT_EQ(hashes_a.size(), 12u); // 6 shards, index, config, generation, 2 tokenizer files, LICENSE
  EXPECT_EQ(hashes_a, hashes_b);
  EXPECT_NE(hashes_a.at("model-00005-of-00006.safetensors"), hashes_c.at("model-00005-of-00006.safetensors"));
  EXPECT_NE(hashes_a.at("model-00006-of-00006.safetensors"), hashes_c.at("model-00006-of-00006.safetensors"));
  EXPECT_EQ(hashes_a.at("config.json"), hashes_c.at("config.json"));
  for (const fs::path& dir : {a, b, c}) fs::remove_all(dir);
}

TEST_F(FixtureTest, TableRowsFollowThePrimeLayout) {
  const auto expected = expected_table_rows(2000);
  const auto config = read_json(*dir_ / "config.json");
  const EngramConfig engram = engram_config_from_json(config["text_config"]);
  EXPECT_EQ(engram.layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(engram.num_embeddings, expected);
  EXPECT_EQ(engram.vocab_size, 2000u);
  const EngramLayout layout(engram);
  const int layers[2] = {1, 14};
  for (int i = 0; i < 2; ++i) {
    const io::Reader reader(shard(5 + i));
    const std::string prefix = "layers." + std::to_string(layers[i]) + ".engram.embed.";
    const io::TensorInfo& weight = reader.tensor(prefix + "weight");
    const io::TensorInfo& scale = reader.tensor(prefix + "scale");
    EXPECT_EQ(weight.dtype, Dtype::F8_E4M3);
    EXPECT_EQ(weight.shape, (std::vector<uint64_t>{expected[size_t(i)], 256}));
    EXPECT_EQ(scale.dtype, Dtype::F8_E8M0);
    EXPECT_EQ(scale.shape, (std::vector<uint64_t>{expected[size_t(i)], 8}));
    EXPECT_NO_THROW(layout.check(layers[i], weight.rows()));
  }
}

TEST_F(FixtureTest, TablesAloneInTheLastTwoShards) {
  const auto index = read_json(*dir_ / "model.safetensors.index.json");
  const auto& weight_map = index["weight_map"];
  EXPECT_EQ(weight_map["layers.1.engram.embed.weight"], "model-00005-of-00006.safetensors");
  EXPECT_EQ(weight_map["layers.1.engram.embed.scale"], "model-00005-of-00006.safetensors");
  EXPECT_EQ(weight_map["layers.14.engram.embed.weight"], "model-00006-of-00006.safetensors");
  EXPECT_EQ(weight_map["layers.14.engram.embed.scale"], "model-00006-of-00006.safetensors");
  EXPECT_EQ(io::Reader(shard(5)).tensors().size(), 2u);
  EXPECT_EQ(io::Reader(shard(6)).tensors().size(), 2u);
  uint64_t total = 0, tensors = 0;
  for (int s = 1; s <= 6; ++s) {
    const io::Reader reader(shard(s));
    for (const auto& t : reader.tensors()) {
      EXPECT_EQ(weight_map[t.name], shard(s).filename().string()) << t.name;
      total += t.end - t.begin;
      ++tensors;
    }
  }
  EXPECT_EQ(weight_map.size(), tensors);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
}

TEST_F(FixtureTest, NoNaNCodesAnywhere) {
  for (int s = 1; s <= 6; ++s) {
    const io::Reader reader(shard(s));
    for (const auto& t : reader.tensors()) {
      const std::vector<uint8_t> bytes = read_tensor(reader, t.name);
      size_t nan = 0;
      if (t.dtype == Dtype::F8_E4M3) {
        nan = size_t(std::count_if(bytes.begin(), bytes.end(), [](uint8_t b) { return E4M3::is_nan(b); }));
      } else if (t.dtype == Dtype::F8_E8M0) {
        nan = size_t(std::count(bytes.begin(), bytes.end(), E8M0::nan_code));
      } else if (t.dtype == Dtype::BF16) {
        for (size_t i = 0; i + 1 < bytes.size(); i += 2) nan += std::isnan(bf16_to_float(uint16_t(bytes[i] | bytes[i + 1] << 8)));
      } else if (t.dtype == Dtype::F32) {
        for (size_t i = 0; i + 3 < bytes.size(); i += 4) {
          float v;
          std::memcpy(&v, &bytes[i], 4);
          nan += !std::isfinite(v);
        }
      }
      EXPECT_EQ(nan, 0u) << t.name << " in " << shard(s);
    }
  }
}

// Per row: 2^(e-127) scales over several binades, zero rows, and tiny rows whose NVFP4
// block scale underflows (block_amax / (6 * global) < 2^-9, global = amax / 2688).
TEST_F(FixtureTest, TableRowsSpreadOverBinadesWithZeroAndTinyRows) {
  const io::Reader reader(shard(5));
  const std::vector<uint8_t> codes = read_tensor(reader, "layers.1.engram.embed.weight");
  const std::vector<uint8_t> scales = read_tensor(reader, "layers.1.engram.embed.scale");
  const size_t rows = codes.size() / 256;
  std::vector<float> block_amax(rows * 8, 0.0f);
  float amax = 0.0f;
  for (size_t i = 0; i < codes.size(); ++i) {
    const float v = std::fabs(e4m3_to_float(codes[i]) * e8m0_to_float(scales[i / 32]));
    block_amax[i / 32] = std::max(block_amax[i / 32], v);
    amax = std::max(amax, v);
  }
  const float global = amax / (6.0f * 448.0f);
  size_t zero_rows = 0, underflow_blocks = 0;
  std::set<int> row_binades;
  for (size_t r = 0; r < rows; ++r) {
    const float row_amax = *std::max_element(&block_amax[8 * r], &block_amax[8 * r + 8]);
    if (row_amax == 0.0f) {
      ++zero_rows;
      continue;
    }
    row_binades.insert(std::ilogb(row_amax));
    for (size_t b = 8 * r; b < 8 * r + 8; ++b) underflow_blocks += block_amax[b] > 0.0f && block_amax[b] / (6.0f * global) < 0x1p-9f;
  }
  EXPECT_GE(zero_rows, 24u);              // at least the first row of every hash column
  EXPECT_LT(zero_rows, rows / 100);
  EXPECT_GE(underflow_blocks, 100u);
  EXPECT_LT(underflow_blocks, rows * 8 / 50);
  // Normal rows alone span 7 binades; tiny rows add more far below.
  EXPECT_GE(*row_binades.rbegin() - *row_binades.begin(), 6);
  EXPECT_GE(row_binades.size(), 8u);
}

// GPTQ must matter: per 256-column slice W_c of engram.wkv, the diagonal of H_c = W_c^T W_c
// varies (median max/min >= 30) and H_c is ill-conditioned (>= 100).
TEST_F(FixtureTest, WkvSlicesAreAnisotropic) {
  const io::Reader reader(shard(1));
  const io::TensorInfo& info = reader.tensor("layers.1.engram.wkv.weight");
  ASSERT_EQ(info.shape, (std::vector<uint64_t>{1280, 6144}));
  const std::vector<uint8_t> codes = read_tensor(reader, "layers.1.engram.wkv.weight");
  const std::vector<uint8_t> scales = read_tensor(reader, "layers.1.engram.wkv.scale");
  ASSERT_EQ(reader.tensor("layers.1.engram.wkv.scale").shape, (std::vector<uint64_t>{40, 192}));
  const size_t rows = 1280, cols = 6144;
  std::vector<double> diag_ratios, conditions;
  for (size_t c = 0; c < 24; ++c) {
    Eigen::MatrixXd w(rows, 256);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < 256; ++j) {
        const size_t col = 256 * c + j;
        w(Eigen::Index(r), Eigen::Index(j)) = double(e4m3_to_float(codes[r * cols + col])) *
                                              double(e8m0_to_float(scales[(r / 32) * 192 + col / 32]));
      }
    }
    const Eigen::MatrixXd h = w.transpose() * w;
    diag_ratios.push_back(h.diagonal().maxCoeff() / h.diagonal().minCoeff());
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(h, Eigen::EigenvaluesOnly);
    conditions.push_back(eigen.eigenvalues().maxCoeff() / eigen.eigenvalues().minCoeff());
  }
  std::sort(diag_ratios.begin(), diag_ratios.end());
  const double median_ratio = (diag_ratios[11] + diag_ratios[12]) / 2;
  EXPECT_GE(median_ratio, 30.0);
  EXPECT_GE(*std::min_element(conditions.begin(), conditions.end()), 100.0);
  std::printf("wkv layer 1: median diag ratio %.1f, condition numbers %.0f .. %.0f\n", median_ratio,
              *std::min_element(conditions.begin(), conditions.end()),
              *std::max_element(conditions.begin(), conditions.end()));
}

TEST_F(FixtureTest, RealTensorNamesAndScaleLayouts) {
  const io::Reader first(shard(1));
  const auto expect = [&](const io::Reader& reader, const std::string& name, Dtype dtype, std::vector<uint64_t> shape) {
    const io::TensorInfo* info = reader.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, dtype) << name;
    EXPECT_EQ(info->shape, shape) << name;
  };
  expect(first, "embed.weight", Dtype::BF16, {1024, 256});
  expect(first, "layers.0.attn.wq_a.weight", Dtype::F8_E4M3, {64, 256});
  expect(first, "layers.0.attn.wq_a.scale", Dtype::F8_E8M0, {2, 8});
  expect(first, "layers.0.ffn.experts.7.w1.weight", Dtype::I8, {128, 128});
  expect(first, "layers.0.ffn.experts.7.w1.scale", Dtype::F8_E8M0, {128, 8});
  expect(first, "layers.0.ffn.experts.7.w2.weight", Dtype::I8, {256, 64});
  expect(first, "layers.0.ffn.experts.7.w2.scale", Dtype::F8_E8M0, {256, 4});
  expect(first, "layers.0.ffn.shared_experts.w2.scale", Dtype::F8_E8M0, {8, 4});
  expect(first, "layers.1.engram.q_weight", Dtype::BF16, {4, 256});
  const io::Reader fourth(shard(4));
  expect(fourth, "head.weight", Dtype::BF16, {1024, 256});
  expect(fourth, "mtp.1.ffn.experts.0.w3.weight", Dtype::I8, {128, 128});
  expect(fourth, "layers.14.engram.wkv.scale", Dtype::F8_E8M0, {40, 192});
  const auto config = read_json(*dir_ / "config.json");
  EXPECT_EQ(config["quantization_config"]["weight_block_size"], nlohmann::json::array({32, 32}));
  EXPECT_EQ(config["quantization_config"]["scale_fmt"], "ue8m0");
  EXPECT_TRUE(fs::exists(*dir_ / "LICENSE"));
  EXPECT_TRUE(fs::exists(*dir_ / "tokenizer.json"));
}

// The reference NVFP4 checkpoint: ModelOpt tensors for routed experts and two experts whose
// three projections carry the model-wide maximum input_scale.
TEST(Fixture, ReferenceNvfp4Preset) {
  const fs::path dir = temp_dir("ref");
  make(dir, "dsv41-mini-ref-nvfp4", 1, 300);
  std::map<std::string, float> input_scales;
  for (int s = 1; s <= 6; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-00006.safetensors", s);
    const io::Reader reader(dir / name);
    for (const auto& t : reader.tensors()) {
      if (!t.name.ends_with(".input_scale")) continue;
      EXPECT_EQ(t.dtype, Dtype::F32);
      EXPECT_TRUE(t.shape.empty()) << t.name;
      float v;
      std::vector<uint8_t> bytes = read_tensor(reader, t.name);
      std::memcpy(&v, bytes.data(), 4);
      input_scales[t.name] = v;
    }
    if (s == 1) {
      EXPECT_EQ(reader.tensor("layers.0.ffn.experts.3.w1.weight").dtype, Dtype::U8);
      EXPECT_EQ(reader.tensor("layers.0.ffn.experts.3.w1.weight_scale").shape, (std::vector<uint64_t>{128, 16}));
      EXPECT_TRUE(reader.tensor("layers.0.ffn.experts.3.w1.weight_scale_2").shape.empty());
    }
    if (s == 5) {
      EXPECT_EQ(reader.tensor("layers.1.engram.embed.weight").dtype, Dtype::U8);
      EXPECT_EQ(reader.tensor("layers.1.engram.embed.weight").shape[1], 128u);
    }
  }
  EXPECT_EQ(input_scales.size(), 16u * 8u * 3u);
  float maximum = 0.0f;
  for (const auto& [name, v] : input_scales) maximum = std::max(maximum, v);
  // A fallback expert has all three projections at the maximum; the calibrated expert that
  // set the maximum has it on w1/w3 (one input) but not on w2.
  std::map<std::string, int> projections_at_maximum;
  for (const auto& [name, v] : input_scales) {
    if (v == maximum) ++projections_at_maximum[name.substr(0, name.rfind(".w"))];
  }
  const auto fallbacks = std::count_if(projections_at_maximum.begin(), projections_at_maximum.end(),
                                       [](const auto& entry) { return entry.second == 3; });
  EXPECT_EQ(fallbacks, 2);
  const auto hf_quant = read_json(dir / "hf_quant_config.json");
  EXPECT_EQ(hf_quant["quantization"]["group_size"], 16);
  EXPECT_TRUE(hf_quant["quantization"].contains("kv_cache_quant_algo"));
  EXPECT_TRUE(hf_quant["quantization"].contains("exclude_modules"));
  EXPECT_EQ(read_json(dir / "config.json")["quantization_config"]["quant_method"], "modelopt");
  fs::remove_all(dir);
}

TEST(Fixture, UnknownPresetRefused) {
  EXPECT_THROW(make(temp_dir("bad"), "dsv41-huge", 1, 0), std::exception);
}

TEST(Fixture, UnknownShapeRefused) {
  FixtureArgs args;
  args.shape = "real";
  args.out = temp_dir("bad_shape").string();
  EXPECT_THROW(plan_fixture(args), std::exception);
  EXPECT_THROW(write_fixture(args), std::exception);
  EXPECT_FALSE(fs::exists(args.out));
}

// The plan names what the writer writes: the same shards, each with the same tensors.
TEST_F(FixtureTest, PlanMatchesTheWrittenFixture) {
  FixtureArgs args;
  args.out = dir_->string();
  const FixturePlan plan = plan_fixture(args);
  ASSERT_EQ(plan.shards.size(), 6u);
  size_t tensors = 0;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    EXPECT_EQ(plan.shards[s], shard(int(s) + 1).filename().string());
    std::set<std::string> planned, written;
    for (const auto& spec : plan.tensors[s]) planned.insert(spec.name);
    const io::Reader reader(shard(int(s) + 1));
    for (const auto& t : reader.tensors()) written.insert(t.name);
    EXPECT_EQ(planned, written) << plan.shards[s];
    tensors += written.size();
  }
  EXPECT_EQ(plan.tensor_count(), tensors);
  EXPECT_EQ(read_json(*dir_ / "model.safetensors.index.json")["weight_map"].size(), tensors);
}

// Shape real-count (planned, not written): the real model's tensor count, 40 layers x 384
// routed experts + 3 MTP layers, at sizes that keep every block whole; one shard per
// layer, one for the head, one per MTP layer, one per table.
TEST(Fixture, RealCountShapeHasTheRealTensorCount) {
  FixtureArgs args;
  args.shape = "real-count";
  args.out = "unused";
  const FixturePlan plan = plan_fixture(args);
  ASSERT_EQ(plan.shards.size(), 46u);
  EXPECT_EQ(plan.shards.front(), "model-00001-of-00046.safetensors");
  EXPECT_EQ(plan.shards.back(), "model-00046-of-00046.safetensors");
  const std::regex expert(R"(^(layers|mtp)\.(\d+)\.ffn\.experts\.(\d+)\.w([123])\.(weight|scale)$)");
  std::map<std::string, size_t> shard_of;
  size_t main_experts = 0, mtp_experts = 0, fp8_linears = 0;
  std::set<int> expert_ids;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    for (const auto& spec : plan.tensors[s]) {
      shard_of[spec.name] = s;
      std::smatch m;
      if (std::regex_match(spec.name, m, expert)) {
        const bool w2 = m[4] == "2", weight = m[5] == "weight";
        const std::vector<uint64_t> shape = weight ? std::vector<uint64_t>{w2 ? 64u : 32u, w2 ? 16u : 32u}
                                                   : std::vector<uint64_t>{w2 ? 64u : 32u, w2 ? 1u : 2u};
        EXPECT_EQ(spec.dtype, weight ? Dtype::I8 : Dtype::F8_E8M0) << spec.name;
        EXPECT_EQ(spec.shape, shape) << spec.name;
        if (weight) ++(m[1] == "mtp" ? mtp_experts : main_experts);
        expert_ids.insert(std::stoi(m[3]));
        if (m[1] == "layers") {
          EXPECT_EQ(s, size_t(std::stoi(m[2]))) << spec.name; // one shard per layer
        }
        if (m[1] == "mtp") {
          EXPECT_EQ(s, 41u + size_t(std::stoi(m[2]))) << spec.name;
        }
      }
      if (spec.dtype == Dtype::F8_E4M3 && spec.name.ends_with(".weight") && !spec.name.ends_with("embed.weight")) {
        ++fp8_linears;
        for (uint64_t d : spec.shape) EXPECT_EQ(d % 32, 0u) << spec.name; // whole 32x32 blocks
      }
    }
  }
  EXPECT_EQ(main_experts, 40u * 384u * 3u);
  EXPECT_EQ(mtp_experts, 3u * 384u * 3u);
  EXPECT_EQ(expert_ids.size(), 384u);
  // Per layer 5 attention + 3 shared-expert linears, compressor and indexer (4) at 7
  // layers, Engram wkv at 2; per MTP layer e_proj, h_proj, 5 attention, 3 shared.
  EXPECT_EQ(fp8_linears, 40u * 8u + 7u * 4u + 2u + 3u * 10u);
  // Per layer 2333 (1 + 13 attention + 6 mHC + 1 + 2312 MoE), +10 at a compressor layer,
  // +4 at an Engram layer; embed and head 6; MTP 2334 each; the 2 tables' 4.
  EXPECT_EQ(plan.tensor_count(), 40u * 2333u + 7u * 10u + 2u * 4u + 6u + 3u * 2334u + 4u);
  EXPECT_EQ(shard_of.at("embed.weight"), 0u);
  EXPECT_EQ(shard_of.at("head.weight"), 40u);
  EXPECT_EQ(shard_of.at("layers.14.engram.wkv.weight"), 14u);
  EXPECT_EQ(plan.tensors[44].size(), 2u);
  EXPECT_EQ(plan.tensors[45].size(), 2u);
  EXPECT_EQ(shard_of.at("layers.1.engram.embed.weight"), 44u);
  EXPECT_EQ(shard_of.at("layers.14.engram.embed.scale"), 45u);
  // The Engram config and tables follow the prime layout from the shape's vocab (300).
  const auto expected = expected_table_rows(300);
  EXPECT_EQ(plan.engram.layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(plan.engram.num_embeddings, expected);
  const EngramLayout layout(plan.engram);
  for (size_t i = 0; i < 2; ++i) {
    const auto& table = plan.tensors[44 + i][0];
    EXPECT_EQ(table.shape, (std::vector<uint64_t>{expected[i], 256})) << table.name;
    EXPECT_NO_THROW(layout.check(plan.engram.layer_ids[i], table.shape[0]));
  }
}

// The real-count reference: ModelOpt tensors for the 40 main layers' experts (an
// input_scale per projection), DeepSeek's for the MTP layers, the same shards otherwise.
TEST(Fixture, RealCountReferenceHasNvfp4Experts) {
  FixtureArgs args;
  args.shape = "real-count";
  args.preset = "dsv41-mini-ref-nvfp4";
  args.out = "unused";
  const FixturePlan plan = plan_fixture(args);
  ASSERT_EQ(plan.shards.size(), 46u);
  size_t input_scales = 0, nvfp4_weights = 0, mtp_fp4 = 0;
  for (const auto& shard : plan.tensors) {
    for (const auto& spec : shard) {
      if (spec.name.ends_with(".input_scale")) ++input_scales;
      if (spec.name.ends_with(".weight_scale")) {
        ++nvfp4_weights;
        EXPECT_EQ(spec.dtype, Dtype::F8_E4M3);
        EXPECT_EQ(spec.shape[1] * 16, spec.name.find(".w2.") != std::string::npos ? 32u : 64u) << spec.name;
      }
      if (spec.name.starts_with("mtp.") && spec.name.find(".experts.") != std::string::npos && spec.dtype == Dtype::I8) ++mtp_fp4;
    }
  }
  EXPECT_EQ(input_scales, 40u * 384u * 3u);
  EXPECT_EQ(nvfp4_weights, 40u * 384u * 3u);
  EXPECT_EQ(mtp_fp4, 3u * 384u * 3u);
  EXPECT_EQ(plan.tensor_count(), 100410u + 40u * 384u * 3u * 2u);
  // Same vocab, same tables: the reference's Engram config matches the source's.
  args.preset = "dsv41-mini";
  EXPECT_EQ(plan.engram.num_embeddings, plan_fixture(args).engram.num_embeddings);
}

} // namespace
} // namespace shardq

namespace shardq {
namespace {

// The fixture's inline E4M3 conversion agrees with the kernels' for every fp32 in
// [-448, 448] (every 61st bit pattern, plus exact ties and the edges).
TEST(FixtureContent, InlineE4m3MatchesKernel) {
  const uint32_t limit = std::bit_cast<uint32_t>(448.0f);
  for (uint32_t bits = 0; bits <= limit; bits += 61) {
    for (float x : {std::bit_cast<float>(bits), -std::bit_cast<float>(bits)}) {
      ASSERT_EQ(fixture::e4m3_code_in_range(x), e4m3_from_float(x)) << x;
    }
  }
  for (float x : {0.0f, -0.0f, 448.0f, -448.0f, 0x1p-6f, 0x1.fp-7f, 0x1p-10f, 0x3p-10f, 0x1.1p-6f, 0x1.12p3f, 0x1.18p3f,
                  0x1.28p3f, 0x1.fp8f, 0x1.f8p-7f}) {
    EXPECT_EQ(fixture::e4m3_code_in_range(x), e4m3_from_float(x)) << x;
  }
}

} // namespace
} // namespace shardq
