#include "net/logprobs_json.h"

#include "config/json_text.h"

namespace specd::net {

using nlohmann::json;

namespace {

json logprob_bytes_json(const std::string& bytes) {
    json out = json::array();
    for (const char c : bytes) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
    return out;
}

// {"token", "logprob", "bytes"} of one token.
json logprob_entry(int32_t token, float logprob, const TokenPiece& piece) {
    const std::string bytes = piece(token);
    return {{"token", valid_utf8(bytes)}, {"logprob", logprob}, {"bytes", logprob_bytes_json(bytes)}};
}

void check_logprob_shape(const token_event& e) {
    const TokenLogprobs& lp = e.logprobs;
    const size_t k = static_cast<size_t>(std::max(0, lp.n_top));
    if (lp.size() != e.tokens.size() || lp.top_ids.size() != lp.size() * k || lp.top_logprobs.size() != lp.size() * k)
        throw std::logic_error("token event: log-probabilities do not match its tokens");
}

}  // namespace

json chat_logprobs_json(const token_event& e, const TokenPiece& piece) {
    check_logprob_shape(e);
    const TokenLogprobs& lp = e.logprobs;
    const size_t k = static_cast<size_t>(std::max(0, lp.n_top));
    json content = json::array();
    for (size_t i = 0; i < e.tokens.size(); ++i) {
        json item = logprob_entry(e.tokens[i], lp.logprob[i], piece);
        json top = json::array();
        for (size_t j = 0; j < k; ++j) top.push_back(logprob_entry(lp.top_ids[i * k + j], lp.top_logprobs[i * k + j], piece));
        item["top_logprobs"] = std::move(top);
        content.push_back(std::move(item));
    }
    return {{"content", std::move(content)}};
}

json completion_logprobs_json(const token_event& e, const TokenPiece& piece, size_t text_base) {
    check_logprob_shape(e);
    const TokenLogprobs& lp = e.logprobs;
    const size_t k = static_cast<size_t>(std::max(0, lp.n_top));
    json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
    // Token i's text starts where token i - 1's ended (SessionCore::Emitted::text_ends).
    const bool ends_fit = e.text_ends.size() == e.tokens.size();
    for (size_t i = 0; i < e.tokens.size(); ++i) {
        tokens.push_back(valid_utf8(piece(e.tokens[i])));
        token_logprobs.push_back(lp.logprob[i]);
        json top = json::object();
        for (size_t j = 0; j < k; ++j) {
            const std::string text = valid_utf8(piece(lp.top_ids[i * k + j]));
            if (!top.contains(text)) top[text] = lp.top_logprobs[i * k + j];  // two ids of one text: the likelier
        }
        top_logprobs.push_back(std::move(top));
        const size_t begin = !ends_fit || i == 0 ? (ends_fit ? 0 : e.text.size()) : e.text_ends[i - 1];
        text_offset.push_back(text_base + begin);
    }
    return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)}, {"top_logprobs", std::move(top_logprobs)},
            {"text_offset", std::move(text_offset)}};
}

void append_token_event(token_event& into, const token_event& e) {
    into.tokens.insert(into.tokens.end(), e.tokens.begin(), e.tokens.end());
    into.from_draft.insert(into.from_draft.end(), e.from_draft.begin(), e.from_draft.end());
    const auto shift = static_cast<uint32_t>(into.text.size());
    for (const uint32_t end : e.text_ends) into.text_ends.push_back(shift + end);
    into.text += e.text;
    for (size_t i = 0; i < e.logprobs.size(); ++i) into.logprobs.append(e.logprobs, i);
}

}  // namespace specd::net
