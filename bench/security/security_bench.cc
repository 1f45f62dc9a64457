// TLS + token overhead on GetLabels (docs/security.md; issue 17's benchmark).
//
// Starts mlcd-labelstore three times on loopback from this build: A plaintext without tokens,
// C with mTLS (certificates made by openssl, tests/testing/security.h) and no tokens, B with
// mTLS and a tokens file (what a cluster runs).
// Both get the same label set (--ids rows, l = 8). Then, for each batch size, the same id
// sequence is read through LabelStoreClient (what a worker's prefetcher calls) from A and B
// alternately in --rounds rounds of --seconds each; the figure per side is the median over
// rounds of the mean latency per call, and the overhead is B / A - 1. Channels are made once
// (a worker keeps its channel), so the handshake is not in the figures; it is timed apart.
// G reads B through a worker agent's label gateway (worker/agent/label_gateway.h), run in
// this process as the agent runs it: plaintext on a Unix socket to the gateway, which calls B
// with mTLS and the worker token; that is the path of a worker's training child, and its
// overhead is G / B - 1.
// Beside the latency, the CPU time per call of both ends (this process's and the server's, from
// getrusage and /proc/<pid>/stat over all rounds): latency on a shared machine also carries
// scheduling delays, CPU time is what the security itself costs.
//
//   security_bench [--ids 100000] [--seconds 1] [--rounds 5] [--batches 1,64,128,1024]
//                  [--out bench/results/security_tls.json]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include <sys/resource.h>
#include <unistd.h>

#include "bench/process_cpu.h"
#include "bench/stats.h"
#include "clients/labelstore_client.h"
#include "common/grpc_server.h"
#include "common/net.h"
#include "common/security.h"
#include "tests/testing/process.h"
#include "tests/testing/security.h"
#include "worker/agent/label_gateway.h"

namespace mlcd {
namespace {

using Clock = std::chrono::steady_clock;

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string path(buf, n > 0 ? static_cast<size_t>(n) : 0);
  return path.substr(0, path.rfind('/'));
}

// Whether the client channels probe the bandwidth-delay product (HTTP/2 PINGs; gRPC's default).
bool g_bdp_probe = true;

grpc::ChannelArguments StoreArgs() {
  grpc::ChannelArguments args;
  if (!g_bdp_probe) args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  return args;
}

Status Fill(const labelstore::LabelStoreClient& client, uint64_t n) {
  labelstore::LabelSetSpec spec{"bench", 100000, 8, false, {}};
  MLCD_RETURN_IF_ERROR(client.CreateLabelSet(spec).status());
  std::vector<uint64_t> ids(n);
  std::vector<int32_t> labels(n * 8);
  std::mt19937 rng(7);
  for (uint64_t i = 0; i < n; ++i) ids[i] = i;
  for (auto& l : labels) l = static_cast<int32_t>(rng() % 100000);
  MLCD_RETURN_IF_ERROR(client.WriteLabels("bench", ids.data(), n, 8, labels.data()).status());
  return client.Seal("bench").status();
}

// Mean seconds per GetLabels call over `seconds` of back-to-back calls.
double TimeCalls(const labelstore::LabelStoreClient& client, const std::vector<uint64_t>& pool,
                 size_t batch, double seconds, size_t* offset, int64_t* calls_out) {
  labelstore::LabelBatch out;
  int64_t calls = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (*offset + batch > pool.size()) *offset = 0;
    Status s = client.GetLabels("bench", pool.data() + *offset, batch, false, &out);
    if (!s.ok()) {
      std::fprintf(stderr, "error: GetLabels: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    *offset += batch;
    ++calls;
  }
  *calls_out += calls;
  return std::chrono::duration<double>(Clock::now() - start).count() / std::max<int64_t>(1, calls);
}

// CPU seconds (user + system, all threads) of this process.
double SelfCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

using ::mlcd::bench::Median;

int Run(int argc, char** argv) {
  uint64_t ids = 100000;
  double seconds = 1;
  int rounds = 5;
  std::vector<int> batches = {1, 64, 128, 1024};
  std::string out;
  CLI::App app{"security_bench: GetLabels plaintext vs mTLS + token, same run"};
  app.add_option("--ids", ids, "rows in the label set")->capture_default_str();
  app.add_option("--seconds", seconds, "seconds per side per round")->capture_default_str();
  app.add_option("--rounds", rounds, "alternating rounds")->capture_default_str();
  app.add_option("--batches", batches, "ids per call")->delimiter(',');
  app.add_option("--out", out, "JSON results file");
  app.add_option("--bdp-probe", g_bdp_probe,
                 "client channels probe the bandwidth-delay product (gRPC's default; 0 = off)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const testing::TestSecurity& certs = testing::TestCerts();
  testing::TempDir dir;
  const std::string bin = SelfDir() + "/mlcd-labelstore";
  const std::string plain = "127.0.0.1:" + std::to_string(PickFreePort());
  const std::string secure = "127.0.0.1:" + std::to_string(PickFreePort());
  const std::string tls_only = "127.0.0.1:" + std::to_string(PickFreePort());
  testing::ChildProcess a, b, c;
  const std::vector<std::string> off = {
      "MLCD_TLS_CERT=", "MLCD_TLS_KEY=", "MLCD_TLS_CA=", "MLCD_TOKENS_FILE=", "MLCD_TOKEN_FILE="};
  const std::vector<std::string> on = {
      "MLCD_TLS_CERT=" + certs.server.cert, "MLCD_TLS_KEY=" + certs.server.key,
      "MLCD_TLS_CA=" + certs.ca.cert, "MLCD_TOKENS_FILE=" + certs.tokens_file, "MLCD_TOKEN_FILE="};
  Status st = a.Start(bin, {"--listen", plain, "--metrics-listen", "", "--data-dir", dir.Sub("a")},
                      dir.Sub("a.log"), off);
  if (st.ok())
    st = b.Start(bin, {"--listen", secure, "--metrics-listen", "", "--data-dir", dir.Sub("b")},
                 dir.Sub("b.log"), on);
  // C: mTLS, no tokens file (the split between transport and token check).
  std::vector<std::string> tls_env = on;
  tls_env[3] = "MLCD_TOKENS_FILE=";
  if (st.ok())
    st = c.Start(bin, {"--listen", tls_only, "--metrics-listen", "", "--data-dir", dir.Sub("c")},
                 dir.Sub("c.log"), tls_env);
  // This process: TLS with the test certificate, the worker token (what a worker sends).
  SecurityOptions client;
  client.tls = {certs.server.cert, certs.server.key, certs.ca.cert};
  client.token_file = certs.worker_token_file;
  if (st.ok()) st = ConfigureSecurity(client);
  if (st.ok()) st = testing::WaitForServing(secure, std::chrono::seconds(30));
  if (st.ok()) st = testing::WaitForServing(tls_only, std::chrono::seconds(30));
  labelstore::LabelStoreClient store_a(
      grpc::CreateCustomChannel(plain, grpc::InsecureChannelCredentials(), StoreArgs()), plain);
  // The secure sides through CreateSecureChannel (what LabelStoreClient(address) does), with
  // the same channel arguments as the plaintext side.
  labelstore::LabelStoreClient store_b(CreateSecureChannel(secure, StoreArgs()), secure);
  labelstore::LabelStoreClient store_c(CreateSecureChannel(tls_only, StoreArgs()), tls_only);
  // Filling needs submitter rights on B: the admin token for that part.
  SecurityOptions admin = client;
  admin.token_file = certs.admin_token_file;
  if (st.ok()) st = ConfigureSecurity(admin);
  if (st.ok()) st = Fill(store_a, ids);
  if (st.ok()) st = Fill(store_b, ids);
  if (st.ok()) st = Fill(store_c, ids);
  if (st.ok()) st = ConfigureSecurity(client);
  // G: the gateway in front of B, scoped to an assignment that reads "bench".
  std::unique_ptr<worker::LabelGateway> gateway;
  if (st.ok()) {
    auto started = worker::LabelGateway::Start(dir.Sub("gw") + "/labels.sock");
    st = started.status();
    if (st.ok()) gateway = std::move(*started);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n%s\n%s\n", st.ToString().c_str(), a.Log().c_str(),
                 b.Log().c_str());
    return 1;
  }

  worker::LabelGatewayScope scope;
  scope.assignment_id = "bench";
  scope.labelstore_address = secure;
  scope.readable_sets = {"bench"};
  gateway->SetScope(scope);
  labelstore::LabelStoreClient store_g(
      grpc::CreateCustomChannel(gateway->address(), grpc::InsecureChannelCredentials(),
                                StoreArgs()),
      gateway->address());

  // Connection set-up (TCP + TLS handshake with client certificate), new channel each time.
  std::vector<double> connect_a, connect_b;
  for (int i = 0; i < 20; ++i) {
    for (int side = 0; side < 2; ++side) {
      const auto t0 = Clock::now();
      auto ch = side == 0 ? grpc::CreateCustomChannel(plain, grpc::InsecureChannelCredentials(),
                                                      StoreArgs())
                          : CreateSecureChannel(secure, StoreArgs());
      labelstore::LabelStoreClient c(ch, side == 0 ? plain : secure);
      labelstore::LabelBatch batch;
      const uint64_t id = 1;
      if (!c.GetLabels("bench", &id, 1, false, &batch).ok()) return 1;
      (side == 0 ? connect_a : connect_b)
          .push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }

  std::vector<uint64_t> pool(ids);
  for (uint64_t i = 0; i < ids; ++i) pool[i] = i;
  std::shuffle(pool.begin(), pool.end(), std::mt19937(11));
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%8s %14s %14s %10s %18s %10s %16s %10s\n", "batch", "plain us/call", "mtls us/call",
              "overhead", "mtls+token us/call", "overhead", "gateway us/call", "vs m+t");
  for (int batch : batches) {
    constexpr int kSides = 4;
    const labelstore::LabelStoreClient* stores[kSides] = {&store_a, &store_c, &store_b, &store_g};
    const pid_t pids[kSides] = {a.pid(), c.pid(), b.pid(), b.pid()};
    std::vector<double> lat[kSides];
    double cpu[kSides] = {0, 0, 0, 0};
    int64_t calls[kSides] = {0, 0, 0, 0};
    size_t off[kSides] = {0, 0, 0, 0};
    for (int s = 0; s < kSides; ++s) TimeCalls(*stores[s], pool, batch, 0.3, &off[s], &calls[s]);
    for (int s = 0; s < kSides; ++s) calls[s] = 0, off[s] = 0;
    for (int r = 0; r < rounds; ++r) {
      // Rotate which side goes first, so drift on a shared machine hits all of them.
      for (int k = 0; k < kSides; ++k) {
        const int s = (r + k) % kSides;
        const double cpu0 = SelfCpuSeconds() + bench::ProcessCpuSeconds(pids[s]);
        lat[s].push_back(TimeCalls(*stores[s], pool, batch, seconds, &off[s], &calls[s]));
        cpu[s] += SelfCpuSeconds() + bench::ProcessCpuSeconds(pids[s]) - cpu0;
      }
    }
    const double ma = Median(lat[0]), mc = Median(lat[1]), mb = Median(lat[2]), mg = Median(lat[3]);
    double cpu_per_call[kSides];
    for (int s = 0; s < kSides; ++s) cpu_per_call[s] = cpu[s] / std::max<int64_t>(1, calls[s]);
    std::printf(
        "%8d %14.1f %14.1f %9.1f%% %18.1f %9.1f%% %16.1f %9.1f%%   cpu us/call %.1f / %.1f / "
        "%.1f (%+.1f%%) / %.1f\n",
        batch, ma * 1e6, mc * 1e6, (mc / ma - 1) * 100, mb * 1e6, (mb / ma - 1) * 100, mg * 1e6,
        (mg / mb - 1) * 100, cpu_per_call[0] * 1e6, cpu_per_call[1] * 1e6, cpu_per_call[2] * 1e6,
        (cpu_per_call[2] / cpu_per_call[0] - 1) * 100, cpu_per_call[3] * 1e6);
    rows.push_back({{"batch", batch},
                    {"plain_seconds_per_call", ma},
                    {"mtls_seconds_per_call", mc},
                    {"mtls_token_seconds_per_call", mb},
                    {"overhead_fraction", mb / ma - 1},
                    {"gateway_seconds_per_call", mg},
                    {"gateway_overhead_fraction", mg / mb - 1},
                    {"cpu_seconds_per_call",
                     {{"plain", cpu_per_call[0]},
                      {"mtls", cpu_per_call[1]},
                      {"mtls_token", cpu_per_call[2]},
                      {"gateway", cpu_per_call[3]}}},
                    {"cpu_overhead_fraction", cpu_per_call[2] / cpu_per_call[0] - 1},
                    {"mtls_only_overhead_fraction", mc / ma - 1},
                    {"plain_rounds", lat[0]},
                    {"mtls_rounds", lat[1]},
                    {"mtls_token_rounds", lat[2]},
                    {"gateway_rounds", lat[3]},
                    {"calls",
                     {{"plain", calls[0]},
                      {"mtls", calls[1]},
                      {"mtls_token", calls[2]},
                      {"gateway", calls[3]}}}});
  }
  const double ca = Median(connect_a), cb = Median(connect_b);
  std::printf("new connection + first call: plain %.2f ms, mTLS + token %.2f ms\n", ca * 1e3,
              cb * 1e3);
  nlohmann::json j{{"what",
                    "GetLabels through LabelStoreClient, plaintext vs mTLS + bearer token, and "
                    "mTLS + token through a worker agent's label gateway"},
                   {"ids_in_set", ids},
                   {"labels_per_sample", 8},
                   {"seconds_per_round", seconds},
                   {"rounds", rounds},
                   {"bdp_probe", g_bdp_probe},
                   {"get_labels", rows},
                   {"connect_first_call_seconds", {{"plain", ca}, {"mtls_token", cb}}}};
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace mlcd

int main(int argc, char** argv) { return mlcd::Run(argc, argv); }
