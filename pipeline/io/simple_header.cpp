#include "pipeline/io/simple_header.h"

#include <unordered_set>

#include "pipeline/io/declining_sax.h"

namespace shardq::io {
namespace {

// Returns false (stop) at the first event that leaves the simple shape.
class SimpleHeaderEvents : public DecliningSax {
 public:
  SimpleHeader take() { return std::move(header_); }

  bool start_object(std::size_t) {
    if (where_ == Where::before_root) return enter(Where::root);
    if (where_ == Where::entry_value && pending_key_ == "__metadata__") {
      if (seen_metadata_) return false;
      seen_metadata_ = true;
      return enter(Where::metadata);
    }
    if (where_ != Where::entry_value || pending_key_.empty()) return false;
    header_.tensors.emplace_back().name = std::move(pending_key_);
    fields_ = 0;
    return enter(Where::tensor);
  }
  bool end_object() {
    if (where_ == Where::tensor && fields_ != kAllFields) return false;
    where_ = where_ == Where::root ? Where::after_root : Where::root;
    return true;
  }
  bool key(Json::string_t& key) {
    switch (where_) {
      case Where::root:
        pending_key_ = std::move(key);
        where_ = Where::entry_value;
        return true;
      case Where::metadata:
        pending_key_ = std::move(key);
        where_ = Where::metadata_value;
        return true;
      case Where::tensor:
        field_ = key == "dtype" ? kDtype : key == "shape" ? kShape : key == "data_offsets" ? kOffsets : 0;
        if (field_ == 0 || (fields_ & field_)) return false;
        fields_ |= field_;
        where_ = Where::field_value;
        return true;
      default: return false;
    }
  }
  bool string(Json::string_t& value) {
    if (where_ == Where::metadata_value) {
      where_ = Where::metadata;
      return header_.metadata.emplace(std::move(pending_key_), std::move(value)).second;
    }
    if (where_ != Where::field_value || field_ != kDtype) return false;
    const auto dtype = parse_dtype(value);
    if (!dtype) return false;
    header_.tensors.back().dtype = *dtype;
    where_ = Where::tensor;
    return true;
  }
  bool start_array(std::size_t) {
    if (where_ != Where::field_value || field_ == kDtype) return false;
    where_ = Where::numbers;
    numbers_.clear();
    return true;
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    if (where_ != Where::numbers) return false;
    numbers_.push_back(value);
    return true;
  }
  bool end_array() {
    if (where_ != Where::numbers) return false;
    TensorInfo& tensor = header_.tensors.back();
    if (field_ == kShape) {
      tensor.shape = numbers_;
    } else {
      if (numbers_.size() != 2) return false;
      tensor.begin = numbers_[0];
      tensor.end = numbers_[1];
    }
    where_ = Where::tensor;
    return true;
  }

 private:
  enum class Where { before_root, root, entry_value, metadata, metadata_value, tensor, field_value, numbers, after_root };
  static constexpr int kDtype = 1, kShape = 2, kOffsets = 4, kAllFields = 7;

  bool enter(Where where) {
    where_ = where;
    return true;
  }

  Where where_ = Where::before_root;
  std::string pending_key_;     // a root key (tensor name) or a metadata key, before its value
  bool seen_metadata_ = false;
  int field_ = 0, fields_ = 0;  // the tensor field being read; the fields read so far
  std::vector<uint64_t> numbers_;
  SimpleHeader header_;
};

bool names_unique(const std::vector<TensorInfo>& tensors) {
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    if (!names.insert(tensor.name).second) return false;
  }
  return true;
}

} // namespace

std::optional<SimpleHeader> parse_simple_header(std::string_view header_json) {
  SimpleHeaderEvents events;
  if (!sax_accepts(header_json, events)) return std::nullopt;
  SimpleHeader header = events.take();
  if (!names_unique(header.tensors)) return std::nullopt;
  return header;
}

} // namespace shardq::io
