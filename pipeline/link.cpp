#include "pipeline/link.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "pipeline/pipeline_error.h"

namespace shardq {

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw PipelineError(fmt::format("rank {}: {} failed: {}", rank, call, std::string(text, size_t(length))));
}

void check_whole_records(size_t bytes, size_t record_size, std::string_view what) {
  if (bytes % record_size != 0) {
    throw PipelineError(fmt::format("a {} message of {} bytes is not a whole number of {}-byte records", what, bytes, record_size));
  }
}

std::string_view tag_name(Tag tag) {
  switch (tag) {
    case Tag::request: return "request";
    case Tag::assign: return "assign";
    case Tag::reduce_result: return "reduce_result";
    case Tag::factor_result: return "factor_result";
    case Tag::chunk_data: return "chunk_data";
    case Tag::chunk_done: return "chunk_done";
    case Tag::dropped: return "dropped";
    case Tag::finalize: return "finalize";
    case Tag::finalized: return "finalized";
    case Tag::factors: return "factors";
    case Tag::cancel: return "cancel";
    case Tag::stop: return "stop";
    case Tag::interrupt: return "interrupt";
    case Tag::stopped: return "stopped";
  }
  return "unknown";
}

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(variable)) return true;
  }
  return false;
}

Link::Link() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  mpi_ = initialized != 0;
  if (!mpi_) return;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

int Link::broadcast(int value) const {
  if (mpi_) check_mpi(MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return value;
}

void Link::gather_bytes(const void* mine, size_t size, void* all) const {
  if (!mpi_) {
    std::memcpy(all, mine, size);
    return;
  }
  check_mpi(MPI_Gather(mine, int(size), MPI_BYTE, all, int(size), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Gather");
}

std::string Link::host_name() const {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  if (mpi_) {
    check_mpi(MPI_Get_processor_name(host, &length), "MPI_Get_processor_name");
    return std::string(host, size_t(length));
  }
  if (gethostname(host, sizeof host - 1) != 0) throw PipelineError("gethostname failed");
  return host;
}

void Link::send(int dest, Tag tag, std::vector<uint8_t> bytes) {
  if (dest == rank_) {
    inbox_.push_back({rank_, tag, std::move(bytes)});
    return;
  }
  if (bytes.size() > kMaxMessageBytes) {
    throw PipelineError(fmt::format("rank {}: a message of {} bytes to rank {} ({}): MPI counts end at 2 GiB{}", rank_,
                                    bytes.size(), dest, tag == Tag::chunk_data ? "a chunk for its shard" : "a factor set",
                                    tag == Tag::chunk_data ? "; lower run.rows_per_chunk" : ""));
  }
  pending_bytes_ += bytes.size();
  peak_pending_bytes_ = std::max(peak_pending_bytes_, pending_bytes_);
  largest_message_bytes_ = std::max<uint64_t>(largest_message_bytes_, bytes.size());
  sent_bytes_ += bytes.size();
  pending_.push_back({MPI_REQUEST_NULL, std::move(bytes)});
  auto& send = pending_.back();
  check_mpi(MPI_Isend(send.bytes.data(), int(send.bytes.size()), MPI_BYTE, dest, int(tag), MPI_COMM_WORLD, &send.request),
            "MPI_Isend");
}

void Link::send_all(Tag tag, const std::vector<uint8_t>& bytes) {
  for (int dest = 0; dest < size_; ++dest) send(dest, tag, bytes);
}

// Posts a receive for every message that has arrived (a matched probe takes it off the
// queue, so no later probe sees it again).
void Link::start_receives() {
  while (mpi_) {
    int flag = 0;
    MPI_Message handle;
    MPI_Status status;
    check_mpi(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &handle, &status), "MPI_Improbe");
    if (!flag) return;
    int count = 0;
    check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    auto& receive = incoming_.emplace_back(
        PendingReceive{MPI_REQUEST_NULL, Message{status.MPI_SOURCE, Tag(status.MPI_TAG), std::vector<uint8_t>(size_t(count))}});
    check_mpi(MPI_Imrecv(receive.message.bytes.data(), count, MPI_BYTE, &handle, &receive.request), "MPI_Imrecv");
  }
}

std::optional<Message> Link::poll() {
  start_receives();
  // Whole messages move to the inbox in match order: a chunk's data is never overtaken by
  // a small message its sender sent after it.
  while (!incoming_.empty()) {
    int done = 0;
    check_mpi(MPI_Test(&incoming_.front().request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) break;
    inbox_.push_back(std::move(incoming_.front().message));
    incoming_.pop_front();
  }
  if (inbox_.empty()) return std::nullopt;
  Message message = std::move(inbox_.front());
  inbox_.pop_front();
  return message;
}

void Link::progress() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    check_mpi(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) pending_bytes_ -= it->bytes.size();
    it = done ? pending_.erase(it) : std::next(it);
  }
}

void Link::drain() {
  for (auto& send : pending_) check_mpi(MPI_Wait(&send.request, MPI_STATUS_IGNORE), "MPI_Wait");
  pending_.clear();
  pending_bytes_ = 0;
  // Matched messages nobody will read any more (the run is over) still complete before
  // MPI_Finalize.
  for (auto& receive : incoming_) check_mpi(MPI_Wait(&receive.request, MPI_STATUS_IGNORE), "MPI_Wait");
  incoming_.clear();
}

} // namespace shardq
