#include "engine/model_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "engine/chat_template.h"

namespace specd {

namespace {

std::string count_text(int64_t n) {
    char buf[32];
    if (n >= 1'000'000'000) {
        std::snprintf(buf, sizeof buf, "%.2fB", static_cast<double>(n) / 1e9);
    } else if (n >= 1'000'000) {
        std::snprintf(buf, sizeof buf, "%.2fM", static_cast<double>(n) / 1e6);
    } else {
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
    }
    return buf;
}

std::string float_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// "13 '<|im_end|>'", or "none" for -1.
std::string token_text(const Tokenizer& tok, int32_t id) {
    if (id < 0) return "none";
    std::string text;
    for (const char c : tok.token_text(id)) {
        if (c == '\n') {
            text += "\\n";
        } else if (static_cast<unsigned char>(c) < 0x20) {
            text += '?';
        } else {
            text += c;
        }
    }
    return std::to_string(id) + " '" + text + "'";
}

}  // namespace

std::string summarize_model(const LlamaModel& model, const ContextPlan& default_context) {
    const LlamaHparams& hp = model.hparams();
    const ModelFamily& family = model.family();
    const gguf::File& f = model.file();
    const Tokenizer& tok = model.tokenizer();
    const std::string k = std::string(family.arch) + ".";
    std::string out;
    auto line = [&](const std::string& key, const std::string& value) { out += "  " + key + ": " + value + "\n"; };

    int64_t n_params = 0;
    std::map<std::string, std::pair<int, uint64_t>> types;  // type name -> (tensors, bytes)
    for (const gguf::TensorInfo& t : f.tensors()) {
        n_params += t.n_elements();
        auto& [count, bytes] = types[tensor_type_name(t.type)];
        ++count;
        bytes += t.n_bytes;
    }

    out += model.name() + " (" + model.path() + ")\n";
    std::string beyond = model.graph_beyond_llama2();
    line("architecture", std::string(family.arch) + (beyond.empty() ? "" : " (" + beyond + ")"));
    line("parameters", count_text(n_params) + " (" + tensor_type_name(model.weight_type()) + " weights, " +
                           format_bytes(static_cast<int64_t>(model.weight_bytes())) + " read per token)");
    line("layers", std::to_string(hp.n_layers) + ", width " + std::to_string(hp.dim) + ", FFN " + std::to_string(hp.ffn_dim) +
                       (family.ffn_activation == FfnActivation::GeluTanh ? " (GeGLU)" : " (SwiGLU)"));
    line("attention", std::to_string(hp.n_heads) + " heads, " + std::to_string(hp.n_kv_heads) + " KV heads, head size " +
                          std::to_string(hp.head_dim) + (family.qk_norm ? ", Q/K norms" : ""));
    const auto file_ctx = f.get_u32_opt(k + "context_length");
    std::string trained = std::to_string(hp.n_ctx_train);
    if (file_ctx && static_cast<int64_t>(*file_ctx) != hp.n_ctx_train) {
        trained += " (the file says " + std::to_string(*file_ctx) + "; LongRoPE runs within original_context_length)";
    }
    line("context", "trained " + trained);
    line("default context", std::to_string(default_context.n_ctx) + " on this machine: " + default_context.reason);

    std::string rope = "base " + float_text(hp.rope_freq_base) + ", " +
                       (family.rope_pairing == RopePairing::Neox ? "NEOX pairing (i, i + n/2)" : "NORM pairing (2i, 2i+1)") +
                       ", " + std::to_string(hp.rope_dim) + " of " + std::to_string(hp.head_dim) + " dims rotated";
    if (hp.rope_freq_scale != 1.0f) rope += ", linear scaling x" + float_text(1.0 / hp.rope_freq_scale);
    if (!hp.rope_freq_factors.empty()) {
        rope += family.long_rope ? ", LongRoPE short factors" : ", frequency factors (rope_freqs: llama3 scaling)";
    }
    if (hp.rope_attn_factor != 1.0f) rope += ", attention factor " + float_text(hp.rope_attn_factor);
    if (hp.rope_freq_factors.empty() && hp.rope_freq_scale == 1.0f) rope += ", no scaling";
    line("RoPE", rope);
    if (hp.sliding_window > 0) {
        int windowed = 0;
        for (const LlamaLayer& L : model.layers()) windowed += L.windowed ? 1 : 0;
        line("sliding window", std::to_string(hp.sliding_window) + " positions on " + std::to_string(windowed) + " of " +
                                   std::to_string(hp.n_layers) + " layers, RoPE base " + float_text(hp.rope_freq_base_swa) + " there");
    }
    if (hp.final_logit_softcap > 0.0f) line("logit soft-cap", float_text(hp.final_logit_softcap));
    line("output", model.classifier_tied() ? "tied to the token embedding" : "output.weight");

    const VocabData& v = tok.vocab();
    std::string vocab = std::string(tok.kind() == VocabKind::Spm ? "SPM" : "BPE") + " (tokenizer.ggml.model '" +
                        f.get_string_opt("tokenizer.ggml.model").value_or("?") + "')";
    if (tok.kind() == VocabKind::Bpe) vocab += ", pre-tokenizer '" + v.pre + "', " + std::to_string(v.merges.size()) + " merges";
    vocab += ", " + std::to_string(tok.n_vocab()) + " tokens";
    line("vocabulary", vocab);
    line("special tokens", "BOS " + token_text(tok, tok.bos_id()) + (tok.add_bos() ? " (added)" : "") + ", EOS " +
                               token_text(tok, tok.eos_id()) + (tok.add_eos() ? " (added)" : "") + ", EOT " + token_text(tok, tok.eot_id()));
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (tok.is_end_of_generation(id)) eog.push_back(id);
    }
    std::string eog_text;
    for (size_t i = 0; i < eog.size(); ++i) eog_text += (i ? ", " : "") + token_text(tok, eog[i]);
    line("end of generation", eog_text.empty() ? "none" : eog_text);
    for (const std::string& w : v.warnings) line("vocabulary warning", w);

    const std::string tmpl = f.get_string_opt("tokenizer.chat_template").value_or("");
    const ChatTemplate chat = ChatTemplate::from_gguf_template(tmpl);
    std::string chat_text = std::string(chat.variant_name());
    if (tmpl.empty()) {
        chat_text += " (the file has no tokenizer.chat_template)";
    } else if (!chat.recognised()) {
        chat_text += " (tokenizer.chat_template not recognised: chat falls back to plain text)";
    } else {
        chat_text += " (recognised from tokenizer.chat_template)";
    }
    line("chat template", chat_text);

    std::vector<std::pair<std::string, std::pair<int, uint64_t>>> sorted(types.begin(), types.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    std::string hist;
    for (const auto& [name, cb] : sorted) {
        hist += (hist.empty() ? "" : ", ") + name + " x" + std::to_string(cb.first) + " (" + format_bytes(static_cast<int64_t>(cb.second)) + ")";
    }
    line("tensor types", hist);
    return out;
}

}  // namespace specd
