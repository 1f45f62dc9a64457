// Input-pipeline benchmark, C++ side (bench/input_pipeline/run_input_pipeline.sh runs it with
// the torchvision side on the same files; bench/RESULTS.md "Input pipeline").
//
// Over the images of an ImageFolder tree it measures, on `--threads` threads:
//   ceiling   libjpeg-turbo (TurboJPEG) full-size decode to RGB of the bytes held in memory,
//             nothing else: the most any decoding pipeline can do on these threads;
//   train     the worker's pipeline (worker/data/decode_pool.h): read the file, header,
//             RandomResizedCrop drawn before decoding, decode of the crop's rows and columns
//             only (DCT-scaled when the crop allows), antialiased bilinear resize to S, flip,
//             normalise to float CHW written into a batch buffer, results in order; also
//             without the region decode, and with a whole full-size decode;
//   eval      the same pool with resize-shorter-side + centre crop;
//   budget    train with the worker's decode memory budget (worker/data/decode_budget.h,
//             --decode-memory-mb, default dataset.decode_memory_mb's) shared by the threads, in
//             the same rounds as train without one, back to back in alternating order: what
//             the reservations cost (the median of the rounds' paired ratios).
// For each: images/s (wall), images per CPU-second of the process (the per-core figure, less
// disturbed by other load than wall time), and where the pool threads' time went (file read,
// decode, crop/resize/normalise). Rounds alternate the modes; medians are reported.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/file_util.h"
#include "common/limits.h"
#include "common/random.h"
#include "worker/data/decode_pool.h"

namespace {

using mlcd::worker::DecodedSample;
using mlcd::worker::DecodeJob;
using mlcd::worker::DecodePool;
using mlcd::worker::DecodePoolOptions;
using mlcd::worker::TransformMode;

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Measure {
  double images = 0, wall = 0, cpu = 0, errors = 0;
  double read = 0, decode = 0, transform = 0;  // summed over samples (seconds)
  std::map<int, int> denominators;
  double per_second() const { return images / wall; }
  double per_cpu_second() const { return images / cpu; }
};

// Full decodes of the in-memory files by `threads` threads, `epochs` times over.
Measure Ceiling(const std::vector<std::string>& files, int threads, int epochs) {
  std::atomic<size_t> next{0};
  std::atomic<int> errors{0};
  const size_t total = files.size() * epochs;
  Measure m;
  const double t0 = Now(), c0 = CpuSeconds();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < total;)
        if (!mlcd::worker::DecodeImage(files[i % files.size()]).ok()) errors.fetch_add(1);
    });
  for (auto& t : pool) t.join();
  m.wall = Now() - t0;
  m.cpu = CpuSeconds() - c0;
  m.images = static_cast<double>(total);
  m.errors = errors.load();
  m.decode = m.wall * threads;
  return m;
}

// The decode pool over the files on disk, in a shuffled order per epoch, batches of `batch`
// written in place (as the worker's loader fills its batch tensor).
Measure Pipeline(const std::vector<std::string>& paths, const DecodePoolOptions& options,
                 int epochs, int batch) {
  auto pool = DecodePool::Create(options);
  if (!pool.ok()) {
    std::cerr << pool.status().ToString() << "\n";
    std::exit(1);
  }
  const size_t floats = static_cast<size_t>(options.transform.channels) *
                        options.transform.image_size * options.transform.image_size;
  std::vector<float> buffer(floats * batch);
  std::vector<std::pair<int, size_t>> order;  // (epoch, file)
  for (int e = 0; e < epochs; ++e) {
    std::vector<size_t> perm(paths.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    mlcd::SplitMix rng(static_cast<uint64_t>(e) + 1);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.Below(i)]);
    for (size_t i : perm) order.emplace_back(e, i);
  }
  Measure m;
  const double t0 = Now(), c0 = CpuSeconds();
  size_t submitted = 0;
  for (size_t taken = 0; taken < order.size(); ++taken) {
    while (submitted < order.size() && (*pool)->room() > 0) {
      DecodeJob job;
      const auto [epoch, file] = order[submitted];
      job.key = {0, epoch, static_cast<int64_t>(file)};
      job.destination = buffer.data() + (submitted % batch) * floats;
      const std::string& path = paths[file];
      job.fetch = [&path] { return mlcd::ReadFileToString(path); };
      (*pool)->Submit(std::move(job));
      ++submitted;
    }
    const DecodedSample s = (*pool)->Next();
    if (!s.status.ok()) {
      ++m.errors;
      continue;
    }
    m.read += s.fetch_seconds;
    m.decode += s.timings.decode_seconds;
    m.transform += s.timings.transform_seconds;
    ++m.denominators[s.timings.decode_denominator];
  }
  m.wall = Now() - t0;
  m.cpu = CpuSeconds() - c0;
  m.images = static_cast<double>(order.size());
  return m;
}

nlohmann::json ToJson(const Measure& m, int threads) {
  const double busy = m.read + m.decode + m.transform;
  nlohmann::json j = {{"images", m.images},
                      {"errors", m.errors},
                      {"wall_seconds", m.wall},
                      {"cpu_seconds", m.cpu},
                      {"images_per_second", m.per_second()},
                      {"images_per_second_per_thread", m.per_second() / threads},
                      {"images_per_cpu_second", m.per_cpu_second()},
                      {"cpu_ms_per_image", 1e3 * m.cpu / m.images}};
  if (busy > 0 && m.transform > 0) {
    j["share"] = {{"read", m.read / busy},
                  {"decode", m.decode / busy},
                  {"crop_resize_normalise", m.transform / busy}};
    j["ms_per_image"] = {{"read", 1e3 * m.read / m.images},
                         {"decode", 1e3 * m.decode / m.images},
                         {"crop_resize_normalise", 1e3 * m.transform / m.images}};
    nlohmann::json d;
    for (const auto& [den, n] : m.denominators) d["1/" + std::to_string(den)] = n;
    j["dct_scale_counts"] = d;
  }
  return j;
}

// CPU seconds of one Reserve + release of the decode budget, `threads` threads taking turns on
// one budget of `capacity` bytes: the budget's own cost per image, free of the load noise
// that the paired pipeline rounds carry.
double ReservationCpuSeconds(int threads, uint64_t capacity) {
  mlcd::worker::DecodeMemoryBudget budget(capacity);
  constexpr int kPerThread = 200000;
  const double c0 = CpuSeconds();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&budget] {
      for (int i = 0; i < kPerThread; ++i) {
        auto r = budget.Reserve(500 * 375 * 3, "a 500 x 375 colour jpeg");
        if (!r.ok()) std::abort();
      }
    });
  }
  for (auto& t : pool) t.join();
  return (CpuSeconds() - c0) / (static_cast<double>(threads) * kPerThread);
}

Measure Median(std::vector<Measure> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Measure& a, const Measure& b) { return a.per_second() < b.per_second(); });
  return runs[runs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Input pipeline: decode + RandomResizedCrop + flip + normalise, C++ side"};
  std::string dir, out;
  int threads = 2, epochs = 3, rounds = 3, batch = 64, image_size = 224;
  int decode_memory_mb = mlcd::kDefaultDecodeMemoryMb;
  app.add_option("--dir", dir, "ImageFolder root (make_images.py)")->required();
  app.add_option("--threads", threads, "decode threads");
  app.add_option("--epochs", epochs, "passes over the files per measurement");
  app.add_option("--rounds", rounds, "measurements per mode (median reported)");
  app.add_option("--batch", batch, "images per batch buffer");
  app.add_option("--image-size", image_size, "output side");
  app.add_option("--decode-memory-mb", decode_memory_mb,
                 "decode memory budget of the 'budget' mode (MiB)");
  app.add_option("--out", out, "JSON result file");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".webp"))
      paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) {
    std::cerr << "no images under " << dir << "\n";
    return 1;
  }
  std::vector<std::string> files;
  double bytes = 0;
  for (const auto& p : paths) {
    auto b = mlcd::ReadFileToString(p);
    if (!b.ok()) {
      std::cerr << b.status().ToString() << "\n";
      return 1;
    }
    bytes += b->size();
    files.push_back(*std::move(b));
  }
  auto header = mlcd::worker::ReadImageHeader(reinterpret_cast<const uint8_t*>(files[0].data()),
                                              files[0].size());
  std::cerr << paths.size() << " images, mean " << bytes / paths.size() / 1024 << " KB, first "
            << (header.ok() ? std::to_string(header->width) + "x" + std::to_string(header->height)
                            : header.status().ToString())
            << "; " << threads << " threads, " << epochs << " epochs x " << rounds << " rounds\n";

  DecodePoolOptions train;
  train.threads = threads;
  train.transform.image_size = image_size;
  DecodePoolOptions train_no_region = train;
  train_no_region.transform.region_decode = false;
  DecodePoolOptions train_full = train_no_region;
  train_full.transform.dct_scaling = false;
  DecodePoolOptions eval = train;
  eval.mode = TransformMode::kEval;
  DecodePoolOptions budgeted = train;
  budgeted.memory_budget = std::make_shared<mlcd::worker::DecodeMemoryBudget>(
      static_cast<uint64_t>(decode_memory_mb) << 20);

  std::vector<Measure> ceiling, ours, ours_no_region, ours_full, ours_eval, ours_budget;
  Ceiling(files, threads, 1);  // warm the page cache, the code and the thread-local decoders
  for (int r = 0; r < rounds; ++r) {
    ceiling.push_back(Ceiling(files, threads, epochs));
    // train and train with the budget back to back, in alternating order: the pair of one
    // round sees the same load (the slowdown is the median of the rounds' paired ratios).
    if (r % 2 == 0) {
      ours.push_back(Pipeline(paths, train, epochs, batch));
      ours_budget.push_back(Pipeline(paths, budgeted, epochs, batch));
    } else {
      ours_budget.push_back(Pipeline(paths, budgeted, epochs, batch));
      ours.push_back(Pipeline(paths, train, epochs, batch));
    }
    ours_no_region.push_back(Pipeline(paths, train_no_region, epochs, batch));
    ours_full.push_back(Pipeline(paths, train_full, epochs, batch));
    ours_eval.push_back(Pipeline(paths, eval, epochs, batch));
  }
  const double reserve_cpu = ReservationCpuSeconds(threads, budgeted.memory_budget->capacity());
  std::vector<double> wall_slowdowns, cpu_slowdowns;
  for (size_t r = 0; r < ours.size(); ++r) {
    wall_slowdowns.push_back(1 - ours_budget[r].per_second() / ours[r].per_second());
    cpu_slowdowns.push_back(1 - ours_budget[r].per_cpu_second() / ours[r].per_cpu_second());
  }
  std::sort(wall_slowdowns.begin(), wall_slowdowns.end());
  std::sort(cpu_slowdowns.begin(), cpu_slowdowns.end());
  const double wall_slowdown = wall_slowdowns[wall_slowdowns.size() / 2];
  const double cpu_slowdown = cpu_slowdowns[cpu_slowdowns.size() / 2];
  const Measure c = Median(ceiling), t = Median(ours), n = Median(ours_no_region),
                f = Median(ours_full), e = Median(ours_eval), b = Median(ours_budget);
  nlohmann::json j = {{"images", paths.size()},
                      {"mean_kb", bytes / paths.size() / 1024},
                      {"threads", threads},
                      {"epochs", epochs},
                      {"rounds", rounds},
                      {"image_size", image_size},
                      {"decode_ceiling", ToJson(c, threads)},
                      {"train", ToJson(t, threads)},
                      {"train_no_region_decode", ToJson(n, threads)},
                      {"train_whole_decode", ToJson(f, threads)},
                      {"eval", ToJson(e, threads)},
                      {"train_decode_budget", ToJson(b, threads)},
                      {"decode_memory_mb", decode_memory_mb},
                      {"decode_budget_peak_mb",
                       static_cast<double>(budgeted.memory_budget->peak_reserved()) / (1 << 20)},
                      {"decode_budget_slowdown", wall_slowdown},
                      {"decode_budget_cpu_slowdown", cpu_slowdown},
                      {"decode_budget_cpu_slowdowns", cpu_slowdowns},
                      {"decode_budget_reserve_cpu_us", reserve_cpu * 1e6},
                      {"decode_budget_reserve_share_of_train_cpu", reserve_cpu * t.per_cpu_second()},
                      {"train_share_of_ceiling", t.per_second() / c.per_second()},
                      {"train_cpu_share_of_ceiling", t.per_cpu_second() / c.per_cpu_second()}};
  std::printf("%-34s %10s %12s %12s\n", "mode", "images/s", "per thread", "per cpu-s");
  for (const auto& [name, m] :
       std::vector<std::pair<std::string, Measure>>{{"decode-only ceiling (libjpeg-turbo)", c},
                                                    {"train: RRC+flip+normalise", t},
                                                    {"train, no region decode", n},
                                                    {"train, whole decode (no DCT scale)", f},
                                                    {"eval: resize+centre crop", e},
                                                    {"train with decode budget", b}})
    std::printf("%-34s %10.1f %12.1f %12.1f\n", name.c_str(), m.per_second(),
                m.per_second() / threads, m.per_cpu_second());
  std::printf("train / ceiling: %.2f (wall), %.2f (cpu)\n", t.per_second() / c.per_second(),
              t.per_cpu_second() / c.per_cpu_second());
  std::printf(
      "decode budget (%d MiB, peak %.1f MiB held): %.2f%% slower (wall), %.2f%% (cpu); "
      "medians of %zu paired rounds\n",
      decode_memory_mb, static_cast<double>(budgeted.memory_budget->peak_reserved()) / (1 << 20),
      100 * wall_slowdown, 100 * cpu_slowdown, ours.size());
  std::printf("decode budget: one reservation costs %.3f us of CPU, %.4f%% of the train "
              "pipeline's CPU per image\n",
              reserve_cpu * 1e6, 100 * reserve_cpu * t.per_cpu_second());
  const double busy = t.read + t.decode + t.transform;
  std::printf("train time: read %.1f%%, decode %.1f%%, crop/resize/normalise %.1f%%\n",
              100 * t.read / busy, 100 * t.decode / busy, 100 * t.transform / busy);
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return 0;
}
