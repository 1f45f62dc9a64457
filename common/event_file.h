// TensorBoard event files: what `tensorboard --logdir` and TensorBoard's EventAccumulator read
// (docs/metrics.md, "TensorBoard"). A file is a sequence of records framed as TFRecord does:
//
//   uint64  length of the data (little endian)
//   uint32  masked CRC-32C of those 8 length bytes (common/crc32c.h)
//   bytes   the data: one mlcd.tensorboard.Event (proto/mlcd/tensorboard/event.proto,
//           upstream's field numbers)
//   uint32  masked CRC-32C of the data
//
// The first record of a file is an Event with file_version "brain.Event:2"; every other one
// an Event with wall_time, step and a Summary of scalar (simple_value) values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/tensorboard/event.pb.h"

namespace mlcd {

// The file_version of every event file we write.
inline constexpr const char* kEventFileVersion = "brain.Event:2";

struct EventScalar {
  std::string tag;  // "train/loss"; '/' groups tags in TensorBoard
  float value = 0;
};

struct EventFileOptions {
  // Buffered records go to the file once this many seconds passed since the last write to
  // it (checked when a record is added) or once this many bytes are buffered, so TensorBoard
  // sees a live run within seconds and a step pays for a write(2) rarely.
  double flush_seconds = 5;
  size_t flush_bytes = 64 * 1024;
};

// One event file: a writer owns the file it created and is the only one to append to it.
// Not thread-safe: one thread uses a writer.
class EventFileWriter {
 public:
  // Creates `dir` (mkdir -p) and in it a new file
  //   events.out.tfevents.<unix seconds>.<host>.<pid>.<suffix>.<n>
  // (<n>: this process's count of files created, so two writers never share a file), and
  // writes the file_version record. Errors name the path.
  static StatusOr<std::unique_ptr<EventFileWriter>> Create(const std::string& dir,
                                                           const std::string& suffix,
                                                           const EventFileOptions& options = {});
  // Close()s; an error is logged.
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One Event at `step` (wall time now) whose Summary holds every scalar.
  Status WriteScalars(int64_t step, const std::vector<EventScalar>& scalars);
  // Writes what is buffered to the file (no fsync).
  Status Flush();
  // Flushes, fsyncs and closes the file. Later writes are FAILED_PRECONDITION.
  Status Close();

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(int fd, std::string path, const EventFileOptions& options);
  Status Append(const tensorboard::Event& event);

  int fd_;
  std::string path_;
  EventFileOptions options_;
  std::string buffer_;
  double last_flush_ = 0;  // steady seconds
};

// `payload` framed as one record (length, masked CRCs).
std::string FrameEventRecord(const std::string& payload);

struct EventFileContents {
  std::vector<tensorboard::Event> events;
  // Bytes at the end that do not make a whole record (a writer killed mid-write). They are
  // ignored, as TensorBoard's reader ignores an incomplete last record.
  uint64_t truncated_tail_bytes = 0;
};

// Reads every complete record of an event file. DATA_LOSS naming the offset when a complete
// record's CRC does not match or its data is not an Event; NOT_FOUND when the file is not
// there.
StatusOr<EventFileContents> ReadEventFile(const std::string& path);

}  // namespace mlcd
