// `specd bench-spec`: plain decoding against each proposer at several draft
// lengths and temperatures, on a fixed prompt set, measured side by side in
// one run (round-robin). Prints a table and writes JSON and an SVG chart of speedup
// against draft length.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/forward.h"
#include "engine/speculative.h"
#include "tools/specd/commands.h"
#include "tools/specd/spec_setup.h"

namespace specd::cli {

namespace {

struct PromptSet {
    std::string name;
    std::vector<std::string> prompts;
};

// The documented prompt set (docs/BENCHMARKS.md). "stories": open-ended
// continuations. "grounded": the prompt holds a story and starts it again,
// so that the output could copy the input (stories15M mostly writes a new
// story instead). "refrain": dialogues whose lines repeat, where the
// output does repeat lines of the prompt and of itself, as in the
// repetitive outputs (code edits, lists, templates) n-gram lookup is for.
const std::vector<PromptSet>& prompt_sets() {
    static const std::string story =
        "Tom had a red ball. He liked to throw it high in the sky. One day, the ball fell into the pond. Tom was sad. "
        "A big frog jumped out of the water and gave the ball back to Tom. Tom said thank you to the frog. They "
        "played together all day and became best friends.";
    static const std::vector<PromptSet> sets = {
        {"stories",
         {"Once upon a time", "Lily and her brother Ben went to the park", "One day, a little dog named Max",
          "The sun was shining and the birds were singing"}},
        {"grounded",
         {story + "\n\n" + story.substr(0, 40), "Here is a story. " + story + " Here is the same story again. " +
                                                     story.substr(0, 30)}},
        {"refrain",
         {"Tom said, \"I like my red ball.\" Tom said, \"I like my red ball.\" Tom said, \"I like my red ball.\" Tom said,",
          "Mom said, \"Time for bed.\" Lily said, \"One more story, please.\" Mom said, \"Time for bed.\" Lily said, "
          "\"One more story, please.\" Mom said,"}},
    };
    return sets;
}

struct BenchSpecOptions {
    std::string target;
    std::vector<std::string> drafts;
    // Draft head sizes to compare (0 = full head). The default is what
    // `generate` and `serve` use, so the headline figure is the one users get.
    std::vector<int32_t> draft_vocab{SpecOptions{}.draft_vocab};
    bool ngram = true;
    std::vector<int32_t> draft_max{2, 4, 8, 16};
    std::vector<float> temps{0.0f, 0.8f};
    std::vector<std::string> sets;  // prompt sets to run; empty = all
    int32_t n_gen = 200;
    int32_t repetitions = 3;
    int32_t threads = ThreadPool::hardware_threads();
    int32_t ngram_min = 1, ngram_max = 4;
    // Sampled runs with coupled noise (engine/coupled_sampling.h: what a
    // seeded request gets) instead of the rejection rule, to compare their acceptance.
    bool coupled = false;
    int32_t seeds = 1;  // sampled runs: each prompt with this many seeds (more samples for acceptance figures)
    std::string out_json = "bench-spec.json";
    std::string out_svg = "bench-spec.svg";
};

struct Row {
    std::string set, proposer, mode;  // mode: "k=N" or "adaptive" or "plain"
    int32_t k = 0;
    float temp = 0;
    double tps = 0;       // median over repetitions
    double speedup = 0;   // against plain at the same temp and set, same run
    double acceptance = 0, mean_len = 0, mean_k = 0;
    double draft_ms = 0, verify_ms = 0;
    int64_t tokens = 0;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string svg_chart(const std::vector<Row>& rows, const std::vector<int32_t>& ks) {
    // One polyline per (set, proposer, temp) of speedup against k.
    std::map<std::string, std::vector<std::pair<int32_t, double>>> lines;
    double ymax = 1.5;
    for (const Row& r : rows) {
        if (r.mode == "plain" || r.mode == "adaptive") continue;
        std::ostringstream key;
        key << r.set << " " << r.proposer << " T=" << r.temp;
        lines[key.str()].push_back({r.k, r.speedup});
        ymax = std::max(ymax, r.speedup * 1.1);
    }
    const int W = 760, L = 60, R = 250, T = 30, B = 50;
    const int H = std::max(420, T + 14 * static_cast<int>(lines.size()) + B);  // the legend fits
    const double kmax = ks.empty() ? 16 : *std::max_element(ks.begin(), ks.end());
    auto xs = [&](double k) { return L + (W - L - R) * std::log2(std::max(1.0, k)) / std::log2(std::max(2.0, kmax)); };
    auto ys = [&](double s) { return H - B - (H - T - B) * s / ymax; };
    std::ostringstream o;
    o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif' font-size='11'>\n";
    o << "<rect width='100%' height='100%' fill='white'/>\n";
    o << "<text x='" << L << "' y='18' font-size='13'>specd bench-spec: speedup over plain decoding vs draft length</text>\n";
    o << "<line x1='" << L << "' y1='" << ys(0) << "' x2='" << W - R << "' y2='" << ys(0) << "' stroke='black'/>\n";
    o << "<line x1='" << L << "' y1='" << ys(0) << "' x2='" << L << "' y2='" << T << "' stroke='black'/>\n";
    o << "<line x1='" << L << "' y1='" << ys(1) << "' x2='" << W - R << "' y2='" << ys(1) << "' stroke='#999' stroke-dasharray='4'/>\n";
    for (int32_t k : ks) o << "<text x='" << xs(k) - 4 << "' y='" << H - B + 16 << "'>" << k << "</text>\n";
    o << "<text x='" << (L + W - R) / 2 - 30 << "' y='" << H - 12 << "'>draft length k</text>\n";
    for (double s = 0; s <= ymax; s += 0.5) o << "<text x='" << L - 30 << "' y='" << ys(s) + 4 << "'>" << s << "x</text>\n";
    static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                   "#bcbd22", "#17becf", "#000000", "#aec7e8"};
    int i = 0;
    for (auto& [name, pts] : lines) {
        std::sort(pts.begin(), pts.end());
        const char* c = colors[i % 12];
        o << "<polyline fill='none' stroke='" << c << "' stroke-width='2' points='";
        for (auto& [k, s] : pts) o << xs(k) << "," << ys(s) << " ";
        o << "'/>\n";
        o << "<text x='" << W - R + 10 << "' y='" << T + 14 * i + 10 << "' fill='" << c << "'>" << name << "</text>\n";
        ++i;
    }
    o << "</svg>\n";
    return o.str();
}

void run_bench_spec(const BenchSpecOptions& o) {
    if (o.repetitions < 1 || o.n_gen < 1) throw Error("bench-spec: -r and -n must be >= 1");
    for (const std::string& name : o.sets) {
        const auto& all = prompt_sets();
        if (std::none_of(all.begin(), all.end(), [&](const PromptSet& s) { return s.name == name; })) {
            throw Error("bench-spec: unknown prompt set '" + name + "' (stories, grounded, refrain)");
        }
    }
    auto target = LlamaModel::load(o.target);
    const int32_t n_ctx = target->hparams().n_ctx_train;
    ThreadPool pool(o.threads);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(n_ctx, 1));

    struct NamedProposer {
        std::string name;
        std::shared_ptr<LlamaModel> model;  // shared by the head sizes of one draft
        std::unique_ptr<Proposer> proposer;
    };
    std::vector<NamedProposer> proposers;
    for (const std::string& d : o.drafts) {
        std::shared_ptr<LlamaModel> model = LlamaModel::load(d);
        for (int32_t head : o.draft_vocab) {
            NamedProposer p;
            p.model = model;
            p.proposer = std::make_unique<DraftModelProposer>(*target, *model, pool, n_ctx, head);
            p.name = p.proposer->name() + (head > 0 ? " head " + std::to_string(head) : "");
            proposers.push_back(std::move(p));
        }
    }
    if (o.ngram) {
        NamedProposer p;
        p.proposer = std::make_unique<NgramProposer>(o.ngram_min, o.ngram_max);
        p.name = "ngram";
        proposers.push_back(std::move(p));
    }

    std::vector<Row> rows;
    std::printf("sampling: %s\n\n", o.coupled ? "coupled noise (a seeded request's)" : "the rejection rule (random stream)");
    std::printf("| set | temp | proposer | k | t/s | speedup | acceptance | mean acc. len | mean k | draft ms/tok | verify ms/step |\n");
    std::printf("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const PromptSet& set : prompt_sets()) {
        if (!o.sets.empty() && std::find(o.sets.begin(), o.sets.end(), set.name) == o.sets.end()) continue;
        std::vector<std::vector<int32_t>> prompts;
        for (const std::string& p : set.prompts) prompts.push_back(target->tokenizer().encode(p, true));
        for (float temp : o.temps) {
            // Every configuration of this (set, temp), each with its own
            // decoder: its draft-length controller learns across the runs,
            // as a server's does across requests.
            struct Config {
                Row row;
                Proposer* proposer;
                SpeculativeParams params;
                std::unique_ptr<SpeculativeDecoder> decoder;
                std::vector<double> tps;    // (repetitions) tokens/s per round
                std::vector<double> ratio;  // (repetitions) over plain in the same round
            };
            std::vector<Config> configs;
            SpeculativeParams off;
            off.draft_max = 0;
            configs.push_back({Row{set.name, "plain", "plain", 0, temp}, nullptr, off, nullptr, {}, {}});
            for (NamedProposer& p : proposers) {
                for (int32_t k : o.draft_max) {
                    SpeculativeParams sp;
                    sp.draft_max = k;
                    sp.adaptive = false;
                    configs.push_back({Row{set.name, p.name, "k=" + std::to_string(k), k, temp}, p.proposer.get(), sp, nullptr, {}, {}});
                }
                SpeculativeParams adaptive;  // the defaults: draft-max 8, dynamic k
                configs.push_back({Row{set.name, p.name, "adaptive", adaptive.draft_max, temp}, p.proposer.get(), adaptive, nullptr, {}, {}});
            }
            for (Config& c : configs) c.decoder = std::make_unique<SpeculativeDecoder>(fwd, kv, c.proposer);

            // One measurement: every prompt once; tokens/s over the whole set.
            auto measure = [&](Config& c, bool keep) {
                SpecStats total;
                double ms = 0;
                int64_t tokens = 0;
                for (size_t run = 0; run < prompts.size() * static_cast<size_t>(temp > 0.0f ? std::max(1, o.seeds) : 1); ++run) {
                    const size_t i = run % prompts.size();
                    GenerationParams gp;
                    gp.max_tokens = o.n_gen;
                    gp.stop_at_eos = false;
                    gp.sampling.temperature = temp;
                    gp.sampling.seed = 1234 + run;
                    gp.sampling.coupled = o.coupled;
                    const SpeculativeResult r = c.decoder->generate(prompts[i], gp, c.params);
                    ms += r.gen_ms;
                    tokens += static_cast<int64_t>(r.tokens.size());
                    total.add(r.stats);
                }
                if (!keep) return;
                c.tps.push_back(1000.0 * static_cast<double>(tokens) / ms);
                Row& row = c.row;
                row.tokens = tokens;
                row.acceptance = total.acceptance_rate();
                row.mean_len = total.mean_accept_len();
                row.mean_k = total.n_steps ? static_cast<double>(total.k_sum) / static_cast<double>(total.n_steps) : 0;
                row.draft_ms = total.k_sum ? total.draft_ms / static_cast<double>(total.k_sum) : 0;
                row.verify_ms = total.n_steps ? total.verify_ms / static_cast<double>(total.n_steps) : 0;
            };
            // Rounds: every configuration once per round, plain first, so a
            // machine that slows down or speeds up over minutes (shared VMs
            // do) shifts every configuration alike; the speedup is the
            // median of the per-round ratios. Round 0 is a warm-up.
            for (int32_t rep = 0; rep < o.repetitions + 1; ++rep) {
                for (Config& c : configs) measure(c, rep > 0);
                if (rep == 0) continue;
                for (Config& c : configs) c.ratio.push_back(c.tps.back() / configs.front().tps.back());
            }
            for (Config& c : configs) {
                c.row.tps = median(c.tps);
                c.row.speedup = median(c.ratio);
                std::printf("| %s | %.1f | %s | %s | %.1f | %.2fx | %.1f%% | %.2f | %.2f | %.3f | %.3f |\n",
                            c.row.set.c_str(), c.row.temp, c.row.proposer.c_str(), c.row.mode.c_str(), c.row.tps,
                            c.row.speedup, 100 * c.row.acceptance, c.row.mean_len, c.row.mean_k, c.row.draft_ms,
                            c.row.verify_ms);
                std::fflush(stdout);
                rows.push_back(c.row);
            }
        }
    }
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
        j.push_back({{"set", r.set}, {"proposer", r.proposer}, {"mode", r.mode}, {"draft_max", r.k}, {"temp", r.temp},
                     {"tokens_per_s", r.tps}, {"speedup", r.speedup}, {"acceptance_rate", r.acceptance},
                     {"mean_accept_len", r.mean_len}, {"mean_k", r.mean_k}, {"draft_ms_per_token", r.draft_ms},
                     {"verify_ms_per_step", r.verify_ms}, {"tokens", r.tokens}});
    }
    nlohmann::json doc = {{"target", target->name() + "-" + tensor_type_name(target->weight_type())},
                          {"threads", o.threads}, {"n_gen", o.n_gen}, {"repetitions", o.repetitions}, {"rows", j}};
    if (!o.out_json.empty()) {
        std::ofstream(o.out_json) << doc.dump(2) << "\n";
        std::fprintf(stderr, "specd: wrote %s\n", o.out_json.c_str());
    }
    if (!o.out_svg.empty()) {
        std::ofstream(o.out_svg) << svg_chart(rows, o.draft_max);
        std::fprintf(stderr, "specd: wrote %s\n", o.out_svg.c_str());
    }
}

}  // namespace

void register_bench_spec_command(CLI::App& app) {
    auto o = std::make_shared<BenchSpecOptions>();
    CLI::App* b = app.add_subcommand("bench-spec", "speculative decoding against plain decoding on a fixed prompt set");
    b->add_option("-m,--model", o->target, "target GGUF")->required();
    b->add_option("--drafts", o->drafts, "draft model GGUF(s), comma-separated")->delimiter(',');
    b->add_option("--draft-vocab", o->draft_vocab,
                  "draft head sizes to compare, comma-separated (0 = full head; N = the N most frequent tokens)")
        ->delimiter(',')
        ->capture_default_str();
    b->add_flag("!--no-ngram", o->ngram, "leave out the n-gram proposer");
    b->add_option("--draft-max", o->draft_max, "draft lengths to sweep")->delimiter(',')->capture_default_str();
    b->add_option("--temps", o->temps, "temperatures")->delimiter(',')->capture_default_str();
    b->add_option("--sets", o->sets, "prompt sets, comma-separated: stories, grounded, refrain (default: all)")->delimiter(',');
    b->add_option("-n,--n-gen", o->n_gen, "tokens per prompt")->capture_default_str();
    b->add_option("-r,--repetitions", o->repetitions, "timed runs per configuration (median)")->capture_default_str();
    b->add_option("-t,--threads", o->threads, "threads")->capture_default_str();
    b->add_option("--seeds", o->seeds, "sampled runs: seeds per prompt")->capture_default_str();
    b->add_flag("--coupled", o->coupled, "sample with coupled noise (what a request with a seed gets) instead of the rejection rule");
    b->add_option("--ngram-min", o->ngram_min)->capture_default_str();
    b->add_option("--ngram-max", o->ngram_max)->capture_default_str();
    b->add_option("--out-json", o->out_json, "JSON results file ('' = none)")->capture_default_str();
    b->add_option("--out-svg", o->out_svg, "SVG chart file ('' = none)")->capture_default_str();
    b->callback([o] { run_bench_spec(*o); });
}

}  // namespace specd::cli
