#include "worker/agent/metrics_proxy.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "common/net.h"

namespace mlcd::worker {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

bool ParseDouble(const std::string& s, double* out) {
  if (s == "+Inf" || s == "Inf") {
    *out = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  if (s == "NaN") {
    *out = NAN;
    return true;
  }
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0';
}

// `name{a="x",b="y"} value [timestamp]` -> name, labels, value.
bool ParseSample(const std::string& line, std::string* name,
                 std::vector<ClientMetric::Label>* labels, double* value) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  *name = line.substr(0, i);
  if (name->empty()) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      size_t eq = line.find('=', i);
      if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
      ClientMetric::Label label;
      label.name = line.substr(i, eq - i);
      size_t j = eq + 2;
      while (j < line.size() && line[j] != '"') {
        if (line[j] == '\\' && j + 1 < line.size()) {
          const char c = line[j + 1];
          label.value += c == 'n' ? '\n' : c;
          j += 2;
        } else {
          label.value += line[j++];
        }
      }
      if (j >= line.size()) return false;
      labels->push_back(std::move(label));
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // '}'
  }
  while (i < line.size() && line[i] == ' ') ++i;
  const size_t end = line.find(' ', i);
  return ParseDouble(line.substr(i, end == std::string::npos ? std::string::npos : end - i), value);
}

std::string LabelKey(const std::vector<ClientMetric::Label>& labels) {
  std::string key;
  for (const auto& l : labels) key += l.name + "=" + l.value + "\n";
  return key;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Plain HTTP/1.0 GET of http://address/metrics; "" on any failure.
std::string FetchMetrics(const std::string& address, std::chrono::milliseconds timeout) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(address, "metrics address", &host, &port).ok() || port <= 0) return "";
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return "";
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return "";
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return "";
  }
  std::string response;
  char buf[16384];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0 && response.size() < (64u << 20))
    response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (response.rfind("HTTP/1.", 0) != 0 || response.find(" 200 ") == std::string::npos) return "";
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

}  // namespace

std::vector<MetricFamily> ParseMetricsText(const std::string& text) {
  std::vector<MetricFamily> families;
  std::map<std::string, size_t> index;                                  // family name -> position
  std::map<std::string, std::map<std::string, size_t>> histogram_rows;  // family -> labels -> row
  auto family = [&](const std::string& name, MetricType type) -> MetricFamily& {
    auto it = index.find(name);
    if (it != index.end()) return families[it->second];
    index[name] = families.size();
    families.push_back(MetricFamily{name, "", type, {}});
    return families.back();
  };
  std::map<std::string, std::string> help;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line.substr(1));
      std::string kind, name, rest;
      words >> kind >> name;
      std::getline(words, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "HELP") {
        std::string unescaped;  // `\\` and `\n` are escapes; other backslashes stay
        for (size_t k = 0; k < rest.size(); ++k) {
          if (rest[k] == '\\' && k + 1 < rest.size() &&
              (rest[k + 1] == '\\' || rest[k + 1] == 'n')) {
            unescaped += rest[k + 1] == 'n' ? '\n' : '\\';
            ++k;
          } else {
            unescaped += rest[k];
          }
        }
        help[name] = unescaped;
      }
      if (kind == "TYPE") {
        const MetricType type = rest == "counter"     ? MetricType::Counter
                                : rest == "gauge"     ? MetricType::Gauge
                                : rest == "histogram" ? MetricType::Histogram
                                                      : MetricType::Untyped;
        family(name, type).help = help[name];
      }
      continue;
    }
    std::string name;
    std::vector<ClientMetric::Label> labels;
    double value = 0;
    if (!ParseSample(line, &name, &labels, &value)) continue;
    // A histogram's series: <family>_bucket{le}, <family>_sum, <family>_count.
    std::string base;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (EndsWith(name, suffix)) {
        const std::string candidate = name.substr(0, name.size() - std::string(suffix).size());
        auto it = index.find(candidate);
        if (it != index.end() && families[it->second].type == MetricType::Histogram)
          base = candidate;
      }
    }
    if (!base.empty()) {
      MetricFamily& f = families[index[base]];
      double le = 0;
      std::vector<ClientMetric::Label> series;
      for (auto& l : labels) {
        if (l.name == "le") {
          ParseDouble(l.value, &le);
        } else {
          series.push_back(l);
        }
      }
      auto& rows = histogram_rows[base];
      const std::string key = LabelKey(series);
      if (!rows.count(key)) {
        rows[key] = f.metric.size();
        f.metric.emplace_back();
        f.metric.back().label = series;
      }
      auto& h = f.metric[rows[key]].histogram;
      if (EndsWith(name, "_bucket")) {
        h.bucket.push_back({static_cast<uint64_t>(value), le});
      } else if (EndsWith(name, "_sum")) {
        h.sample_sum = value;
      } else {
        h.sample_count = static_cast<uint64_t>(value);
      }
      continue;
    }
    auto it = index.find(name);
    MetricFamily& f = it != index.end() ? families[it->second] : family(name, MetricType::Untyped);
    ClientMetric m;
    m.label = std::move(labels);
    if (f.type == MetricType::Counter) {
      m.counter.value = value;
    } else if (f.type == MetricType::Gauge) {
      m.gauge.value = value;
    } else {
      m.untyped.value = value;
    }
    f.metric.push_back(std::move(m));
  }
  // Families declared but without samples would serialize as empty blocks: drop them.
  std::vector<MetricFamily> out;
  for (auto& f : families) {
    if (!f.metric.empty()) out.push_back(std::move(f));
  }
  return out;
}

void ChildMetricsProxy::SetTarget(const std::string& address) {
  MutexLock lock(&mu_);
  target_ = address;
}

std::vector<MetricFamily> ChildMetricsProxy::Collect() const {
  std::string target;
  {
    MutexLock lock(&mu_);
    target = target_;
  }
  if (target.empty()) return {};
  return ParseMetricsText(FetchMetrics(target, timeout_));
}

AgentMetrics::AgentMetrics(prometheus::Registry& registry)
    : busy_(&prometheus::BuildGauge()
                 .Name("mlcd_agent_busy")
                 .Help("1 while the worker agent runs an assignment, 0 while it is idle.")
                 .Register(registry)
                 .Add({})),
      assignments_(&prometheus::BuildCounter()
                        .Name("mlcd_agent_assignments_total")
                        .Help("Assignments the worker agent ran to their end, by kind (train, "
                              "embed, eval) and result (succeeded, failed, preempted).")
                        .Register(registry)) {
  busy_->Set(0);
  for (const char* kind : {"train", "embed", "eval"}) {
    for (const char* result : {"succeeded", "failed", "preempted"}) {
      assignments_->Add({{"kind", kind}, {"result", result}});
    }
  }
}

void AgentMetrics::AssignmentEnded(const std::string& kind, const std::string& result) {
  assignments_->Add({{"kind", kind}, {"result", result}}).Increment();
}

}  // namespace mlcd::worker
