// ThreadSanitizer annotations. Under -fsanitize=thread, WS_SEQLOCK_READ_BEGIN/END
// mark reads of slot memory that may race with a writer by design (the seqlock
// read side: the stamp re-read afterwards decides whether the bytes count;
// docs/consistency.md). Elsewhere they compile to nothing.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define WS_HAVE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WS_HAVE_TSAN 1
#endif
#endif

#ifdef WS_HAVE_TSAN
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#define WS_SEQLOCK_READ_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define WS_SEQLOCK_READ_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define WS_SEQLOCK_READ_BEGIN() \
  do {                          \
  } while (0)
#define WS_SEQLOCK_READ_END() \
  do {                        \
  } while (0)
#endif

namespace weightsync::detail {
// RAII form of WS_SEQLOCK_READ_BEGIN/END (ends even if a callback throws).
struct SeqlockReadScope {
  SeqlockReadScope() { WS_SEQLOCK_READ_BEGIN(); }
  ~SeqlockReadScope() { WS_SEQLOCK_READ_END(); }
  SeqlockReadScope(const SeqlockReadScope&) = delete;
  SeqlockReadScope& operator=(const SeqlockReadScope&) = delete;
};
}  // namespace weightsync::detail
