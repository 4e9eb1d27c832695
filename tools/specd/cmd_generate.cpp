// `specd generate` (llama-cli's flag names) and `specd bench` (a llama-bench
// style table of prompt-processing and generation speed).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/runtime_config.h"
#include "engine/context_plan.h"
#include "engine/error.h"
#include "engine/generate.h"
#include "engine/membw.h"
#include "engine/model.h"
#include "engine/speculative.h"
#include "tools/specd/commands.h"
#include "tools/specd/spec_setup.h"

namespace specd::cli {

namespace {

struct GenerateOptions {
    std::string model;
    std::string prompt = "Once upon a time";
    int32_t n_predict = 128;
    int32_t threads = ThreadPool::hardware_threads();
    int32_t ctx = 0;  // 0: the model's context_length
    SamplingParams sampling;
    bool json = false;
    bool no_bos = false;
    std::string device = "auto";  // --device: auto | cpu | cuda
    std::string cache_type = "f16";  // --cache-type: the target's KV elements on the CPU, f16 | f32
    SpecOptions spec;
};

void check_threads(int32_t threads) {
    if (threads < 1 || threads > 512) throw Error("-t/--threads must be in 1..512, got " + std::to_string(threads));
}

// 0: the trained length, capped by what KV_CACHE_RATIO's default share of
// the available RAM holds for this one sequence (engine/context_plan.h; a
// 128k-token model on a small machine would not fit its KV cache).
int32_t resolve_ctx(int32_t requested, const LlamaModel& model, const std::string& cache_type) {
    const int32_t train = model.hparams().n_ctx_train;
    if (requested < 0) throw Error("-c/--ctx-size must be >= 0, got " + std::to_string(requested));
    if (requested == 0) {
        ContextInputs in;
        in.n_ctx_train = train;
        in.kv_cache_ratio = RuntimeConfig{}.kv_cache_ratio;
        in.budget_bytes = available_memory_bytes();
        in.kv_bytes_per_token = kv_bytes_per_token(model, tensor_type_from_name(cache_type).value_or(TensorType::F16));
        in.max_sequences = 1;
        in.kv_type = cache_type;
        return plan_context(in).n_ctx;
    }
    if (requested > train) {
        throw Error("-c/--ctx-size " + std::to_string(requested) + " exceeds the model's context_length " +
                    std::to_string(train));
    }
    return requested;
}

void run_generate(const GenerateOptions& o) {
    check_threads(o.threads);
    if (o.n_predict < 0) throw Error("-n/--n-predict must be >= 0, got " + std::to_string(o.n_predict));
    o.sampling.validate();
    // Before loading anything: a refused --device cuda fails at once.
    const gpu::BackendChoice device = choose_device(o.device);
    const std::unique_ptr<LlamaModel> model = LlamaModel::load(o.model);
    const int32_t n_ctx = resolve_ctx(o.ctx, *model, o.cache_type);
    const Tokenizer& tok = model->tokenizer();
    const std::vector<int32_t> prompt = tok.encode(o.prompt, tok.add_bos() && !o.no_bos);
    check_prompt_fits(prompt.size(), n_ctx);

    ThreadPool pool(o.threads);
    const std::unique_ptr<ForwardBackend> fwd_owner = make_backend(device, *model, pool);
    ForwardBackend& fwd = *fwd_owner;
    KvCacheShape kv_shape = fwd.kv_shape(n_ctx, 1);
    kv_shape.type = *tensor_type_from_name(o.cache_type);  // CLI11 checked the name
    const std::unique_ptr<PagedKvCache> kv_owner = fwd.make_kv_cache(kv_shape);
    PagedKvCache& kv = *kv_owner;
    SpecSetup spec = make_spec_setup(o.spec, *model, pool, n_ctx, &device);
    SpeculativeParams spec_params = o.spec.params;
    const int32_t room = n_ctx - static_cast<int32_t>(prompt.size()) - 1;
    if (spec.proposer && spec_params.draft_max > room) {
        std::fprintf(stderr, "specd: warning: --draft-max %d clipped to %d by the context size\n", spec_params.draft_max,
                     std::max(room, 0));
        spec_params.draft_max = std::max(room, 0);
        spec_params.draft_min = std::min(spec_params.draft_min, spec_params.draft_max);
    }
    SpeculativeDecoder decoder(fwd, kv, spec.proposer.get());
    GenerationParams params;
    params.max_tokens = o.n_predict;
    params.sampling = o.sampling;

    Tokenizer::StreamDecoder stream(tok, DecodeAt::Continuation);
    std::string text;
    if (!o.json) {
        std::fputs(o.prompt.c_str(), stdout);
        std::fflush(stdout);
    }
    const SpeculativeResult r = decoder.generate(prompt, params, spec_params, [&](int32_t id) {
        const std::string piece = stream.push(id);
        text += piece;
        if (!o.json) {
            std::fputs(piece.c_str(), stdout);
            std::fflush(stdout);
        }
        return true;
    });
    const std::string tail = stream.flush();
    text += tail;
    const double prompt_tps = r.prompt_ms > 0 ? 1000.0 * r.n_prompt / r.prompt_ms : 0.0;
    const SpecStats& st = r.stats;
    if (o.json) {
        nlohmann::json j;
        j["text"] = text;
        j["tokens"] = r.tokens;
        j["n_prompt"] = r.n_prompt;
        j["n_generated"] = r.tokens.size();
        j["prompt_ms"] = r.prompt_ms;
        j["gen_ms"] = r.gen_ms;
        j["tokens_per_s"] = r.tokens_per_s();
        j["stop"] = stop_reason_name(r.stop);
        j["speculative"] = spec.kind;
        j["n_drafted"] = st.n_drafted;
        j["n_accepted"] = st.n_accepted;
        j["acceptance_rate"] = st.acceptance_rate();
        j["mean_accept_len"] = st.mean_accept_len();
        j["accept_per_position"] = st.accept_rate_per_position();
        j["draft_ms"] = st.draft_ms;
        j["verify_ms"] = st.verify_ms;
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("%s\n", tail.c_str());
        std::fprintf(stderr,
                     "specd: prompt %d tokens in %.1f ms (%.0f t/s) | generated %zu tokens in %.1f ms (%.1f t/s) | "
                     "stop: %s | %s %s, %d threads, %s\n",
                     r.n_prompt, r.prompt_ms, prompt_tps, r.tokens.size(), r.gen_ms, r.tokens_per_s(),
                     stop_reason_name(r.stop), model->name().c_str(), tensor_type_name(model->weight_type()),
                     o.threads, backend_label(fwd).c_str());
        if (spec.proposer) {
            std::fprintf(stderr,
                         "specd: speculative %s: drafted %lld, accepted %lld (%.1f%%), mean acceptance length %.2f, "
                         "mean k %.2f, draft %.1f ms, verify %.1f ms\n",
                         spec.proposer->name().c_str(), static_cast<long long>(st.n_drafted),
                         static_cast<long long>(st.n_accepted), 100.0 * st.acceptance_rate(), st.mean_accept_len(),
                         st.n_steps ? static_cast<double>(st.k_sum) / static_cast<double>(st.n_steps) : 0.0, st.draft_ms,
                         st.verify_ms);
        }
    }
}

// ------------------------------------------------------------------ bench ---

struct BenchOptions {
    std::vector<std::string> models;
    std::vector<int32_t> threads{ThreadPool::hardware_threads()};
    int32_t n_prompt = 128;
    int32_t n_gen = 128;
    int32_t repetitions = 5;
    bool json = false;
    bool bandwidth = false;
    std::vector<int> concurrency;   // --concurrency: the in-process runtime under load instead
    std::vector<int32_t> step_rows; // --step-rows: the cost of one decode step over R sequences at once
    std::string draft_model;        // -md with --concurrency
    std::string url;                // --url: load a running server (ws:// or http://), or "self"
    std::string api_key;            // --api-key for --url
    std::string device;             // --device: auto | cpu | cuda ("" = auto; the runtime paths keep SPECD_DEVICE)
};

struct Stat {
    double mean = 0, sd = 0, median = 0;
};

Stat stats(std::vector<double> v) {
    Stat s;
    if (v.empty()) return s;
    for (double x : v) s.mean += x;
    s.mean /= static_cast<double>(v.size());
    for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
    s.sd = v.size() > 1 ? std::sqrt(s.sd / static_cast<double>(v.size() - 1)) : 0.0;
    std::sort(v.begin(), v.end());
    s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    return s;
}

// One timed run: pp feeds n tokens as one batch (logits of the last only, as
// llama-bench does); tg feeds n tokens one at a time from an empty cache.
double bench_once(ForwardBackend& fwd, PagedKvCache& kv, int32_t n, bool prompt_processing) {
    const int32_t vocab = fwd.n_vocab();
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = 1 + (i * 7919) % (vocab - 1);
    const int32_t seq = kv.create_sequence();
    const double t0 = now_ms();
    if (prompt_processing) {
        for (int32_t begin = 0; begin < n; begin += fwd.options().max_batch_tokens) {
            BatchItem item;
            item.seq = seq;
            item.tokens = std::span<const int32_t>(tokens).subspan(
                static_cast<size_t>(begin), static_cast<size_t>(std::min(fwd.options().max_batch_tokens, n - begin)));
            fwd.forward(kv, std::span<const BatchItem>(&item, 1));
        }
    } else {
        for (int32_t i = 0; i < n; ++i) {
            BatchItem item;
            item.seq = seq;
            item.tokens = std::span<const int32_t>(&tokens[static_cast<size_t>(i)], 1);
            fwd.forward(kv, std::span<const BatchItem>(&item, 1));
        }
    }
    const double ms = now_ms() - t0;
    kv.free_sequence(seq);
    return 1000.0 * n / ms;
}

// The cost of one step that decodes one token in each of `rows` sequences
// (the shape of batched decoding and, with rows = B * (k + 1), of a verify
// step): each sequence first holds `context` tokens, then `n` steps run.
// Returns the median ms per step over `repetitions` runs of n steps.
double step_cost_ms(ForwardBackend& fwd, PagedKvCache& kv, int32_t rows, int32_t context, int32_t n, int32_t repetitions) {
    const int32_t vocab = fwd.n_vocab();
    std::vector<int32_t> seqs(static_cast<size_t>(rows));
    std::vector<int32_t> prompt(static_cast<size_t>(context));  // (context) token ids
    for (int32_t i = 0; i < context; ++i) prompt[static_cast<size_t>(i)] = 1 + (i * 7919) % (vocab - 1);
    for (int32_t& s : seqs) {
        s = kv.create_sequence();
        BatchItem item;
        item.seq = s;
        item.tokens = prompt;
        fwd.forward(kv, std::span<const BatchItem>(&item, 1));
    }
    std::vector<int32_t> next(static_cast<size_t>(rows));  // (rows) one token per sequence
    std::vector<BatchItem> items(static_cast<size_t>(rows));
    std::vector<double> per_step;
    for (int32_t r = 0; r <= repetitions; ++r) {  // run 0 warms up
        const double t0 = now_ms();
        for (int32_t step = 0; step < n; ++step) {
            for (int32_t i = 0; i < rows; ++i) {
                next[static_cast<size_t>(i)] = 1 + ((step + r * n) * 104729 + i * 7919) % (vocab - 1);
                items[static_cast<size_t>(i)].seq = seqs[static_cast<size_t>(i)];
                items[static_cast<size_t>(i)].tokens = std::span<const int32_t>(&next[static_cast<size_t>(i)], 1);
            }
            fwd.forward(kv, items);
        }
        if (r > 0) per_step.push_back((now_ms() - t0) / n);
        for (int32_t s : seqs) kv.truncate(s, context);
    }
    for (int32_t s : seqs) kv.free_sequence(s);
    std::sort(per_step.begin(), per_step.end());
    return per_step[per_step.size() / 2];
}

void run_bench_step_rows(const BenchOptions& o) {
    const gpu::BackendChoice device = choose_device(o.device.empty() ? "auto" : o.device);
    const int32_t context = 32, steps = std::max(1, o.n_gen / 8);
    std::printf("| model | threads | rows per step | ms per step | x one row | rows/s |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (const std::string& path : o.models) {
        const std::unique_ptr<LlamaModel> model = LlamaModel::load(path);
        for (int32_t threads : o.threads) {
            ThreadPool pool(threads);
            const std::unique_ptr<ForwardBackend> fwd = make_backend(device, *model, pool);
            const int32_t most = *std::max_element(o.step_rows.begin(), o.step_rows.end());
            if (most > fwd->options().max_batch_tokens) {
                throw Error("bench: --step-rows " + std::to_string(most) + " is over the batch limit of " +
                            std::to_string(fwd->options().max_batch_tokens));
            }
            const std::unique_ptr<PagedKvCache> kv = fwd->make_kv_cache(fwd->kv_shape(context + steps + 1, most));
            double one = 0;
            for (int32_t rows : o.step_rows) {
                const double ms = step_cost_ms(*fwd, *kv, rows, context, steps, o.repetitions);
                if (one == 0) one = ms;
                std::printf("| %s | %d | %d | %.2f | %.2f | %.1f |\n", model->name().c_str(), threads, rows, ms, ms / one,
                            1000.0 * rows / ms);
                std::fflush(stdout);
            }
        }
    }
}

void run_bench(const BenchOptions& o) {
    if (o.models.empty()) throw Error("bench: give at least one model with -m");
    if (o.repetitions < 1) throw Error("-r/--repetitions must be >= 1");
    if (o.n_prompt < 0 || o.n_gen < 0) throw Error("-p and -n must be >= 0");
    for (int32_t t : o.threads) check_threads(t);
    const gpu::BackendChoice device = choose_device(o.device.empty() ? "auto" : o.device);
    nlohmann::json rows = nlohmann::json::array();
    std::vector<double> bandwidth;  // bytes/s per entry of o.threads
    if (o.bandwidth) {
        for (int32_t threads : o.threads) {
            ThreadPool pool(threads);
            bandwidth.push_back(measure_read_bandwidth(pool));
            if (!o.json) {
                std::printf("DRAM read bandwidth, %d threads (1 GiB streamed, median of 5): %.1f GB/s\n", threads,
                            bandwidth.back() / 1e9);
            }
        }
        if (!o.json) std::printf("\n");
    }
    if (!o.json) {
        std::printf("| model | type | size | threads | isa | test | t/s (mean ± sd) | median |\n");
        std::printf("| --- | --- | ---: | ---: | --- | --- | ---: | ---: |\n");
    }
    for (const std::string& path : o.models) {
        const std::unique_ptr<LlamaModel> model = LlamaModel::load(path);
        const int32_t n_ctx = model->hparams().n_ctx_train;
        for (size_t ti = 0; ti < o.threads.size(); ++ti) {
            const int32_t threads = o.threads[ti];
            ThreadPool pool(threads);
            const std::unique_ptr<ForwardBackend> fwd_owner = make_backend(device, *model, pool);
            ForwardBackend& fwd = *fwd_owner;
            const std::unique_ptr<PagedKvCache> kv_owner = fwd.make_kv_cache(fwd.kv_shape(n_ctx, 1));
            PagedKvCache& kv = *kv_owner;
            struct Test {
                std::string name;
                int32_t n;
                bool pp;
            };
            std::vector<Test> tests;
            if (o.n_prompt > 0) tests.push_back({"pp" + std::to_string(o.n_prompt), o.n_prompt, true});
            if (o.n_gen > 0) tests.push_back({"tg" + std::to_string(o.n_gen), o.n_gen, false});
            for (const Test& t : tests) {
                if (t.n > n_ctx) throw Error("bench: " + t.name + " does not fit the context of " + std::to_string(n_ctx));
                bench_once(fwd, kv, t.n, t.pp);  // warm-up
                std::vector<double> tps;
                for (int32_t r = 0; r < o.repetitions; ++r) tps.push_back(bench_once(fwd, kv, t.n, t.pp));
                const Stat s = stats(tps);
                const double mib = static_cast<double>(model->weight_bytes()) / (1024.0 * 1024.0);
                if (o.json) {
                    rows.push_back({{"model", model->name()}, {"type", tensor_type_name(model->weight_type())},
                                    {"weight_bytes", model->weight_bytes()}, {"threads", threads},
                                    {"isa", backend_label(fwd)}, {"test", t.name}, {"tokens_per_s", tps},
                                    {"mean", s.mean}, {"sd", s.sd}, {"median", s.median}});
                } else {
                    std::string bound;
                    if (!bandwidth.empty() && !t.pp) {
                        const double limit = bandwidth[ti] / static_cast<double>(model->weight_bytes());
                        char buf[96];
                        std::snprintf(buf, sizeof buf, " (%.0f%% of the %.0f t/s bandwidth bound)", 100.0 * s.median / limit, limit);
                        bound = buf;
                    }
                    std::printf("| %s | %s | %.2f MiB | %d | %s | %s | %.2f ± %.2f | %.2f%s |\n", model->name().c_str(),
                                tensor_type_name(model->weight_type()), mib, threads, backend_label(fwd).c_str(),
                                t.name.c_str(), s.mean, s.sd, s.median, bound.c_str());
                    std::fflush(stdout);
                }
            }
        }
    }
    if (o.json) std::printf("%s\n", rows.dump(2).c_str());
}


}  // namespace

void register_generate_commands(CLI::App& app) {
    auto gen = std::make_shared<GenerateOptions>();
    CLI::App* g = app.add_subcommand("generate", "generate text from a prompt");
    g->add_option("-m,--model", gen->model, "GGUF model file")->required();
    g->add_option("-p,--prompt", gen->prompt, "prompt text")->capture_default_str();
    g->add_option("-n,--n-predict", gen->n_predict, "tokens to generate")->capture_default_str();
    g->add_option("-t,--threads", gen->threads, "threads")->capture_default_str();
    g->add_option("-c,--ctx-size", gen->ctx, "context size; 0 = the model's trained length, capped by what KV_CACHE_RATIO of the available RAM holds")->capture_default_str();
    g->add_flag("--json", gen->json, "print one JSON object instead of streaming text");
    g->add_flag("--no-bos", gen->no_bos, "do not prepend BOS");
    g->add_option("--cache-type", gen->cache_type, "the target's KV cache elements on the CPU: f16 (half the memory, the default) or f32 (exact)")
        ->check(CLI::IsMember({"f16", "f32"}))
        ->capture_default_str();
    add_sampling_flags(g, gen->sampling);
    add_spec_flags(g, gen->spec);
    add_device_flag(g, gen->device);
    g->callback([gen] { run_generate(*gen); });

    auto bench = std::make_shared<BenchOptions>();
    CLI::App* b = app.add_subcommand("bench", "measure prompt processing (pp) and generation (tg) speed");
    b->add_option("-m,--model", bench->models, "GGUF model file(s)")->delimiter(',');
    b->add_option("-t,--threads", bench->threads, "thread counts, e.g. 1,2")->delimiter(',')->capture_default_str();
    b->add_option("-p,--n-prompt", bench->n_prompt, "prompt tokens for the pp test; 0 = skip")->capture_default_str();
    b->add_option("-n,--n-gen", bench->n_gen, "generated tokens for the tg test; 0 = skip")->capture_default_str();
    b->add_option("-r,--repetitions", bench->repetitions, "timed runs per test")->capture_default_str();
    b->add_flag("--json", bench->json, "print JSON instead of the table");
    b->add_flag("--bandwidth", bench->bandwidth, "also measure DRAM read bandwidth and the tg bound it implies");
    b->add_option("--concurrency", bench->concurrency, "concurrent sessions through the actor runtime, e.g. 1,4,16,64")->delimiter(',');
    b->add_option("--step-rows", bench->step_rows,
                  "decode steps over R sequences at once, e.g. 1,4,16,64: ms per step (the first R is the \"x\" baseline)")
        ->delimiter(',');
    b->add_option("--model-draft", bench->draft_model, "draft model for --concurrency (default: n-gram)");
    b->add_option("--url", bench->url, "load a running server: ws://HOST:PORT or http://HOST:PORT; \"self\": start one in-process and compare");
    b->add_option("--api-key", bench->api_key, "API key for --url");
    add_device_flag(b, bench->device);
    b->callback([bench] {
        if (!bench->url.empty()) {
            const std::vector<int> levels = bench->concurrency.empty() ? std::vector<int>{1, 4, 16} : bench->concurrency;
            const int n = bench->n_gen > 0 ? bench->n_gen : 128;
            return run_bench_net(bench->url, bench->models.empty() ? "" : bench->models.at(0), bench->draft_model, levels, n,
                                 bench->repetitions, bench->threads.front(), bench->api_key, bench->device);
        }
        if (!bench->step_rows.empty()) {
            if (bench->models.empty()) throw Error("bench: --step-rows needs -m MODEL");
            for (int32_t r : bench->step_rows) {
                if (r < 1) throw Error("bench: --step-rows takes counts >= 1");
            }
            return run_bench_step_rows(*bench);
        }
        if (!bench->concurrency.empty()) {
            if (bench->models.empty()) throw Error("bench: --concurrency needs -m TARGET");
            const int n = bench->n_gen > 0 ? bench->n_gen : 128;
            return run_bench_concurrency(bench->models.at(0), bench->draft_model, bench->concurrency, n, bench->repetitions,
                                         bench->threads.front(), bench->device);
        }
        run_bench(*bench);
    });
}

}  // namespace specd::cli
