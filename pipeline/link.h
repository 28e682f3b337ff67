// Messages between ranks: MPI point-to-point for other ranks, an in-process inbox for
// messages a rank sends to itself. A process no launcher started (no mpirun, srun or
// other PMI launcher in its environment) runs as the only rank without MPI at all:
// MPI_Init alone would fork an Open MPI daemon (~0.4 s) to learn that the world is one. Only the main thread of a rank uses a Link
// (MPI_THREAD_FUNNELED); sends and receives are non-blocking, so two ranks sending each
// other large chunks never deadlock, and a rank never spins inside MPI while a large
// message (a layer's factors, ~25 MB) trickles in at the pace of the sender's progress.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <mpi.h>

namespace shardq {

enum class Tag : int {
  request = 1,   // worker -> 0: WorkRequest
  assign,        // 0 -> worker: WorkItems (none: ask again later)
  reduce_result, // worker -> 0: ReduceResult
  factor_result, // worker -> 0: FactorResult + gram + upper
  chunk_data,    // worker -> owner: ChunkResult + the task's output buffers
  chunk_done,    // writer -> 0: ChunkResult (bytes are durable)
  dropped,       // worker -> 0: WorkItems not done (interrupted)
  finalize,      // 0 -> owner: FinalizeShard + its group scalars
  finalized,     // owner -> 0: int32 shard
  factors,       // 0 -> worker: int32 set + a factor set's Gram and factor matrices
  cancel,        // 0 -> all (no bytes): drop in-flight work
  stop,          // 0 -> all: int exit code
  interrupt,     // any -> 0 (no bytes): a stop signal arrived here
  stopped,       // worker -> 0 (no bytes): its last message (the shutdown handshake)
};

// The tag's name as the enum spells it, for log lines.
std::string_view tag_name(Tag tag);

struct Message {
  int source = 0;
  Tag tag{};
  std::vector<uint8_t> bytes;
};

// Plain structs travel as bytes; payloads (spans) follow the header.
template <typename Header>
std::vector<uint8_t> encode(const Header& header, std::initializer_list<std::span<const uint8_t>> payloads = {}) {
  static_assert(std::is_trivially_copyable_v<Header>);
  size_t size = sizeof(Header);
  for (auto p : payloads) size += p.size();
  std::vector<uint8_t> bytes(size);
  std::memcpy(bytes.data(), &header, sizeof(Header));
  size_t at = sizeof(Header);
  for (auto p : payloads) {
    std::memcpy(bytes.data() + at, p.data(), p.size());
    at += p.size();
  }
  return bytes;
}

// The same with a list of payloads known only at run time (a task's output buffers).
template <typename Header>
std::vector<uint8_t> encode(const Header& header, const std::vector<std::vector<uint8_t>>& payloads) {
  static_assert(std::is_trivially_copyable_v<Header>);
  size_t size = sizeof(Header);
  for (const auto& p : payloads) size += p.size();
  std::vector<uint8_t> bytes(size);
  std::memcpy(bytes.data(), &header, sizeof(Header));
  size_t at = sizeof(Header);
  for (const auto& p : payloads) {
    if (!p.empty()) std::memcpy(bytes.data() + at, p.data(), p.size());
    at += p.size();
  }
  return bytes;
}

template <typename Header>
Header decode(const std::vector<uint8_t>& bytes) {
  static_assert(std::is_trivially_copyable_v<Header>);
  Header header;
  std::memcpy(&header, bytes.data(), sizeof(Header));
  return header;
}

// A list of plain records as message bytes, back to back (assign: the items in the order
// they were taken, none meaning "nothing yet, ask later"; chunk_done: the chunks one
// fsync made durable). decode_array throws PipelineError unless the bytes are whole records.
template <class Record>
std::vector<uint8_t> encode_array(const std::vector<Record>& records) {
  static_assert(std::is_trivially_copyable_v<Record>);
  std::vector<uint8_t> bytes(records.size() * sizeof(Record));
  if (!records.empty()) std::memcpy(bytes.data(), records.data(), bytes.size());
  return bytes;
}
void check_whole_records(size_t bytes, size_t record_size, std::string_view what);
template <class Record>
std::vector<Record> decode_array(std::span<const uint8_t> bytes, std::string_view what) {
  static_assert(std::is_trivially_copyable_v<Record>);
  check_whole_records(bytes.size(), sizeof(Record), what);
  std::vector<Record> records(bytes.size() / sizeof(Record));
  if (!records.empty()) std::memcpy(records.data(), bytes.data(), bytes.size());
  return records;
}

inline std::span<const uint8_t> payload(const std::vector<uint8_t>& bytes, size_t header_size) {
  return std::span<const uint8_t>(bytes).subspan(header_size);
}

// The largest message MPI carries: its counts are `int`.
inline constexpr uint64_t kMaxMessageBytes = uint64_t(std::numeric_limits<int>::max());

// Whether a launcher started this process (mpirun, srun --mpi=pmix, a PMI launcher): only
// then does `run` initialize MPI.
bool launched_by_mpi();

class Link {
 public:
  Link(); // MPI's world when MPI is initialized, else a world of one
  int rank() const { return rank_; }
  int size() const { return size_; }
  // `value` as rank 0 has it, on every rank.
  int broadcast(int value) const;
  // Every rank's record on rank 0 (in rank order); the other ranks get none.
  template <class Record> std::vector<Record> gather(const Record& mine) const;
  std::string host_name() const; // this rank's processor name

  void send(int dest, Tag tag, std::vector<uint8_t> bytes);
  void send_all(Tag tag, const std::vector<uint8_t>& bytes); // every rank, self included
  // The next message that has arrived whole, in the order the messages were matched.
  std::optional<Message> poll();
  void progress(); // retire finished sends
  void drain();    // wait for every send and matched receive to finish
  bool transferring() const { return !pending_.empty() || !incoming_.empty(); }
  uint64_t unsent_bytes() const { return pending_bytes_; } // of sends not yet complete
  // The most bytes unsent at once, the largest message and all bytes sent to other ranks
  // (for the back-pressure line).
  uint64_t peak_unsent_bytes() const { return peak_pending_bytes_; }
  uint64_t largest_message_bytes() const { return largest_message_bytes_; }
  uint64_t sent_bytes() const { return sent_bytes_; }

 private:
  struct PendingSend {
    MPI_Request request;
    std::vector<uint8_t> bytes;
  };
  struct PendingReceive {
    MPI_Request request;
    Message message;
  };
  void start_receives();
  void gather_bytes(const void* mine, size_t size, void* all) const;
  bool mpi_ = false; // MPI initialized (launched), else the only rank
  int rank_ = 0, size_ = 1;
  std::deque<Message> inbox_;
  std::list<PendingSend> pending_;
  uint64_t pending_bytes_ = 0;
  uint64_t peak_pending_bytes_ = 0;
  uint64_t largest_message_bytes_ = 0;
  uint64_t sent_bytes_ = 0;
  std::deque<PendingReceive> incoming_; // matched, in match order (deque: stable references)
};

// Text into a gathered record's fixed field, NUL-terminated; text too long for it is cut
// and ends in "..." so the reader sees it was.
template <size_t N> void copy_to_field(std::string_view text, char (&field)[N]) {
  static constexpr char kCut[] = "...";
  static_assert(N > sizeof(kCut));
  if (text.size() < N) {
    std::memcpy(field, text.data(), text.size());
    field[text.size()] = '\0';
    return;
  }
  const size_t kept = N - sizeof(kCut);
  std::memcpy(field, text.data(), kept);
  std::memcpy(field + kept, kCut, sizeof(kCut));
}

// MPI failures: the call, the rank and the code's text.
void check_mpi(int code, const char* call);

template <class Record> std::vector<Record> Link::gather(const Record& mine) const {
  static_assert(std::is_trivially_copyable_v<Record>);
  std::vector<Record> all(rank_ == 0 ? size_t(size_) : 0);
  gather_bytes(&mine, sizeof(Record), all.data());
  return all;
}

} // namespace shardq
