// Prometheus metrics registry and text exposition; see metrics.h.
#include "net/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <iterator>
#include <sstream>

#include <unistd.h>

#include "actors/error_code.h"

namespace specd {

namespace {

enum MetricType { kCounterType, kGaugeType, kHistogramType };

const char* type_name(int type) {
    switch (type) {
    case kCounterType: return "counter";
    case kGaugeType: return "gauge";
    default: return "histogram";
    }
}

bool is_name_start(char c, bool allow_colon) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
}

bool is_name_char(char c, bool allow_colon) { return is_name_start(c, allow_colon) || (c >= '0' && c <= '9'); }

// Metric names may contain ':' (used by recording rules), label names not.
bool is_valid_name(std::string_view name, bool allow_colon) {
    if (name.empty() || !is_name_start(name[0], allow_colon)) return false;
    return std::all_of(name.begin() + 1, name.end(), [&](char c) { return is_name_char(c, allow_colon); });
}

void check_metric_name(std::string_view name) {
    if (!is_valid_name(name, true)) {
        throw Error("metric name \"" + std::string(name) + "\" is invalid: expected [a-zA-Z_:][a-zA-Z0-9_:]*");
    }
}

void check_labels(std::string_view metric, const MetricLabels& labels, bool is_histogram) {
    for (size_t i = 0; i < labels.size(); ++i) {
        const std::string& key = labels[i].first;
        const std::string where = "metric " + std::string(metric) + ": label name \"" + key + "\"";
        if (!is_valid_name(key, false)) throw Error(where + " is invalid: expected [a-zA-Z_][a-zA-Z0-9_]*");
        if (key.starts_with("__")) throw Error(where + " is reserved: names starting with __ are Prometheus'");
        if (is_histogram && key == "le") throw Error(where + " is reserved for histogram buckets");
        for (size_t j = 0; j < i; ++j) {
            if (labels[j].first == key) throw Error(where + " appears twice");
        }
    }
}

// The labels as a set: the same pairs in another order are the same series.
MetricLabels sorted(MetricLabels labels) {
    std::sort(labels.begin(), labels.end());
    return labels;
}

void append_escaped_label_value(std::string& out, std::string_view value) {
    for (char c : value) {
        switch (c) {
        case '\\': out.append("\\\\"); break;
        case '"': out.append("\\\""); break;
        case '\n': out.append("\\n"); break;
        default: out.push_back(c);
        }
    }
}

void append_escaped_help(std::string& out, std::string_view help) {
    for (char c : help) {
        switch (c) {
        case '\\': out.append("\\\\"); break;
        case '\n': out.append("\\n"); break;
        default: out.push_back(c);
        }
    }
}

// `k1="v1",k2="v2"` without braces, escaped: rendered once at registration.
std::string render_labels(const MetricLabels& labels) {
    std::string out;
    for (const auto& [key, value] : labels) {
        if (!out.empty()) out.push_back(',');
        out.append(key).append("=\"");
        append_escaped_label_value(out, value);
        out.push_back('"');
    }
    return out;
}

// name{labels} or name{labels,le="bound"} or name, then a space.
void append_series(std::string& out, std::string_view name, std::string_view suffix, std::string_view labels,
                   std::string_view le = {}) {
    out.append(name).append(suffix);
    if (!labels.empty() || !le.empty()) {
        out.push_back('{');
        out.append(labels);
        if (!le.empty()) {
            if (!labels.empty()) out.push_back(',');
            out.append("le=\"").append(le).push_back('"');
        }
        out.push_back('}');
    }
    out.push_back(' ');
}

constexpr std::string_view kHistogramSuffixes[] = {"_bucket", "_sum", "_count"};

void append_count(std::string& out, uint64_t count) {
    char buffer[24];
    out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, count).ptr);
}

// One series of a family. Exactly one of the value holders is set.
struct Series {
    MetricLabels labels_as_set;   // sorted, to find it again
    std::string rendered_labels;  // in the caller's order, escaped
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> read;  // gauge_fn
};

}  // namespace

ProcessStats read_process_stats() {
    ProcessStats ps;
    const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    if (std::ifstream statm("/proc/self/statm"); statm) {
        uint64_t size_pages = 0, resident_pages = 0;
        statm >> size_pages >> resident_pages;
        ps.virtual_bytes = size_pages * page;
        ps.resident_bytes = resident_pages * page;
    }
    if (std::ifstream stat("/proc/self/stat"); stat) {
        std::string line;
        std::getline(stat, line);
        // Fields after the parenthesised command name (which may hold spaces):
        // state is field 3; utime 14, stime 15, num_threads 20.
        const size_t close = line.rfind(')');
        if (close != std::string::npos) {
            std::istringstream rest(line.substr(close + 2));
            std::vector<std::string> f{std::istream_iterator<std::string>(rest), std::istream_iterator<std::string>()};
            if (f.size() > 17) {
                const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
                ps.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / ticks;
                ps.threads = std::stoull(f[17]);
            }
        }
    }
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec))
        ++ps.open_fds;
    return ps;
}

void append_metric_value(std::string& out, double value) {
    if (std::isnan(value)) {
        out.append("NaN");
        return;
    }
    if (std::isinf(value)) {
        out.append(value > 0 ? "+Inf" : "-Inf");
        return;
    }
    char buffer[32];
    // Integral values print as integers: std::to_chars' shortest form would
    // write 1000000 as "1e+06". Beyond 2^53 doubles are not all integers.
    constexpr double kExactIntegers = 9007199254740992.0;  // 2^53
    std::to_chars_result result;
    if (value == std::trunc(value) && std::fabs(value) <= kExactIntegers) {
        result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<int64_t>(value));
    } else {
        result = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest round trip
    }
    out.append(buffer, result.ptr);
}

void Counter::inc(double amount) {
    if (!(amount >= 0.0)) {
        std::string text;
        append_metric_value(text, amount);
        throw Error("counter increment must be >= 0, got " + text);
    }
    value_.fetch_add(amount, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds) : upper_bounds_(std::move(upper_bounds)) {
    if (!upper_bounds_.empty() && upper_bounds_.back() == std::numeric_limits<double>::infinity()) {
        upper_bounds_.pop_back();
    }
    for (size_t i = 0; i < upper_bounds_.size(); ++i) {
        const bool finite = std::isfinite(upper_bounds_[i]);
        if (finite && (i == 0 || upper_bounds_[i] > upper_bounds_[i - 1])) continue;
        std::string bound;
        append_metric_value(bound, upper_bounds_[i]);
        throw Error(finite ? "histogram bucket bounds must increase strictly; " + bound + " follows a bound >= it"
                           : "histogram bucket bound " + bound + " is not finite");
    }
    counts_ = std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1);
}

void Histogram::observe(double value) {
    // First bound >= value; NaN compares false everywhere, so it goes to +Inf.
    const size_t bucket = std::isnan(value) ? upper_bounds_.size()
                                            : static_cast<size_t>(std::lower_bound(upper_bounds_.begin(),
                                                                                   upper_bounds_.end(), value) -
                                                                  upper_bounds_.begin());
    counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(value, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
    std::vector<uint64_t> counts(upper_bounds_.size() + 1);
    for (size_t i = 0; i < counts.size(); ++i) counts[i] = counts_[i].load(std::memory_order_relaxed);
    return counts;
}

uint64_t Histogram::count() const {
    uint64_t total = 0;
    for (size_t i = 0; i <= upper_bounds_.size(); ++i) total += counts_[i].load(std::memory_order_relaxed);
    return total;
}

struct MetricsRegistry::Family {
    std::string name;
    std::string help;
    int type = kCounterType;
    std::vector<double> bounds;  // histograms: every series' upper bounds (+Inf dropped)
    std::vector<Series> series;  // registration order
    std::vector<std::string> label_names;                      // gauge_family_fn: its label names
    std::function<LabelledValues()> collect;                   // gauge_family_fn: its series, read at render

    Series* find(const MetricLabels& labels_as_set) {
        for (Series& s : series) {
            if (s.labels_as_set == labels_as_set) return &s;
        }
        return nullptr;
    }
    Series& add(const MetricLabels& labels, MetricLabels labels_as_set) {
        Series& s = series.emplace_back();
        s.labels_as_set = std::move(labels_as_set);
        s.rendered_labels = render_labels(labels);
        return s;
    }
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

// Finds or creates the family; mutex_ must be held.
MetricsRegistry::Family& MetricsRegistry::family(std::string_view name, std::string_view help, int type) {
    for (const auto& f : families_) {
        if (f->name != name) continue;
        if (f->type != type) {
            throw Error("metric " + std::string(name) + " is already registered as a " + type_name(f->type) +
                        ", not a " + type_name(type));
        }
        if (f->help != help) throw Error("metric " + std::string(name) + " is already registered with another help text");
        return *f;
    }
    // A histogram's series names (x_bucket, x_sum, x_count) must not clash
    // with another family's name.
    for (const auto& f : families_) {
        for (std::string_view suffix : kHistogramSuffixes) {
            const bool clash = (type == kHistogramType && f->name == std::string(name) + std::string(suffix)) ||
                               (f->type == kHistogramType && std::string(name) == f->name + std::string(suffix));
            if (clash) {
                throw Error("metric " + std::string(name) + " clashes with the series of histogram " +
                            (type == kHistogramType ? std::string(name) : f->name));
            }
        }
    }
    auto created = std::make_unique<Family>();
    created->name = name;
    created->help = help;
    created->type = type;
    families_.push_back(std::move(created));
    return *families_.back();
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help, const MetricLabels& labels) {
    check_metric_name(name);
    check_labels(name, labels, false);
    MetricLabels as_set = sorted(labels);
    std::lock_guard lock(mutex_);
    Family& f = family(name, help, kCounterType);
    if (Series* existing = f.find(as_set)) {
        if (!existing->counter) throw Error("metric " + std::string(name) + " with these labels is a callback counter");
        return *existing->counter;
    }
    Series& s = f.add(labels, std::move(as_set));
    s.counter = std::make_unique<Counter>();
    return *s.counter;
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help, const MetricLabels& labels) {
    check_metric_name(name);
    check_labels(name, labels, false);
    MetricLabels as_set = sorted(labels);
    std::lock_guard lock(mutex_);
    Family& f = family(name, help, kGaugeType);
    if (f.collect) throw Error("metric " + std::string(name) + " is a callback family");
    if (Series* existing = f.find(as_set)) {
        if (!existing->gauge) throw Error("metric " + std::string(name) + " with these labels is a callback gauge");
        return *existing->gauge;
    }
    Series& s = f.add(labels, std::move(as_set));
    s.gauge = std::make_unique<Gauge>();
    return *s.gauge;
}

void MetricsRegistry::gauge_fn(std::string_view name, std::string_view help, std::function<double()> read,
                               const MetricLabels& labels) {
    value_fn(name, help, kGaugeType, std::move(read), labels);
}

void MetricsRegistry::counter_fn(std::string_view name, std::string_view help, std::function<double()> read,
                                 const MetricLabels& labels) {
    value_fn(name, help, kCounterType, std::move(read), labels);
}

void MetricsRegistry::value_fn(std::string_view name, std::string_view help, int type, std::function<double()> read,
                               const MetricLabels& labels) {
    check_metric_name(name);
    check_labels(name, labels, false);
    if (!read) throw Error("metric " + std::string(name) + ": the " + type_name(type) + " callback is empty");
    MetricLabels as_set = sorted(labels);
    std::lock_guard lock(mutex_);
    Family& f = family(name, help, type);
    if (f.collect) throw Error("metric " + std::string(name) + " is a callback family");
    if (Series* existing = f.find(as_set)) {
        if (!existing->read) throw Error("metric " + std::string(name) + " with these labels is a set " + type_name(type));
        existing->read = std::move(read);
        return;
    }
    f.add(labels, std::move(as_set)).read = std::move(read);
}

void MetricsRegistry::gauge_family_fn(std::string_view name, std::string_view help, std::vector<std::string> label_names,
                                      std::function<LabelledValues()> read) {
    check_metric_name(name);
    MetricLabels names_only;
    for (const std::string& label : label_names) names_only.emplace_back(label, "");
    check_labels(name, names_only, false);
    if (!read) throw Error("metric " + std::string(name) + ": the family callback is empty");
    std::lock_guard lock(mutex_);
    Family& f = family(name, help, kGaugeType);
    if (!f.series.empty()) throw Error("metric " + std::string(name) + " already has series of its own");
    f.label_names = std::move(label_names);
    f.collect = std::move(read);
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help,
                                      std::vector<double> bucket_upper_bounds, const MetricLabels& labels) {
    check_metric_name(name);
    check_labels(name, labels, true);
    auto created = std::make_unique<Histogram>(std::move(bucket_upper_bounds));  // validates the bounds
    MetricLabels as_set = sorted(labels);
    std::lock_guard lock(mutex_);
    const bool is_new = std::none_of(families_.begin(), families_.end(), [&](const auto& f) { return f->name == name; });
    Family& f = family(name, help, kHistogramType);
    if (is_new) f.bounds = created->upper_bounds();
    if (f.bounds != created->upper_bounds()) {
        throw Error("histogram " + std::string(name) + " is already registered with other bucket bounds");
    }
    if (Series* existing = f.find(as_set)) return *existing->histogram;
    Series& s = f.add(labels, std::move(as_set));
    s.histogram = std::move(created);
    return *s.histogram;
}

std::string MetricsRegistry::render() const {
    std::lock_guard lock(mutex_);
    std::string out;
    out.reserve(256 * families_.size());
    std::string le;
    for (const auto& f : families_) {
        LabelledValues collected;
        if (f->collect) {
            collected = f->collect();
            if (collected.empty()) continue;
        }
        out.append("# HELP ").append(f->name).push_back(' ');
        append_escaped_help(out, f->help);
        out.append("\n# TYPE ").append(f->name).push_back(' ');
        out.append(type_name(f->type)).push_back('\n');
        for (const auto& [values, value] : collected) {
            MetricLabels labels;
            for (size_t i = 0; i < f->label_names.size(); ++i)
                labels.emplace_back(f->label_names[i], i < values.size() ? values[i] : std::string());
            append_series(out, f->name, "", render_labels(labels));
            append_metric_value(out, value);
            out.push_back('\n');
        }
        for (const Series& s : f->series) {
            if (f->type != kHistogramType) {
                append_series(out, f->name, "", s.rendered_labels);
                append_metric_value(out, s.counter ? s.counter->value() : s.gauge ? s.gauge->value() : s.read());
                out.push_back('\n');
                continue;
            }
            // Read every bucket once so the cumulative counts, +Inf and
            // _count agree even while observations arrive.
            const std::vector<uint64_t> counts = s.histogram->bucket_counts();
            uint64_t cumulative = 0;
            for (size_t i = 0; i < counts.size(); ++i) {
                cumulative += counts[i];
                le.clear();
                if (i < f->bounds.size()) {
                    append_metric_value(le, f->bounds[i]);
                } else {
                    le = "+Inf";
                }
                append_series(out, f->name, "_bucket", s.rendered_labels, le);
                append_count(out, cumulative);
                out.push_back('\n');
            }
            append_series(out, f->name, "_sum", s.rendered_labels);
            append_metric_value(out, s.histogram->sum());
            out.push_back('\n');
            append_series(out, f->name, "_count", s.rendered_labels);
            append_count(out, cumulative);
            out.push_back('\n');
        }
    }
    return out;
}

}  // namespace specd
