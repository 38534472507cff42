// gloo_store.h: gloo's rendezvous store interface (gloo::rendezvous::Store) over a dplab
// Store, so gloo's contexts meet through the job's own store (its token, its timeouts)
// instead of a second rendezvous. Each group hands it its own view (PrefixStore
// "dplab/pg3/gloo"), as PyTorch's ProcessGroupGloo hands gloo a PrefixStore per group, so
// the keys gloo writes ("0", "1", ...: each rank's addresses) never meet another group's.
// Only built with gloo (-Dgloo); gloo's values are bytes, dplab's strings hold bytes too.
// Read next: transport/gloo_transport.h (who builds gloo's contexts with it).
#pragma once
#include <gloo/rendezvous/store.h>

#include <memory>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  // `store` is a view of the group's own (keys are used as gloo gives them).
  explicit GlooStore(std::shared_ptr<parallel::Store> store);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits (up to the dplab store's timeout) for the key, as gloo expects.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // gloo passes its context's timeout; the dplab store's own bounds the wait instead (the
  // group's, set by create_process_group), so a view's timeout is never changed behind it.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<parallel::Store> store_;
};

}  // namespace dplab::parallel
