// job_token.h: the secret that lets a connection into a job's TCP store.
// dplab-run and spawn() draw a random token per job and hand it to their ranks in
// DPLAB_JOB_TOKEN; across nodes the user sets the same value on every node. A connection
// proves it knows the token without sending it (challenge-response, HMAC-SHA256 over both
// sides' nonces), and the server proves it back, so neither a stranger on the port nor a
// stranger posing as the server learns it or gets in. OpenSSL's libcrypto does the
// cryptography; nothing here is hand-made.
// Read next: tcp_store.h (the handshake on the wire), docs/store.md.
#pragma once
#include <string>

#include "framework/io/settings.h"

namespace dplab::parallel {

inline constexpr const char* kJobTokenVariable = "DPLAB_JOB_TOKEN";
// The token's rules live with DPLAB_JOB_TOKEN's row in framework/io/settings.h.
using dplab::kMaxTokenChars;
using dplab::kMinTokenChars;
inline constexpr size_t kNonceBytes = 32;  // per side, per connection
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256

// 32 random hex characters (128 bits from the kernel's generator).
std::string make_job_token();
// Throws Error when `token` is too short, too long or holds a space or control character;
// `where` names its source in the message ("DPLAB_JOB_TOKEN"). Never prints the token.
void check_job_token(const std::string& token, const std::string& where);
// DPLAB_JOB_TOKEN, checked; throws Error saying how to set it when it is unset.
std::string job_token_from_env();
// DPLAB_JOB_TOKEN if set (checked), else a fresh token: what a launcher gives its ranks.
std::string job_token_for_launch();

// n random bytes from the kernel (getrandom).
std::string random_bytes(size_t n);
// HMAC-SHA256(token, role || server_nonce || client_nonce): role is "client" or "server",
// so one side's proof is never valid as the other's.
std::string token_proof(const std::string& token, const char* role, const std::string& server_nonce,
                        const std::string& client_nonce);
// Compares two proofs in constant time (CRYPTO_memcmp).
bool same_proof(const std::string& a, const std::string& b);

}  // namespace dplab::parallel
