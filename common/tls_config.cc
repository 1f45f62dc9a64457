#include "common/tls_config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/file_util.h"
#include "common/log.h"

namespace mlcd {
namespace {

// How often gRPC's watcher looks at the private copy (its minimum).
constexpr unsigned kWatchIntervalSeconds = 1;

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct Pem {
  std::string cert, key, ca;
};

StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return Status::InvalidArgument(flag + " " + path + ": cannot read it (" +
                                   text.status().message() + ")");
  }
  return std::move(text).value();
}

// Parses and cross-checks the PEM texts: the certificate (first of the chain) and the key
// match; the CA bundle holds at least one certificate.
Status CheckPem(const Pem& pem, const TlsFiles& files) {
  auto bad = [](const std::string& flag, const std::string& path, const std::string& why) {
    return Status::InvalidArgument(flag + " " + path + ": " + why);
  };
  if (!pem.cert.empty()) {
    BIO* cb = BIO_new_mem_buf(pem.cert.data(), static_cast<int>(pem.cert.size()));
    X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
    BIO_free(cb);
    if (!cert)
      return bad("--tls-cert", files.cert, "not a PEM certificate (" + OpenSslError() + ")");
    BIO* kb = BIO_new_mem_buf(pem.key.data(), static_cast<int>(pem.key.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
    BIO_free(kb);
    if (!key) {
      X509_free(cert);
      return bad("--tls-key", files.key,
                 "not an unencrypted PEM private key (" + OpenSslError() + ")");
    }
    const bool match = X509_check_private_key(cert, key) == 1;
    ERR_clear_error();
    EVP_PKEY_free(key);
    X509_free(cert);
    if (!match) return bad("--tls-key", files.key, "does not belong to --tls-cert " + files.cert);
  }
  if (!pem.ca.empty() || !files.ca.empty()) {
    BIO* ab = BIO_new_mem_buf(pem.ca.data(), static_cast<int>(pem.ca.size()));
    X509* ca = PEM_read_bio_X509(ab, nullptr, nullptr, nullptr);
    BIO_free(ab);
    if (!ca) return bad("--tls-ca", files.ca, "holds no PEM certificate (" + OpenSslError() + ")");
    X509_free(ca);
  }
  return Status::Ok();
}

// The private copies are removed at exit, not with their TlsConfig: channels made from a
// replaced config keep watching its copy for as long as they live. Once removal began, no
// watch writes a copy again (g_exiting).
Mutex g_private_dirs_mu;
std::vector<std::string>* g_private_dirs GUARDED_BY(g_private_dirs_mu) = nullptr;
bool g_exiting GUARDED_BY(g_private_dirs_mu) = false;

void RemovePrivateDirs() {
  MutexLock lock(&g_private_dirs_mu);
  g_exiting = true;
  std::error_code ec;
  for (const auto& d : *g_private_dirs) std::filesystem::remove_all(d, ec);
}

// STATE_DIR/tls-private, emptied (a killed process's copy is replaced), 0700, and removed at
// exit.
StatusOr<std::string> MakePrivateDir(const std::string& state_dir) {
  std::error_code ec;
  const std::string dir = std::filesystem::absolute(state_dir, ec).string() + "/tls-private";
  std::filesystem::remove_all(dir, ec);
  MLCD_RETURN_IF_ERROR(MakeDirs(dir).WithContext("the private copy of the TLS material"));
  if (::chmod(dir.c_str(), 0700) != 0)
    return Status::Internal("cannot make " + dir + " private (chmod 0700)");
  MutexLock lock(&g_private_dirs_mu);
  if (!g_private_dirs) {
    g_private_dirs = new std::vector<std::string>();
    std::atexit(RemovePrivateDirs);
  }
  g_private_dirs->push_back(dir);
  return dir;
}

// Writes `text` to the new file `path`, readable by this user only (0600) from its creation.
Status WritePrivateFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal("cannot create " + path + ": " + std::strerror(errno));
  Status written = WriteAllAndSync(fd, {{text.data(), text.size()}}, path);
  ::close(fd);
  return written;
}

// Removes the generation folders of `private_dir` before `current` once the `current` link
// has pointed past them for longer than gRPC's watch interval: by then the watcher reads the
// new files, and a read that resolved the link before the switch has opened its files.
void RemoveRetiredGenerations(const std::string& private_dir, int current) {
  struct stat link {};
  if (::lstat((private_dir + "/current").c_str(), &link) != 0) return;
  const auto switched = std::chrono::system_clock::time_point(
      std::chrono::seconds(link.st_mtim.tv_sec) + std::chrono::nanoseconds(link.st_mtim.tv_nsec));
  if (std::chrono::system_clock::now() - switched <=
      2 * std::chrono::seconds(kWatchIntervalSeconds))
    return;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(private_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("gen-", 0) == 0 && std::atoi(name.c_str() + 4) < current)
      std::filesystem::remove_all(entry.path(), ec);
  }
}

// What identifies a version of the configured files: device, inode, size and change times of
// each (zeros for a missing one), so a replacement by rename or an edit in place both show.
std::vector<int64_t> FilesSignature(const TlsFiles& files) {
  std::vector<int64_t> sig;
  for (const std::string* path : {&files.cert, &files.key, &files.ca}) {
    struct stat st {};
    if (path->empty() || ::stat(path->c_str(), &st) != 0) st = {};
    sig.insert(sig.end(), {static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino),
                           static_cast<int64_t>(st.st_size), st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                           st.st_ctim.tv_sec, st.st_ctim.tv_nsec});
  }
  return sig;
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

StatusOr<std::shared_ptr<TlsConfig>> TlsConfig::Open(const TlsFiles& files,
                                                     const std::string& state_dir) {
  if (files.cert.empty() != files.key.empty()) {
    return Status::InvalidArgument(
        "--tls-cert and --tls-key come together (env MLCD_TLS_CERT, MLCD_TLS_KEY); only " +
        std::string(files.cert.empty() ? "--tls-key" : "--tls-cert") + " was given");
  }
  std::shared_ptr<TlsConfig> config(new TlsConfig(files));
  if (!state_dir.empty()) {
    MLCD_ASSIGN_OR_RETURN(config->private_dir_, MakePrivateDir(state_dir));
  }
  MLCD_RETURN_IF_ERROR(config->Install());
  if (config->private_dir_.empty()) return config;
  const std::string cur = config->private_dir_ + "/current/";
  {
    MutexLock lock(&config->mu_);
    config->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        files.key.empty() ? "" : cur + "key.pem", files.cert.empty() ? "" : cur + "cert.pem",
        files.ca.empty() ? "" : cur + "ca.pem", kWatchIntervalSeconds);
  }
  config->watcher_ = std::thread([raw = config.get()] { raw->WatchFiles(); });
  return config;
}

TlsConfig::~TlsConfig() {
  {
    MutexLock lock(&mu_);
    stop_watch_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void TlsConfig::WatchFiles() {
  std::vector<int64_t> seen = FilesSignature(files_);
  MutexLock lock(&mu_);
  while (!watch_cv_.wait_for(lock.native(), std::chrono::seconds(kCertFilePollSeconds), [&] {
    mu_.AssertHeld();
    return stop_watch_;
  })) {
    const int generation = generation_;
    lock.Unlock();
    std::vector<int64_t> now = FilesSignature(files_);
    {
      MutexLock exit_lock(&g_private_dirs_mu);
      if (!g_exiting) RemoveRetiredGenerations(private_dir_, generation);
    }
    if (now != seen) {
      seen = std::move(now);
      MutexLock exit_lock(&g_private_dirs_mu);
      if (!g_exiting) {
        MLCD_LOG(INFO) << "TLS files changed on disk; reloading";
        (void)Reload();
      }
    }
    lock.Lock();
  }
}

Status TlsConfig::Install() {
  MutexLock lock(&mu_);
  Pem pem;
  if (!files_.cert.empty()) {
    MLCD_ASSIGN_OR_RETURN(pem.cert, ReadPem(files_.cert, "--tls-cert"));
    MLCD_ASSIGN_OR_RETURN(pem.key, ReadPem(files_.key, "--tls-key"));
  }
  if (!files_.ca.empty()) {
    MLCD_ASSIGN_OR_RETURN(pem.ca, ReadPem(files_.ca, "--tls-ca"));
  }
  MLCD_RETURN_IF_ERROR(CheckPem(pem, files_));
  if (private_dir_.empty()) {
    std::vector<grpc::experimental::IdentityKeyCertPair> pairs;
    if (!pem.cert.empty()) pairs.push_back({pem.key, pem.cert});
    provider_ = std::make_shared<grpc::experimental::StaticDataCertificateProvider>(pem.ca, pairs);
    return Status::Ok();
  }
  // A new generation folder (0700, its files 0600), then one rename of the `current` link: the
  // watcher never sees a key from one generation with a certificate from another. The
  // generations before it are removed by the watch (RemoveRetiredGenerations).
  const std::string gen = "gen-" + std::to_string(++generation_);
  const std::string dir = private_dir_ + "/" + gen;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (::mkdir(dir.c_str(), 0700) != 0)
    return Status::Internal("cannot create " + dir + ": " + std::strerror(errno));
  if (!pem.cert.empty()) {
    MLCD_RETURN_IF_ERROR(WritePrivateFile(dir + "/cert.pem", pem.cert));
    MLCD_RETURN_IF_ERROR(WritePrivateFile(dir + "/key.pem", pem.key));
  }
  if (!pem.ca.empty()) MLCD_RETURN_IF_ERROR(WritePrivateFile(dir + "/ca.pem", pem.ca));
  MLCD_RETURN_IF_ERROR(SyncDir(dir));
  const std::string link_tmp = private_dir_ + "/current.tmp";
  ::unlink(link_tmp.c_str());
  if (::symlink(gen.c_str(), link_tmp.c_str()) != 0 ||
      ::rename(link_tmp.c_str(), (private_dir_ + "/current").c_str()) != 0) {
    return Status::Internal("cannot switch the TLS material in " + private_dir_);
  }
  return Status::Ok();
}

Status TlsConfig::Reload() {
  Status s = Install();
  if (s.ok()) {
    MLCD_LOG(INFO) << "TLS material reloaded from " << files_.cert << " " << files_.key << " "
                   << files_.ca
                   << (private_dir_.empty() ? " (for connections made from now on)"
                                            : " (new connections use it within a second)");
  } else {
    MLCD_LOG(ERROR) << "TLS reload failed, keeping the previous certificates: " << s.ToString();
  }
  return s;
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsConfig::ServerCredentials() const {
  if (!has_identity()) {
    return Status::FailedPrecondition(
        "a TLS server needs --tls-cert and --tls-key (env MLCD_TLS_CERT, MLCD_TLS_KEY)");
  }
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  {
    MutexLock lock(&mu_);
    provider = provider_;
  }
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (has_ca()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> TlsConfig::ChannelCredentials() const {
  grpc::experimental::TlsChannelCredentialsOptions options;
  {
    MutexLock lock(&mu_);
    options.set_certificate_provider(provider_);
  }
  if (has_ca()) options.watch_root_certs();
  if (has_identity()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace mlcd
