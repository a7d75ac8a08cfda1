// ShardedCli: the options of `weightsync-bench sharded` and of its hidden roles.
#include "cli_values.h"
#include "sharded.h"

namespace wsbench {

ShardedCli::ShardedCli(CLI::App& app) {
  sharded_ = app.add_subcommand(
      "sharded",
      "Sharded sync: R publisher processes (trainer ranks, each the dim-0 shard of every matrix) x T reader "
      "processes (tensor-parallel engine ranks: RoutingPlan + SubscriberGroup, column-parallel matrices "
      "split "
      "by rows, row-parallel ones by columns), beside a single publisher of the whole model pulled by one "
      "Subscriber (the same bytes) and by T readers of their slices (1 x T), interleaved in the same run, "
      "per "
      "transport; aggregate GB/s = model bytes / (start signal -> last reader done). docs/perf/sharded.md");
  sharded_->add_option("--ranks", config_.ranks, "Publisher processes R (trainer ranks)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sharded_->add_option("--readers", config_.readers, "Reader processes T (engine ranks, tensor parallel)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sharded_->add_option("--size", size_, "Model bytes in all (B, KiB, MiB, GiB)")->capture_default_str();
  sharded_->add_option("--transports", transports_, "Transports, comma-separated (tcp, shm, ...)")
      ->capture_default_str();
  sharded_->add_option("--runs", config_.runs, "Measured runs per row (medians are reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sharded_
      ->add_option("--warmup", config_.warmup,
                   "Unmeasured runs per row first (>= 3: every slot of the 3-slot rings read once)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  sharded_->add_option("--json", config_.json, "Write every sample, the medians and the machine to FILE");
  sharded_->add_flag(
      "--checksum", config_.checksum,
      "Publishers compute checksums (whole versions at publish; a partial pull's view on its first "
      "lease of each version) and readers verify them");
  sharded_
      ->add_option(
          "--verify", config_.verify,
          "Check the delivered bytes after each pull, outside the timed window: sample (first, last and "
          "~32 rows of every block) or full (every byte)")
      ->check(CLI::IsMember({"sample", "full"}))
      ->capture_default_str();
  sharded_->add_option("--width", config_.model.width, "Columns (float32) of every matrix")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  sharded_
      ->add_option("--matrices", config_.model.matrices, "Matrices in the model (even: half of each kind)")
      ->check(CLI::Range(2, 4096))
      ->capture_default_str();
  sharded_->add_flag("--no-tp1", no_tp1_, "Skip the 1 x T row (the whole-model publisher, T slice readers)");
  sharded_->add_option("--target", config_.target, "The sharded/single ratio to reach (PASS/MISS)")
      ->capture_default_str();

  // The per-process roles (not for direct use).
  publisher_ = app.add_subcommand("sharded-publisher", "")->group("");
  publisher_->add_option("--model", model_)->required();
  publisher_->add_option("--ranks", role_ranks_)->required();
  publisher_->add_option("--rank", role_rank_)->required();
  publisher_->add_flag("--checksum", role_checksum_);
  reader_ = app.add_subcommand("sharded-reader", "")->group("");
  reader_->add_option("--model", model_)->required();
  reader_->add_option("--ranks", role_ranks_);
  reader_->add_option("--readers", role_readers_);
  reader_->add_option("--rank", role_rank_);
  reader_->add_option("--addresses", addresses_)->required();
  reader_->add_option("--transport", transport_)->required();
  reader_->add_option("--verify", verify_);
  reader_->add_flag("--single", single_);
}

std::optional<int> ShardedCli::run(const std::string& self_exe, const std::string& command_line) {
  if (*publisher_ || *reader_) {
    auto model = ShardedModel::decode(model_);
    if (!model) {
      std::fprintf(stderr, "weightsync-bench: bad --model '%s'\n", model_.c_str());
      return 2;
    }
    if (*publisher_) return run_sharded_publisher(*model, role_ranks_, role_rank_, role_checksum_);
    return run_sharded_reader(*model, role_ranks_, role_readers_, role_rank_, split_list(addresses_),
                              transport_, single_, verify_);
  }
  if (!*sharded_) return std::nullopt;
  config_.self_exe = self_exe;
  config_.command_line = command_line;
  config_.tp1 = !no_tp1_;
  config_.model.total_bytes = parse_bytes(size_, "--size");
  config_.transports = split_list(transports_);
  if (config_.transports.empty()) {
    std::fprintf(stderr, "weightsync-bench sharded: --transports is empty\n");
    return 2;
  }
  const std::string why = config_.model.check(config_.ranks, config_.readers);
  if (!why.empty()) {
    std::fprintf(stderr, "weightsync-bench sharded: %s\n", why.c_str());
    return 2;
  }
  return run_sharded(config_);
}

}  // namespace wsbench
