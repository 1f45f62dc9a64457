#include "common/cert_maker.h"

#include <openssl/rand.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/file_util.h"
#include "common/subprocess.h"

namespace mlcd {
namespace {

Status RunOpenssl(const std::string& dir, std::vector<std::string> args) {
  SpawnOptions spawn;
  spawn.argv = {"openssl"};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.search_path = true;
  spawn.log_path = dir + "/openssl.log";
  spawn.stdin_from_dev_null = true;
  spawn.clear_signal_mask = true;
  MLCD_ASSIGN_OR_RETURN(pid_t pid, Spawn(spawn));
  const int status = WaitForExit(pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExecFailedExitCode) {
    return Status::Unavailable("cannot run `openssl` (install the Debian package openssl)");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Internal("`openssl " + args[0] + "` failed; see " + spawn.log_path);
  }
  return Status::Ok();
}

const std::vector<std::string> kEcKey = {"-newkey", "ec", "-pkeyopt",
                                         "ec_paramgen_curve:prime256v1", "-nodes"};

}  // namespace

StatusOr<CertFiles> MakeCertAuthority(const std::string& dir, const std::string& name) {
  MLCD_RETURN_IF_ERROR(MakeDirs(dir));
  CertFiles ca{dir + "/" + name + ".pem", dir + "/" + name + ".key"};
  std::vector<std::string> args = {"req", "-x509"};
  args.insert(args.end(), kEcKey.begin(), kEcKey.end());
  args.insert(args.end(), {"-keyout", ca.key, "-out", ca.cert, "-days", "3650", "-subj",
                           "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
                           "keyUsage=critical,keyCertSign,cRLSign"});
  MLCD_RETURN_IF_ERROR(RunOpenssl(dir, args));
  ::chmod(ca.key.c_str(), 0600);
  return ca;
}

namespace {

// A leaf with `subject` and the extensions `extensions` (openssl -extfile lines), signed by `ca`.
StatusOr<CertFiles> IssueLeaf(const CertFiles& ca, const std::string& dir, const std::string& name,
                              const std::string& subject, const std::string& extensions, int days) {
  MLCD_RETURN_IF_ERROR(MakeDirs(dir));
  CertFiles out{dir + "/" + name + ".pem", dir + "/" + name + ".key"};
  const std::string csr = dir + "/" + name + ".csr";
  const std::string ext = dir + "/" + name + ".ext";
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(ext, extensions));
  std::vector<std::string> req = {"req", "-new"};
  req.insert(req.end(), kEcKey.begin(), kEcKey.end());
  req.insert(req.end(), {"-keyout", out.key, "-out", csr, "-subj", subject});
  MLCD_RETURN_IF_ERROR(RunOpenssl(dir, req));
  ::chmod(out.key.c_str(), 0600);
  MLCD_ASSIGN_OR_RETURN(std::string serial, NewRandomToken());
  std::vector<std::string> sign = {"x509",        "-req",
                                   "-in",         csr,
                                   "-CA",         ca.cert,
                                   "-CAkey",      ca.key,
                                   "-set_serial", "0x" + serial.substr(0, 16),
                                   "-out",        out.cert,
                                   "-extfile",    ext};
  if (days < 1) return Status::InvalidArgument("a certificate must be valid for at least a day");
  sign.insert(sign.end(), {"-days", std::to_string(days)});
  MLCD_RETURN_IF_ERROR(RunOpenssl(dir, sign));
  ::unlink(csr.c_str());
  return out;
}

}  // namespace

StatusOr<CertFiles> IssueCert(const CertFiles& ca, const std::string& dir, const std::string& name,
                              const std::string& common_name, const std::vector<std::string>& sans,
                              int days) {
  std::string san;
  for (const auto& s : sans) san += (san.empty() ? "" : ",") + s;
  return IssueLeaf(ca, dir, name, "/CN=" + common_name,
                   (san.empty() ? "" : "subjectAltName=" + san + "\n") +
                       "extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n",
                   days);
}

StatusOr<CertFiles> IssueUserCert(const CertFiles& ca, const std::string& dir,
                                  const std::string& name, const std::string& common_name,
                                  int days) {
  return IssueLeaf(ca, dir, name, "/OU=" + std::string(kUserCertUnit) + "/CN=" + common_name,
                   "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n", days);
}

StatusOr<std::string> NewRandomToken() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return Status::Internal("RAND_bytes failed");
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  return token;
}

}  // namespace mlcd
