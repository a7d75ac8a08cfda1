// channel/rejection_log.cc: see rejection_log.h.
#include "channel/rejection_log.h"

#include <utility>

namespace channel {

RejectionLog::RejectionLog(std::FILE* out, std::string prefix, int burst, std::chrono::seconds interval)
    : out_(out), prefix_(std::move(prefix)), burst_(burst), interval_(interval) {}

void RejectionLog::flush(Clock::time_point now) {
  if (!started_ || now - window_start_ < interval_) return;
  if (window_suppressed_ > 0) {
    std::fprintf(out_, "%s%llu more rejections suppressed in the last %lld s\n", prefix_.c_str(),
                 static_cast<unsigned long long>(window_suppressed_),
                 static_cast<long long>(interval_.count()));
    std::fflush(out_);
  }
  started_ = false;
  window_lines_ = 0;
  window_suppressed_ = 0;
}

void RejectionLog::note(const std::string& why, Clock::time_point now) {
  flush(now);
  if (!started_) {
    started_ = true;
    window_start_ = now;
  }
  if (window_lines_ < burst_) {
    ++window_lines_;
    ++printed_;
    std::fprintf(out_, "%s%s\n", prefix_.c_str(), why.c_str());
    std::fflush(out_);
  } else {
    ++window_suppressed_;
    ++suppressed_;
  }
}

}  // namespace channel
