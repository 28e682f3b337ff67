#include "pipeline/link.h"

#include <fmt/format.h>

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

Link::Link() {
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

void Link::send(int dest, Tag tag, std::vector<uint8_t> bytes) {
  if (dest == rank_) {
    inbox_.push_back({rank_, tag, std::move(bytes)});
    return;
  }
  pending_.push_back({MPI_REQUEST_NULL, std::move(bytes)});
  auto& send = pending_.back();
  check_mpi(MPI_Isend(send.bytes.data(), int(send.bytes.size()), MPI_BYTE, dest, int(tag), MPI_COMM_WORLD, &send.request),
            "MPI_Isend");
}

void Link::send_all(Tag tag, const std::vector<uint8_t>& bytes) {
  for (int dest = 0; dest < size_; ++dest) send(dest, tag, bytes);
}

std::optional<Message> Link::poll() {
  if (!inbox_.empty()) {
    Message message = std::move(inbox_.front());
    inbox_.pop_front();
    return message;
  }
  int flag = 0;
  MPI_Status status;
  check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status), "MPI_Iprobe");
  if (!flag) return std::nullopt;
  int count = 0;
  check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
  Message message{status.MPI_SOURCE, Tag(status.MPI_TAG), std::vector<uint8_t>(size_t(count))};
  check_mpi(MPI_Recv(message.bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE),
            "MPI_Recv");
  return message;
}

void Link::progress() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    check_mpi(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    it = done ? pending_.erase(it) : std::next(it);
  }
}

void Link::drain() {
  for (auto& send : pending_) check_mpi(MPI_Wait(&send.request, MPI_STATUS_IGNORE), "MPI_Wait");
  pending_.clear();
}

} // namespace shardq
