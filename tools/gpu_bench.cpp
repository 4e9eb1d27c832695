// gpu_bench: the CUDA backend's throughput figures (issue 8), printed as a
// Markdown table for docs/BENCHMARKS.md. Needs a CUDA device; exit 77 when
// there is none.
//   gpu_bench [--models DIR] [--quick]
// Rows: stories15M (f16) decode tokens/s at batch 1 (CUDA graphs off and
// on, side by side) and the cost of a
// verification pass of k+1 = 9 tokens relative to a 1-token step; the same
// for a synthetic Llama-2-7B-shaped model with random weights made on the
// device (throughput only) plus the HBM bandwidth share of its decode step
// (weights + KV read per step / step time, vs 4.3 TB/s and vs the device's
// own peak); aggregate tokens/s of 64 concurrent greedy sessions through
// BatchVerifier/BatchDrafter on the GPU with speculation on (q8_0 draft of
// stories15M) and off. Decode rows are measured with the small-batch
// tensor-core products and with every product through cuBLAS
// (set_small_batch_gemv(false)) in the same run. Then, for the 7B shape at 1
// and 9 rows, where a step goes: each kernel alone, timed by events.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/model.h"
#include "engine/session_core.h"
#include "gpu/cuda_forward.h"
#include "gpu/device.h"
#include "gpu/device_model.h"
#include "gpu/kernels.h"

using namespace specd;
using namespace specd::gpu;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kReferenceHbmGbs = 4300.0;  // the figure the issue measures against (H200 HBM3e)

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct StepCosts {
    double decode_ms = 0.0;   // one token, greedy via the device argmax (only the token comes back)
    double one_ms = 0.0;      // one token through forward(): its logits back on the host
    double nine_ms = 0.0;     // 9 tokens through forward(), every row's logits back (what the verifier reads)
    int32_t context = 0;
};

// Decode `n_steps` tokens after a `n_prompt` prefill, then time 9-token
// verifications at that context (each rolled back) against 1-token steps.
StepCosts measure_steps(CudaForward& fwd, PagedKvCache& kv, int32_t n_prompt, int32_t n_steps, int32_t n_repeats) {
    const int32_t vocab = fwd.weights().hparams().n_vocab;
    const int32_t seq = kv.create_sequence();
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int32_t i = 0; i < n_prompt; ++i) prompt[static_cast<size_t>(i)] = 1 + (i * 7919) % (vocab - 1);
    std::vector<int32_t> next;
    BatchItem item{seq, prompt, false};
    fwd.forward_argmax(kv, std::span(&item, 1), next);
    int32_t token = next.at(0);
    StepCosts c;
    // Warm up, then time decoding.
    for (int32_t i = 0; i < 4; ++i) {
        item = BatchItem{seq, std::span(&token, 1), false};
        fwd.forward_argmax(kv, std::span(&item, 1), next);
        token = next.at(0);
    }
    auto t0 = Clock::now();
    for (int32_t i = 0; i < n_steps; ++i) {
        item = BatchItem{seq, std::span(&token, 1), false};
        fwd.forward_argmax(kv, std::span(&item, 1), next);
        token = next.at(0);
    }
    c.decode_ms = ms_since(t0) / n_steps;
    c.context = kv.length(seq);
    // Same context for both: each pass is rolled back.
    const std::vector<int32_t> nine(9, token);
    const int32_t base = kv.length(seq);
    double one_ms = 0.0, nine_ms = 0.0;
    for (int32_t r = 0; r < n_repeats; ++r) {
        item = BatchItem{seq, std::span(nine.data(), 1), false};
        t0 = Clock::now();
        (void)fwd.forward(kv, std::span(&item, 1));
        one_ms += ms_since(t0);
        kv.truncate(seq, base);
        item = BatchItem{seq, nine, true};
        t0 = Clock::now();
        (void)fwd.forward(kv, std::span(&item, 1));
        nine_ms += ms_since(t0);
        kv.truncate(seq, base);
    }
    c.one_ms = one_ms / n_repeats;
    c.nine_ms = nine_ms / n_repeats;
    kv.free_sequence(seq);
    return c;
}

// 64 greedy sessions through the batched verifier (and drafter when
// speculating) on the GPU, phases run one after the other by this thread.
double concurrent_sessions(const LlamaModel& target, const LlamaModel* draft, const std::shared_ptr<const DeviceModel>& tw,
                           const std::shared_ptr<const DeviceModel>& dw, int32_t n_sessions, int32_t max_tokens, int64_t& tokens_out) {
    ForwardOptions fo;
    fo.max_batch_tokens = 1024;
    fo.max_logit_rows = 1024;
    const int32_t n_ctx = target.hparams().n_ctx_train;
    CudaForward tf(tw, &target, fo);
    auto tkv = tf.make_kv_cache(tf.kv_shape(n_ctx, n_sessions));
    BatchVerifierOptions vo;
    vo.max_step_tokens = 1024;
    BatchVerifier verifier(tf, *tkv, vo);
    std::unique_ptr<CudaForward> df;
    std::unique_ptr<PagedKvCache> dkv;
    std::unique_ptr<BatchDrafter> drafter;
    if (draft) {
        df = std::make_unique<CudaForward>(dw, draft, fo);
        dkv = df->make_kv_cache(df->kv_shape(n_ctx, n_sessions));
        drafter = std::make_unique<BatchDrafter>(df.get(), dkv.get());
    }
    const char* prompts[] = {"Once upon a time", "Lily and Ben went to the park.", "The sun was hot", "Max the dog liked to run"};
    std::vector<std::unique_ptr<SessionCore>> sessions;
    std::vector<bool> prefilled(static_cast<size_t>(n_sessions), false);
    GenerationParams gp;
    gp.max_tokens = max_tokens;
    gp.sampling.temperature = 0.0f;
    gp.stop_at_eos = false;
    SpeculativeParams sp;
    sp.draft_max = 8;
    for (int32_t i = 0; i < n_sessions; ++i) {
        sessions.push_back(std::make_unique<SessionCore>(target.tokenizer(), target.tokenizer().encode(prompts[i % 4], true), gp, sp,
                                                         draft != nullptr, n_ctx));
    }
    const auto t0 = Clock::now();
    std::vector<DraftJob> djobs;
    std::vector<DraftOutcome> douts;
    std::vector<VerifyOutcome> vouts;
    for (;;) {
        djobs.clear();
        bool open = false;
        for (int32_t i = 0; i < n_sessions; ++i) {
            SessionCore& s = *sessions[static_cast<size_t>(i)];
            if (s.finished()) continue;
            open = true;
            if (!prefilled[static_cast<size_t>(i)] || !drafter) continue;
            const int32_t k = s.next_k();
            if (k > 0) djobs.push_back(s.draft_job(static_cast<uint64_t>(i), static_cast<uint64_t>(i), k));
        }
        if (!open) break;
        douts.clear();
        if (drafter && !djobs.empty()) drafter->draft(djobs, douts);
        for (const DraftOutcome& o : douts) sessions[o.tag]->on_draft(o);
        size_t expected = 0;
        for (int32_t i = 0; i < n_sessions; ++i) {
            SessionCore& s = *sessions[static_cast<size_t>(i)];
            if (s.finished()) continue;
            const auto key = static_cast<uint64_t>(i);
            verifier.submit(prefilled[static_cast<size_t>(i)] ? s.verify_job(key, key) : s.prefill_job(key, key));
            ++expected;
        }
        size_t got = 0;
        while (got < expected) {
            vouts.clear();
            verifier.step(vouts);
            for (const VerifyOutcome& o : vouts) {
                if (!o.ok) throw Error("bench: verify failed: " + o.error);
                SessionCore& s = *sessions[o.tag];
                if (!prefilled[o.tag]) {
                    s.on_prefill(o);
                    prefilled[o.tag] = true;
                } else {
                    s.on_verify(o);
                }
                if (s.finished()) {
                    verifier.close(o.request);
                    if (drafter) drafter->close(o.request);
                }
                ++got;
            }
        }
    }
    const double ms = ms_since(t0);
    tokens_out = 0;
    for (const auto& s : sessions) tokens_out += static_cast<int64_t>(s->output().size());
    return 1000.0 * static_cast<double>(tokens_out) / ms;
}

// Where a 7B-shaped decode (or verification) step goes: each kernel of a
// layer launched alone, back to back, timed by events; per step = per launch
// x launches per step. Products through the small-batch kernel and through
// cuBLAS side by side.
void print_step_breakdown(const DeviceModel& w, int32_t m, int32_t context, const Stream& stream) {
    const LlamaHparams& hp = w.hparams();
    const HalfType ht = w.type();
    const DeviceLayer& L = w.layers().front();
    const int32_t dim = hp.dim, kvd = hp.kv_dim(), ffn = hp.ffn_dim, qkv_ld = dim + 2 * kvd;
    cudaStream_t s = stream.get();
    CublasHandle cublas(stream);
    // A one-layer pool holding `context` positions of one sequence.
    const int32_t block = 16, n_blocks = (context + block - 1) / block;
    DeviceBuffer k_pool(static_cast<size_t>(n_blocks) * block * kvd * 2), v_pool(static_cast<size_t>(n_blocks) * block * kvd * 2);
    launch_fill_random_half(k_pool.as<uint16_t>(), k_pool.bytes() / 2, 7, 1.0f, ht, s);
    launch_fill_random_half(v_pool.as<uint16_t>(), v_pool.bytes() / 2, 8, 1.0f, ht, s);
    std::vector<int32_t> pos(static_cast<size_t>(m)), item(static_cast<size_t>(m), 0), table(static_cast<size_t>(n_blocks));
    for (int32_t r = 0; r < m; ++r) pos[static_cast<size_t>(r)] = context - m + r;
    for (int32_t b = 0; b < n_blocks; ++b) table[static_cast<size_t>(b)] = b;
    DeviceBuffer d_pos(pos.size() * 4), d_item(item.size() * 4), d_table(table.size() * 4);
    d_pos.upload(pos.data(), d_pos.bytes());
    d_item.upload(item.data(), d_item.bytes());
    d_table.upload(table.data(), d_table.bytes());
    RowsView rows{m, d_pos.as<int32_t>(), d_item.as<int32_t>(), d_table.as<int32_t>(), n_blocks};
    const HeadShape heads{hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.rope_dim / 2};
    const KvPoolView pool{k_pool.as<uint16_t>(), v_pool.as<uint16_t>(), ht, 1, block, kvd};
    DeviceBuffer x(static_cast<size_t>(m) * dim * 4), act(static_cast<size_t>(m) * std::max(dim, ffn) * 2),
        qkv(static_cast<size_t>(m) * qkv_ld * 4), gate_up(static_cast<size_t>(m) * 2 * ffn * 4),
        logits(static_cast<size_t>(m) * hp.n_vocab * 4), tokens(static_cast<size_t>(m) * 4), ffn_act(static_cast<size_t>(m) * ffn * 2);
    launch_fill_random_half(act.as<uint16_t>(), act.bytes() / 2, 9, 0.1f, ht, s);
    launch_fill_float(x.as<float>(), x.bytes() / 4, 0.5f, s);
    launch_fill_float(qkv.as<float>(), qkv.bytes() / 4, 0.5f, s);
    launch_fill_float(gate_up.as<float>(), gate_up.bytes() / 4, 0.5f, s);
    const cudaDataType_t t = ht == HalfType::F16 ? CUDA_R_16F : CUDA_R_16BF;
    const auto blas = [&](const uint16_t* wt, float* c, int32_t n_out, int32_t k, float beta) {
        const float alpha = 1.0f;
        if (cublasGemmEx(cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, n_out, m, k, &alpha, wt, t, k, act.as<uint16_t>(), t, k, &beta, c,
                         CUDA_R_32F, n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
            throw Error("bench: cublasGemmEx failed");
        }
    };
    struct Part {
        const char* name;
        int32_t per_step;      // launches per decode step
        double bytes;          // weight bytes one launch reads (0: not a product)
        std::function<void()> launch;
    };
    const double h = 2.0;
    const std::vector<Part> parts = {
        {"rms_norm", 2 * hp.n_layers + 1, 0, [&] { launch_rms_norm_to_half(x.as<float>(), L.attn_norm.as<float>(), nullptr, m, dim, hp.rms_eps, ht, act.as<uint16_t>(), s); }},
        {"wqkv + RoPE + K/V stores (gemv_qkv_rope)", hp.n_layers, h * qkv_ld * dim, [&] { launch_gemv_qkv_rope(act.as<uint16_t>(), L.wqkv.as<uint16_t>(), qkv.as<float>(), qkv_ld, dim, rows, heads, w.rope_cos(), w.rope_sin(), pool, 0, s); }},
        {"wqkv (gemv)", 0, h * qkv_ld * dim, [&] { launch_gemv(act.as<uint16_t>(), L.wqkv.as<uint16_t>(), ht, qkv.as<float>(), m, qkv_ld, dim, 0.0f, s); }},
        {"wqkv (cuBLAS)", 0, h * qkv_ld * dim, [&] { blas(L.wqkv.as<uint16_t>(), qkv.as<float>(), qkv_ld, dim, 0.0f); }},
        {"rope_store_kv (unfused)", 0, 0, [&] { launch_rope_store_kv(qkv.as<float>(), qkv_ld, rows, heads, w.rope_cos(), w.rope_sin(), pool, 0, s); }},
        {"paged_attention", hp.n_layers, 0, [&] { launch_paged_attention(qkv.as<float>(), qkv_ld, rows, heads, pool, 0, context, ht, act.as<uint16_t>(), s); }},
        {"wo (gemv)", hp.n_layers, h * dim * dim, [&] { launch_gemv(act.as<uint16_t>(), L.wo.as<uint16_t>(), ht, x.as<float>(), m, dim, dim, 1.0f, s); }},
        {"wo (cuBLAS)", 0, h * dim * dim, [&] { blas(L.wo.as<uint16_t>(), x.as<float>(), dim, dim, 1.0f); }},
        {"w_gate_up + SwiGLU (gemv_swiglu)", hp.n_layers, h * 2 * ffn * dim, [&] { launch_gemv_swiglu(act.as<uint16_t>(), L.w_gate_up.as<uint16_t>(), ht, m, ffn, dim, ffn_act.as<uint16_t>(), s); }},
        {"w_gate_up (gemv)", 0, h * 2 * ffn * dim, [&] { launch_gemv(act.as<uint16_t>(), L.w_gate_up.as<uint16_t>(), ht, gate_up.as<float>(), m, 2 * ffn, dim, 0.0f, s); }},
        {"w_gate_up (cuBLAS)", 0, h * 2 * ffn * dim, [&] { blas(L.w_gate_up.as<uint16_t>(), gate_up.as<float>(), 2 * ffn, dim, 0.0f); }},
        {"swiglu (unfused)", 0, 0, [&] { launch_swiglu_to_half(gate_up.as<float>(), m, ffn, ht, act.as<uint16_t>(), s); }},
        {"w_down (gemv)", hp.n_layers, h * dim * ffn, [&] { launch_gemv(act.as<uint16_t>(), L.w_down.as<uint16_t>(), ht, x.as<float>(), m, dim, ffn, 1.0f, s); }},
        {"w_down (cuBLAS)", 0, h * dim * ffn, [&] { blas(L.w_down.as<uint16_t>(), x.as<float>(), dim, ffn, 1.0f); }},
        {"classifier (gemv)", 1, h * hp.n_vocab * dim, [&] { launch_gemv(act.as<uint16_t>(), w.classifier(), ht, logits.as<float>(), m, hp.n_vocab, dim, 0.0f, s); }},
        {"classifier (cuBLAS)", 0, h * hp.n_vocab * dim, [&] { blas(w.classifier(), logits.as<float>(), hp.n_vocab, dim, 0.0f); }},
        {"argmax", 1, 0, [&] { launch_argmax_rows(logits.as<float>(), m, hp.n_vocab, tokens.as<int32_t>(), s); }},
    };
    std::printf("\n7B shape, %d row(s), context %d: each kernel alone, 50 launches back to back (events)\n\n", m, context);
    std::printf("| kernel | us per launch | GB/s | launches per step | us per step |\n| --- | ---: | ---: | ---: | ---: |\n");
    Event e0, e1;
    double total_us = 0.0;
    for (const Part& p : parts) {
        for (int i = 0; i < 5; ++i) p.launch();
        e0.record(stream);
        constexpr int kLaunches = 50;
        for (int i = 0; i < kLaunches; ++i) p.launch();
        e1.record(stream);
        e1.synchronize();
        const double us = 1000.0 * e1.ms_since(e0) / kLaunches;
        total_us += us * p.per_step;
        if (p.bytes > 0) {
            std::printf("| %s | %.1f | %.0f | %d | %.0f |\n", p.name, us, p.bytes / (us * 1e-6) / 1e9, p.per_step, us * p.per_step);
        } else {
            std::printf("| %s | %.1f | - | %d | %.0f |\n", p.name, us, p.per_step, us * p.per_step);
        }
    }
    std::printf("| sum (the forward's kernels at this size) | | | | %.0f |\n", total_us);
}

}  // namespace

int main(int argc, char** argv) {
    std::string models = std::getenv("SPECD_MODELS_DIR") ? std::getenv("SPECD_MODELS_DIR") : SPECD_MODELS_DIR_DEFAULT;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--models") == 0 && i + 1 < argc) models = argv[++i];
        if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    }
    const DeviceProbe probe = probe_devices();
    if (!probe.usable()) {
        std::cout << "gpu_bench: skipped: no CUDA device (" << probe.reason << ")\n";
        return 77;
    }
    const DeviceInfo& dev = probe.devices.front();
    std::printf("device: %s (sm_%d%d), peak memory bandwidth from the runtime: %.0f GB/s\n\n", dev.name.c_str(), dev.compute_major,
                dev.compute_minor, dev.memory_bandwidth_gbs);
    std::printf("| model | measurement | value |\n| --- | --- | --- |\n");
    try {
        // ---- stories15M, f16
        auto target = LlamaModel::load(models + "/stories15M-f32.gguf");
        auto draft = LlamaModel::load(models + "/stories15M-q8_0.gguf");
        auto tw = DeviceModel::upload(*target, dev.ordinal, HalfType::F16);
        auto dw = DeviceModel::upload(*draft, dev.ordinal, HalfType::F16);
        {
            CudaForward fwd(tw, target.get());
            auto kv = fwd.make_kv_cache(fwd.kv_shape(256, 1));
            fwd.set_graphs(false);
            const StepCosts off = measure_steps(fwd, *kv, 32, quick ? 50 : 200, quick ? 20 : 100);
            fwd.set_graphs(true);
            fwd.set_small_batch_gemv(false);
            const StepCosts blas = measure_steps(fwd, *kv, 32, quick ? 50 : 200, quick ? 20 : 100);
            fwd.set_small_batch_gemv(true);
            const StepCosts c = measure_steps(fwd, *kv, 32, quick ? 50 : 200, quick ? 20 : 100);
            std::printf("| stories15M f16 | decode, batch 1 (context %d), CUDA graphs off | %.0f tokens/s (%.3f ms/step) |\n", off.context,
                        1000.0 / off.decode_ms, off.decode_ms);
            std::printf("| stories15M f16 | decode, batch 1, CUDA graphs on, every product through cuBLAS (SPECD_CUDA_GEMV=0) | %.0f tokens/s (%.3f ms/step) |\n",
                        1000.0 / blas.decode_ms, blas.decode_ms);
            std::printf("| stories15M f16 | decode, batch 1 (context %d), CUDA graphs on | %.0f tokens/s (%.3f ms/step; %.2fx graphs off, %.2fx cuBLAS products) |\n",
                        c.context, 1000.0 / c.decode_ms, c.decode_ms, off.decode_ms / c.decode_ms, blas.decode_ms / c.decode_ms);
            std::printf("| stories15M f16 | verify 9 tokens / decode 1 token (both with logits to the host) | %.2fx (%.3f / %.3f ms; goal <= 1.3x) |\n",
                        c.nine_ms / c.one_ms, c.nine_ms, c.one_ms);
        }
        for (bool spec : {false, true}) {
            int64_t tokens = 0;
            const double tps = concurrent_sessions(*target, spec ? draft.get() : nullptr, tw, dw, 64, quick ? 32 : 128, tokens);
            std::printf("| stories15M f16 | 64 concurrent greedy sessions, speculation %s%s | %.0f tokens/s aggregate (%lld tokens) |\n",
                        spec ? "on (q8_0 draft as f16, k <= 8)" : "off", "", tps, static_cast<long long>(tokens));
        }
        std::fflush(stdout);

        // ---- Llama-2-7B shape, random weights made on the device
        LlamaHparams hp;
        hp.n_vocab = 32000;
        hp.n_ctx_train = 4096;
        hp.dim = 4096;
        hp.n_layers = 32;
        hp.n_heads = 32;
        hp.n_kv_heads = 32;
        hp.head_dim = 128;
        hp.ffn_dim = 11008;
        hp.rope_dim = 128;
        auto w7 = DeviceModel::random(hp, dev.ordinal, HalfType::F16);
        ForwardOptions fo;
        fo.max_batch_tokens = 64;
        fo.max_logit_rows = 16;
        CudaForward fwd(w7, nullptr, fo);
        KvCacheShape shape;
        shape.n_layers = hp.n_layers;
        shape.kv_dim = hp.kv_dim();
        shape.block_size = 16;
        shape.max_seq_len = 1024;
        shape.max_sequences = 1;
        shape.n_blocks = 1024 / 16;
        auto kv = fwd.make_kv_cache(shape);
        fwd.set_graphs(false);
        const StepCosts off = measure_steps(fwd, *kv, 32, quick ? 16 : 64, quick ? 5 : 20);
        fwd.set_graphs(true);
        fwd.set_small_batch_gemv(false);
        const StepCosts blas = measure_steps(fwd, *kv, 32, quick ? 16 : 64, quick ? 5 : 20);
        fwd.set_small_batch_gemv(true);
        const StepCosts c = measure_steps(fwd, *kv, 32, quick ? 16 : 64, quick ? 5 : 20);
        std::printf("| 7B shape f16 (random) | decode, batch 1, CUDA graphs off | %.1f tokens/s (%.2f ms/step; graphs on: %.2fx) |\n",
                    1000.0 / off.decode_ms, off.decode_ms, off.decode_ms / c.decode_ms);
        // Weights + K and V (f16) read once per step, over the step time.
        const auto hbm_gbs = [&](const StepCosts& sc) {
            const double kv_bytes = 2.0 * hp.n_layers * sc.context * hp.kv_dim() * 2.0;
            return (static_cast<double>(w7->step_weight_bytes()) + kv_bytes) / (sc.decode_ms * 1e-3) / 1e9;
        };
        const double blas_gbs = hbm_gbs(blas), gbs = hbm_gbs(c);
        std::printf("| 7B shape f16 (random) | decode, batch 1, every product through cuBLAS (SPECD_CUDA_GEMV=0) | %.1f tokens/s (%.2f ms/step; %.0f GB/s = %.0f%% of 4.3 TB/s) |\n",
                    1000.0 / blas.decode_ms, blas.decode_ms, blas_gbs, 100.0 * blas_gbs / kReferenceHbmGbs);
        std::printf("| 7B shape f16 (random) | decode, batch 1 (context %d) | %.1f tokens/s (%.2f ms/step; %.2fx cuBLAS products) |\n", c.context,
                    1000.0 / c.decode_ms, c.decode_ms, blas.decode_ms / c.decode_ms);
        std::printf("| 7B shape f16 (random) | HBM bandwidth at batch 1 | %.0f GB/s = %.0f%% of 4.3 TB/s (%.0f%% of the runtime's peak; goal >= 70%%) |\n",
                    gbs, 100.0 * gbs / kReferenceHbmGbs, dev.memory_bandwidth_gbs > 0 ? 100.0 * gbs / dev.memory_bandwidth_gbs : 0.0);
        std::printf("| 7B shape f16 (random) | verify 9 tokens / decode 1 token (both with logits to the host) | %.2fx (%.2f / %.2f ms; goal <= 1.3x; cuBLAS products: %.2fx) |\n",
                    c.nine_ms / c.one_ms, c.nine_ms, c.one_ms, blas.nine_ms / blas.one_ms);
        std::fflush(stdout);
        print_step_breakdown(*w7, 1, c.context, fwd.stream());
        print_step_breakdown(*w7, 9, c.context, fwd.stream());
    } catch (const std::exception& e) {
        std::printf("\ngpu_bench: failed: %s\n", e.what());
        return 1;
    }
    return 0;
}
