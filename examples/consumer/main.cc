// The smallest complete use of libweightsync: publish one version of two
// tensors and pull it straight into two separate buffers (scatter).
#include <weightsync/weightsync.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace weightsync;
  auto layout = WeightLayout::build({{"embed", DType::kFloat32, {256, 64}}, {"head", DType::kFloat32, {64}}});
  if (!layout.ok()) return std::fprintf(stderr, "%s\n", layout.status().to_string().c_str()), 1;

  auto publisher = Publisher::create(*layout);  // loopback, no secret
  if (!publisher.ok()) return std::fprintf(stderr, "%s\n", publisher.status().to_string().c_str()), 1;
  std::vector<float> embed(256 * 64, 0.5f), head(64, -2.0f);
  auto published =
      (*publisher)
          ->publish(1, {{"embed", embed.data(), embed.size() * 4}, {"head", head.data(), head.size() * 4}});
  if (!published.ok()) return std::fprintf(stderr, "%s\n", published.status().to_string().c_str()), 1;

  auto subscriber = Subscriber::connect((*publisher)->address());
  if (!subscriber.ok()) return std::fprintf(stderr, "%s\n", subscriber.status().to_string().c_str()), 1;
  std::vector<float> my_embed(256 * 64), my_head(64);
  auto pulled = (*subscriber)
                    ->pull(Destination::scatter({{"embed", my_embed.data(), my_embed.size() * 4},
                                                 {"head", my_head.data(), my_head.size() * 4}}));
  if (!pulled.ok()) return std::fprintf(stderr, "%s\n", pulled.status().to_string().c_str()), 1;
  if (my_embed != embed || my_head != head) return std::fprintf(stderr, "consumer: bytes differ\n"), 1;
  std::printf("consumer: ok version %llu, %llu bytes, weightsync %s\n",
              static_cast<unsigned long long>(pulled->version),
              static_cast<unsigned long long>(pulled->bytes), version());
  return 0;
}
