// job_token.cpp: drawing, checking and proving the job token (see job_token.h).
// Read next: tcp_store.cpp (the client's half of the handshake).
#include "parallel/rendezvous/job_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "framework/error.h"
#include "framework/io/settings.h"

namespace dplab::parallel {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    DPLAB_CHECK(r > 0, "getrandom failed: {}", std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return out;
}

std::string make_job_token() {
  static const char* kHex = "0123456789abcdef";
  std::string raw = random_bytes(16), hex;
  for (unsigned char c : raw) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return hex;
}

void check_job_token(const std::string& token, const std::string& where) {
  check_job_token_text(token, where);  // the rules DPLAB_JOB_TOKEN's row of settings.h checks
}

std::string job_token_from_env() {
  const std::optional<std::string> v = setting_value(kJobTokenVariable);
  DPLAB_CHECK(v.has_value(),
              "{} is not set: the TCP store admits only connections that prove the job's token. "
              "dplab-run and spawn() set it for their ranks; with torchrun, srun or ranks started "
              "by hand, set the same random value on every rank (`export {}=$(od -An -tx1 -N16 "
              "/dev/urandom | tr -d ' \\n')`), or use init_method file:// on one machine",
              kJobTokenVariable, kJobTokenVariable);
  check_job_token(*v, kJobTokenVariable);
  return *v;
}

std::string job_token_for_launch() {
  return setting_value(kJobTokenVariable) ? job_token_from_env() : make_job_token();
}

std::string token_proof(const std::string& token, const char* role, const std::string& server_nonce,
                        const std::string& client_nonce) {
  std::string message = std::string(role) + server_nonce + client_nonce;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len);
  DPLAB_CHECK(ok != nullptr && len == kProofBytes, "HMAC-SHA256 failed (OpenSSL)");
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool same_proof(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace dplab::parallel
