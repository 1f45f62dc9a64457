// Limits that hold across services: a job spec is checked against them before any service
// sees it, and each service enforces the same constant again at its own boundary. Limits of
// one service's requests live with its client library (clients/). Each bound is chosen so a
// valid request cannot exhaust the machine that serves it; docs/hardening.md lists them all.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlcd {

// l: the most labels (nearest centres) per sample a label set keeps.
constexpr int32_t kMaxLabelsPerSample = 1024;
// k: the most clusters (class centres) of a round (paper: 1M).
constexpr int32_t kMaxClusters = int32_t{1} << 22;
// clustering.niter: k-means iterations.
constexpr int32_t kMaxKMeansIterations = 1000;
// clustering.max_points_per_centroid.
constexpr int32_t kMaxPointsPerCentroid = 1 << 16;
// clustering.seed: below 2^63, so that round r's seed (seed + r, spec_defaults.h
// ClusteringRoundSeed) never wraps to 0, which clusterd's Cluster reads as "no seed".
constexpr uint64_t kMaxClusteringSeed = (uint64_t{1} << 63) - 1;
// clustering.engine gang: the k x d float32 centroids every rank of the gang holds (with their
// accumulators): at most 16 GiB (1M x 4096), so that a round that cannot run on any worker
// fails at its plan step, naming the numbers, before the workers load anything.
constexpr int64_t kMaxGangCentroidBytes = int64_t{16} << 30;
// clustering.features.dim: random-projection output dimension (the 784 x dim matrix and the
// n x dim features are made by clusterd; 65536 would be ~15.7 GB for Fashion-MNIST).
constexpr int32_t kMaxProjectionDim = 4096;

// model: ViT shape. Each alone, and the parameter estimate (4 + 2 * mlp_ratio) * width^2 *
// depth, bounded so the model, its gradients and AdamW state fit a worker.
constexpr int32_t kMaxModelWidth = 8192;
constexpr int32_t kMaxModelDepth = 128;
constexpr int32_t kMaxModelHeads = 256;
constexpr int32_t kMaxEmbedDim = 16384;
// dataset.jitter_brightness / _contrast / _saturation: the largest colour-jitter strength.
constexpr double kMaxJitterStrength = 10;
// loss.projection_dim / projection_hidden_dim: the contrastive projection head's sizes.
constexpr int32_t kMaxProjectionHeadDim = 16384;
constexpr double kMaxMlpRatio = 16;
constexpr int32_t kMaxImageSize = 4096;
constexpr int32_t kMaxChannels = 16;
constexpr double kMaxModelParameters = 4e9;
// The ViT's sequence: patch tokens (image_size / patch_size)^2 (4096 / 16 = 256^2; 4096 / 1
// would be 16.7M). And the estimated activation memory of one worker's batch in bytes
// (float32), (batch_size / world_size) * depth * ((8 + 2 * mlp_ratio) * L * width +
// 2 * heads * L^2) * 4 with L = tokens + 1: what the forward pass keeps for the backward pass
// (block inputs, q / k / v, attention scores and softmax, MLP hidden), bounded like the
// parameters (ViT-L/14 at 224 with 512 images per worker is ~311 GB).
constexpr int64_t kMaxSequenceLength = 65536;
constexpr double kMaxActivationBytes = 512.0 * (uint64_t{1} << 30);

// dataset.decode_memory_mb: a worker's decode memory budget (MiB), shared by its loader
// threads (worker/data/decode_budget.h): the default, the largest, and the least each loader
// thread needs (dataset.loader_threads x this <= the budget; 16 MiB is a 2300 x 2300 RGB image).
constexpr int32_t kDefaultDecodeMemoryMb = 1024;
constexpr int32_t kMaxDecodeMemoryMb = 1 << 20;
constexpr int32_t kDecodeMemoryPerLoaderThreadMb = 16;
// dataset.loader_threads' largest (decode threads per worker).
constexpr int32_t kMaxLoaderThreads = 256;
// The worker's own bounds on the decode budget, which no spec raises (worker/data/
// decode_budget.h): --max-decode-memory-mb's default (the agent passes its value to every
// child; room for the most loader threads, so every valid spec's threads fit it), and the share
// of the host's available memory (common/host_memory.h, read once, when a worker process opens
// its first image dataset) the budget may take: one part in this many.
constexpr int32_t kDefaultMaxDecodeMemoryMb = 4096;
static_assert(kDefaultMaxDecodeMemoryMb >= kMaxLoaderThreads * kDecodeMemoryPerLoaderThreadMb);
constexpr int32_t kDecodeMemoryHostShareDivisor = 4;

// training.
constexpr int32_t kMaxEpochsPerRound = 100000;
constexpr int32_t kMaxBatchSize = 1 << 20;
constexpr int32_t kMaxThreadsPerWorker = 1024;
constexpr int32_t kMaxLabelPrefetchDepth = 1024;
constexpr int32_t kMaxRestarts = 1000;
constexpr int32_t kMaxTimeoutSeconds = 7 * 24 * 3600;
// evaluation.
constexpr int32_t kMaxKnnK = 10000;

// Any path in a spec or request: bytes (PATH_MAX) and no NUL.
constexpr size_t kMaxPathLength = 4096;
// Any other free-text string in a spec (names of presets, kinds, ...).
constexpr size_t kMaxSpecStringLength = 4096;
// Any repeated field of a spec (paths, mean/stddev values).
constexpr int kMaxSpecListLength = 100000;
// A job spec as YAML text (SubmitJob, dry run or not).
constexpr size_t kMaxSpecYamlBytes = size_t{1} << 20;

// A checkpoint root's owner marker (common/checkpoint_owner.h): the most bytes read of it (a
// job id, at most 60 characters of its name, a dash and its sequence number, and a newline).
constexpr size_t kMaxCheckpointOwnerBytes = 256;

// IDX files (common/idx.h): the most bytes read (and decompressed), the largest image side.
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 32;
constexpr uint32_t kMaxIdxImageSide = 4096;

// The coordinator: the largest request message (a spec is at most kMaxSpecYamlBytes of YAML),
// concurrent WatchJob streams (each holds a server thread) in all and of one caller identity,
// jobs not yet ended, registered worker slots, the reason of a cancel, a worker's host name.
constexpr int kMaxCoordinatorRequestBytes = 8 << 20;
constexpr int kDefaultMaxWatchStreams = 256;
constexpr int kDefaultMaxWatchStreamsPerIdentity = 16;
constexpr int kMaxActiveJobs = 10000;
constexpr size_t kMaxWorkers = 10000;
constexpr size_t kMaxCancelReasonLength = 1000;
constexpr size_t kMaxHostLength = 255;
// How long a dead worker's name stays bound to the identity that registered it
// (--worker-name-lease-seconds): others may register the name only after it.
constexpr int kDefaultWorkerNameLeaseSeconds = 600;
// The most "checkpoint_refused" history entries of one job while the coordinator runs (a rank 0
// naming a new path outside the job's checkpoint root at every heartbeat).
constexpr int kMaxCheckpointRefusalsRecorded = 16;
// The coordinator's space reserve on the file system of its --data-dir (--min-free-mb): it
// does not start with less free, and refuses new jobs and worker registrations below it.
constexpr uint64_t kCoordinatorMinFreeBytes = uint64_t{64} << 20;
// The label store's space reserve on the file system of its --data-dir (--min-free-mb):
// below it writes are refused (UNAVAILABLE, health NOT_SERVING) and reads go on; writes
// resume by themselves once space is freed.
constexpr uint64_t kLabelStoreMinFreeBytes = uint64_t{64} << 20;
// The largest --min-free-mb either service takes (1 PiB).
constexpr uint64_t kMaxMinFreeMb = uint64_t{1} << 30;
// clusterd: the largest request message.
constexpr int kMaxClusterdRequestBytes = 16 << 20;

// The built-in /metrics HTTP server (common/metrics_http.h): time from accept to the answer
// sent (a client that sends nothing is closed then), the largest request header, connections
// open at once, and open at once from one source address (the newest beyond that is refused,
// the open ones served).
constexpr int kMetricsHttpRequestTimeoutMs = 5000;
constexpr size_t kMaxMetricsHttpRequestBytes = 8192;
constexpr size_t kMaxMetricsHttpConnections = 64;
constexpr size_t kMaxMetricsHttpConnectionsPerSource = 8;

// Error messages sent back to callers: longer ones are cut, saying how much was left out, so
// they fit gRPC's metadata (8 KiB by default on the receiving side).
constexpr size_t kMaxErrorMessageBytes = 4096;

// training.time_budget_minutes: at most a week of training per round.
constexpr double kMaxTimeBudgetMinutes = 7 * 24 * 60;

// Bad samples a job record names per round (RoundStatus.bad_samples.first_keys), and the
// bytes of each key kept.
constexpr int kMaxBadSampleKeys = 5;
constexpr size_t kMaxBadSampleKeyBytes = 512;

// training.tensorboard_every_steps: its default and upper bound.
constexpr int32_t kDefaultTensorboardEverySteps = 10;
constexpr int32_t kMaxTensorboardEverySteps = 1000000;

// Largest class id a class-labels file may hold, plus one (2^24: far above any real label
// set, small enough that per-class counters stay cheap). clusterd and the gang engine.
inline constexpr int64_t kMaxClassId = int64_t{1} << 24;

}  // namespace mlcd
