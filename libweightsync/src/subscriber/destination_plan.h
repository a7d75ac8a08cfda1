// A Destination checked against a layout and expanded into the reads that
// fill it: what Subscriber::prepare() builds a PullPlan from, and what
// StagedUpdates copies a staged version into fixed addresses with.
//
// Contract: pure functions of their arguments (device pointers are checked
// with the device backend: device memory of the current device); any thread.
// Errors are kInvalidArgument with the reason, or the device backend's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ring/read_plan.h"
#include "weightsync/layout.h"
#include "weightsync/status.h"
#include "weightsync/subscriber.h"
#include "wire/messages.h"

namespace weightsync::detail {

struct DestinationReads {
  // Whole destinations: one read per tensor (contiguous: runs of tensors with
  // no padding between them coalesced). Partial: one per slice range, in
  // slice order then range order (a slice whose ranges are contiguous on
  // both sides is one read).
  std::vector<ReadPiece> pieces;
  bool partial = false;
  std::uint64_t bytes = 0;  // payload bytes the reads move
  // Partial only: the ranges as the publisher's view lists them, and the
  // destination spans to register (touching ones merged).
  std::vector<ViewEntry> view;
  std::vector<std::pair<void*, std::size_t>> spans;
};

Result<DestinationReads> plan_destination(const WeightLayout& layout, const Destination& dst);

}  // namespace weightsync::detail
