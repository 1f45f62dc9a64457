#include "labelstore/write_grants.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "clients/write_capability.h"
#include "common/clock.h"

namespace mlcd::labelstore {

std::string WriteGrants::DelegationKey(const std::string& name, uint64_t incarnation) const {
  const std::string message = "mlcd-delegate|" + name + "|" + std::to_string(incarnation);
  unsigned char key[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), key, &len);
  return std::string(reinterpret_cast<const char*>(key), len);
}

Status WriteGrants::Check(const std::string& capability, const std::string& name,
                          uint64_t incarnation) const {
  MLCD_ASSIGN_OR_RETURN(
      WriteCapability cap,
      VerifyWriteCapability([&](uint64_t claimed) { return DelegationKey(name, claimed); }, name,
                            capability, NowUnixMs() / 1000));
  if (cap.incarnation != incarnation) {
    return Status::PermissionDenied("the write capability of '" + cap.holder +
                                    "' was issued for an earlier label set named '" + name +
                                    "', since deleted; its owner issues a new one");
  }
  return Status::Ok();
}

}  // namespace mlcd::labelstore
