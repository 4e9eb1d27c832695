#include "engine/packed_weights.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "engine/kernels.h"

namespace specd {

void PackedWeights::FreeAligned::operator()(unsigned char* p) const { std::free(p); }

std::unique_ptr<PackedWeights> PackedWeights::build(const LlamaModel& model, Isa isa, ThreadPool& pool) {
    auto pw = std::unique_ptr<PackedWeights>(new PackedWeights());
    pw->isa_ = isa;
    const bool amx_q8 = isa == Isa::Avx512 && amx_enabled();
    // Each distinct matrix once (a tied classifier is the embedding table,
    // which only the classifier reads as a matrix).
    std::vector<const WeightMatrix*> todo;
    auto consider = [&](const WeightMatrix& w) {
        if (!packable(isa, w.type, w.rows, w.cols) || (w.type == TensorType::Q8_0 && amx_q8)) return;
        if (pw->by_data_.emplace(w.data, nullptr).second) todo.push_back(&w);
    };
    for (const LlamaLayer& L : model.layers()) {
        for (const WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) consider(*w);
    }
    consider(model.classifier());
    std::vector<unsigned char*> dst(todo.size());
    for (size_t i = 0; i < todo.size(); ++i) {
        const size_t bytes = static_cast<size_t>(todo[i]->rows) * todo[i]->row_bytes();
        void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (p == nullptr) throw Error("repacking weights: out of memory for " + std::to_string(bytes) + " bytes");
        dst[i] = static_cast<unsigned char*>(p);
        pw->buffers_.emplace_back(dst[i]);
        pw->bytes_ += bytes;
    }
    pool.run([&](int ith, int nth) {
        for (size_t i = static_cast<size_t>(ith); i < todo.size(); i += static_cast<size_t>(nth)) {
            const WeightMatrix& w = *todo[i];
            pack_weights(isa, w.type, w.data, w.rows, w.cols, dst[i]);
            // The forward pass reads the copy from now on (a tied
            // classifier's embedding rows are read a few at a time and map
            // back on demand); released at once, so the peak stays near
            // the model's size.
            model.file().release_pages(w.data, static_cast<size_t>(w.rows) * w.row_bytes());
        }
    });
    for (size_t i = 0; i < todo.size(); ++i) pw->by_data_[todo[i]->data] = dst[i];
    return pw;
}

const void* PackedWeights::find(const void* data) const {
    const auto it = by_data_.find(data);
    return it == by_data_.end() ? nullptr : it->second;
}

bool repack_enabled() {
    const char* v = std::getenv("SPECD_REPACK");
    if (v == nullptr || *v == '\0') return true;
    const std::string s(v);
    if (s == "1" || s == "on" || s == "true") return true;
    if (s == "0" || s == "off" || s == "false") return false;
    throw Error("SPECD_REPACK=" + s + ": expected 1, on, true, 0, off or false");
}

}  // namespace specd
