// StreamTable (publisher/stream_table.h): the named streams, bounded.
#include "publisher/stream_table.h"

#include "wire/stream_messages.h"

namespace weightsync::detail {

Status StreamTable::add(std::shared_ptr<const ServedStream> stream) {
  if (!stream || stream->state.ring == nullptr)
    return Status(ErrorCode::kInvalidArgument, "no stream to add");
  if (std::string why = stream_name_problem(stream->name); !why.empty()) {
    return Status(ErrorCode::kInvalidArgument, why + " ('" + stream->name.substr(0, kMaxStreamName) + "')");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_.count(stream->name) != 0) {
    return Status(ErrorCode::kInvalidArgument, "an adapter named '" + stream->name + "' is already served");
  }
  if (streams_.size() >= max_streams_) {
    return Status(ErrorCode::kBusy, "already " + std::to_string(streams_.size()) +
                                        " adapters served, the most this publisher allows (max_adapters); "
                                        "remove one first");
  }
  const std::string name = stream->name;
  streams_.emplace(name, std::move(stream));
  return Status();
}

std::shared_ptr<const ServedStream> StreamTable::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(name);
  return it == streams_.end() ? nullptr : it->second;
}

std::shared_ptr<const ServedStream> StreamTable::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(name);
  if (it == streams_.end()) return nullptr;
  auto removed = std::move(it->second);
  streams_.erase(it);
  return removed;
}

std::vector<std::shared_ptr<const ServedStream>> StreamTable::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const ServedStream>> out;
  for (const auto& [name, stream] : streams_) out.push_back(stream);
  return out;
}

std::vector<std::string> StreamTable::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, stream] : streams_) out.push_back(name);
  return out;
}

std::size_t StreamTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

}  // namespace weightsync::detail
