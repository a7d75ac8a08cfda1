// The daemon's health pieces in-process over real HTTP: HealthServer
// (civetweb) answering what a HealthBoard holds, and the board turning
// /livez 503 once the daemon's loop stops posting (a wedged loop).
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "health_board.h"
#include "health_server.h"
#include "http_get.h"

using namespace std::chrono_literals;

TEST_CASE("relay daemon: /livez turns 503 once the loop stops posting, and says so", "[relayd]") {
  wsrelay::HealthBoard board(300ms);
  board.post({{true, "alive; forwarding"}, {true, "serving version 7 on 127.0.0.1:1; upstream a:1"}});
  auto server = wsrelay::HealthServer::start("127.0.0.1:0", [&board] { return board.report(); });
  INFO(server.status().to_string());
  REQUIRE(server.ok());
  const auto port = wstest::port_of((*server)->address());
  auto live = wstest::http_get("127.0.0.1", port, "/livez", 2s);
  CHECK(live.status == 200);
  auto ready = wstest::http_get("127.0.0.1", port, "/readyz", 2s);
  CHECK(ready.status == 200);
  CHECK(ready.body == "serving version 7 on 127.0.0.1:1; upstream a:1\n");
  std::this_thread::sleep_for(500ms);  // no post: the loop is wedged
  live = wstest::http_get("127.0.0.1", port, "/livez", 2s);
  CHECK(live.status == 503);
  CHECK(live.body.find("main loop stalled") != std::string::npos);
  CHECK(wstest::http_get("127.0.0.1", port, "/readyz", 2s).status == 503);
  board.post({{false, "forwarding stopped: boom"}, {false, "forwarding stopped: boom"}});
  live = wstest::http_get("127.0.0.1", port, "/livez", 2s);
  CHECK(live.status == 503);
  CHECK(live.body == "forwarding stopped: boom\n");
}

TEST_CASE("relay daemon: the health server refuses a bad or taken address", "[relayd]") {
  auto first = wsrelay::HealthServer::start(":0", [] { return wsrelay::HealthReport{}; });
  REQUIRE(first.ok());
  CHECK((*first)->address().rfind("127.0.0.1:", 0) == 0);  // a bare port is loopback
  auto taken = wsrelay::HealthServer::start((*first)->address(), [] { return wsrelay::HealthReport{}; });
  REQUIRE_FALSE(taken.ok());
  CHECK(taken.status().message().find("pick another port") != std::string::npos);
  CHECK_FALSE(wsrelay::HealthServer::start("example.org:80", [] { return wsrelay::HealthReport{}; }).ok());
  CHECK_FALSE(wsrelay::HealthServer::start("127.0.0.1:70000", [] { return wsrelay::HealthReport{}; }).ok());
}
