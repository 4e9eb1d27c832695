// A forward backend that hides the greedy capability of the one it wraps
// (CPU or CUDA): callers then take the full-logits path on the same
// backend, the reference that the argmax-only path is checked against.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "engine/backend.h"

namespace specd::test {

class FullLogitsOnly : public ForwardBackend {
public:
    explicit FullLogitsOnly(ForwardBackend& inner) : inner_(inner) {}
    std::span<const float> forward(PagedKvCache& kv, std::span<const BatchItem> items) override { return inner_.forward(kv, items); }
    std::unique_ptr<PagedKvCache> make_kv_cache(const KvCacheShape& shape) override { return inner_.make_kv_cache(shape); }
    const LlamaModel& model() const override { return inner_.model(); }
    const ForwardOptions& options() const override { return inner_.options(); }
    std::string name() const override { return inner_.name() + "-full-logits"; }

private:
    ForwardBackend& inner_;
};

}  // namespace specd::test
