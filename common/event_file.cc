#include "common/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/log.h"

namespace mlcd {
namespace {

constexpr size_t kLengthBytes = 8;
constexpr size_t kCrcBytes = 4;
constexpr size_t kHeaderBytes = kLengthBytes + kCrcBytes;
// A record longer than this is not one of ours (nor a sane TensorBoard scalar event).
constexpr uint64_t kMaxEventRecordBytes = 64ull << 20;

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void PutLittleEndian(uint64_t v, size_t bytes, std::string* out) {
  for (size_t i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(const char* p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

Status ErrnoStatus(const std::string& what, const std::string& path) {
  return Status::Internal(what + " " + path + ": " + std::strerror(errno));
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace

std::string FrameEventRecord(const std::string& payload) {
  std::string out;
  out.reserve(kHeaderBytes + payload.size() + kCrcBytes);
  PutLittleEndian(payload.size(), kLengthBytes, &out);
  PutLittleEndian(MaskCrc32c(Crc32c(out.data(), kLengthBytes)), kCrcBytes, &out);
  out += payload;
  PutLittleEndian(MaskCrc32c(Crc32c(payload.data(), payload.size())), kCrcBytes, &out);
  return out;
}

StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(
    const std::string& dir, const std::string& suffix, const EventFileOptions& options) {
  static std::atomic<int> files_created{0};
  MLCD_RETURN_IF_ERROR(MakeDirs(dir));
  const auto seconds = static_cast<int64_t>(WallSeconds());
  const std::string path = dir + "/events.out.tfevents." + std::to_string(seconds) + "." +
                           HostName() + "." + std::to_string(::getpid()) + "." + suffix + "." +
                           std::to_string(files_created.fetch_add(1));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create the TensorBoard event file", path);
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(fd, path, options));
  tensorboard::Event version;
  version.set_wall_time(WallSeconds());
  version.set_file_version(kEventFileVersion);
  MLCD_RETURN_IF_ERROR(writer->Append(version));
  MLCD_RETURN_IF_ERROR(writer->Flush());
  return writer;
}

EventFileWriter::EventFileWriter(int fd, std::string path, const EventFileOptions& options)
    : fd_(fd), path_(std::move(path)), options_(options), last_flush_(SteadySeconds()) {}

EventFileWriter::~EventFileWriter() {
  Status st = Close();
  if (!st.ok()) MLCD_LOG(WARNING) << st.ToString();
}

Status EventFileWriter::WriteScalars(int64_t step, const std::vector<EventScalar>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(WallSeconds());
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& s : scalars) {
    auto* v = summary->add_value();
    v->set_tag(s.tag);
    v->set_simple_value(s.value);
  }
  MLCD_RETURN_IF_ERROR(Append(event));
  if (buffer_.size() >= options_.flush_bytes ||
      SteadySeconds() - last_flush_ >= options_.flush_seconds)
    return Flush();
  return Status::Ok();
}

Status EventFileWriter::Append(const tensorboard::Event& event) {
  if (fd_ < 0) return Status::FailedPrecondition("event file " + path_ + " is closed");
  buffer_ += FrameEventRecord(event.SerializeAsString());
  return Status::Ok();
}

Status EventFileWriter::Flush() {
  if (fd_ < 0) return Status::FailedPrecondition("event file " + path_ + " is closed");
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      buffer_.erase(0, done);
      return ErrnoStatus("cannot write the TensorBoard event file", path_);
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  last_flush_ = SteadySeconds();
  return Status::Ok();
}

Status EventFileWriter::Close() {
  if (fd_ < 0) return Status::Ok();
  Status st = Flush();
  if (st.ok() && ::fsync(fd_) != 0)
    st = ErrnoStatus("cannot fsync the TensorBoard event file", path_);
  ::close(fd_);
  fd_ = -1;
  return st;
}

StatusOr<EventFileContents> ReadEventFile(const std::string& path) {
  MLCD_ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  EventFileContents out;
  size_t pos = 0;
  auto loss = [&](const std::string& what) {
    return Status::DataLoss(path + ": the record at byte " + std::to_string(pos) + " " + what);
  };
  while (pos < data.size()) {
    const size_t left = data.size() - pos;
    if (left < kHeaderBytes) break;
    const uint64_t length = GetLittleEndian(data.data() + pos, kLengthBytes);
    const auto header_crc =
        static_cast<uint32_t>(GetLittleEndian(data.data() + pos + kLengthBytes, kCrcBytes));
    if (UnmaskCrc32c(header_crc) != Crc32c(data.data() + pos, kLengthBytes))
      return loss("has a length whose CRC-32C does not match");
    if (length > kMaxEventRecordBytes)
      return loss("claims " + std::to_string(length) + " bytes; at most " +
                  std::to_string(kMaxEventRecordBytes));
    if (left < kHeaderBytes + length + kCrcBytes) break;
    const char* payload = data.data() + pos + kHeaderBytes;
    const auto data_crc = static_cast<uint32_t>(GetLittleEndian(payload + length, kCrcBytes));
    if (UnmaskCrc32c(data_crc) != Crc32c(payload, length))
      return loss("has data whose CRC-32C does not match");
    tensorboard::Event event;
    if (!event.ParseFromArray(payload, static_cast<int>(length)))
      return loss("is not an Event protobuf");
    out.events.push_back(std::move(event));
    pos += kHeaderBytes + length + kCrcBytes;
  }
  out.truncated_tail_bytes = data.size() - pos;
  return out;
}

}  // namespace mlcd
