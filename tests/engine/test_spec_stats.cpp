// SpecStats: what one recorded step counts, per position too, and sums.
#include <catch2/catch.hpp>

#include <vector>

#include "engine/spec_stats.h"

using namespace specd;

TEST_CASE("spec stats: a step counts its draft, the positions it reached and those accepted", "[spec][stats-recorder]") {
    SpecStats st(4);
    REQUIRE(st.drafted_per_position.size() == 4);
    st.record_step(4, 2, 1.5, 3.0);  // d1, d2 accepted, d3 rejected, d4 never judged
    st.record_step(0, 0, 0.0, 2.0);  // a plain step
    st.record_step(3, 3, 1.0, 2.5);  // all accepted (the bonus token is not a draft position)
    CHECK(st.n_steps == 3);
    CHECK(st.n_drafts == 2);
    CHECK(st.n_drafted == 7);
    CHECK(st.n_accepted == 5);
    CHECK(st.k_sum == 7);
    CHECK(st.draft_ms == Approx(2.5));
    CHECK(st.verify_ms == Approx(7.5));
    CHECK(st.drafted_per_position == std::vector<int64_t>{2, 2, 2, 0});
    CHECK(st.accepted_per_position == std::vector<int64_t>{2, 2, 1, 0});
    CHECK(st.accept_rate_per_position() == std::vector<double>{1.0, 1.0, 0.5, 0.0});
    CHECK(st.acceptance_rate() == Approx(5.0 / 7.0));
    CHECK(st.mean_accept_len() == Approx(1.0 + 5.0 / 2.0));

    SpecStats total;  // a sum starts empty and takes the widest counters
    total.add(st);
    total.add(SpecStats(6));
    CHECK(total.n_accepted == 5);
    CHECK(total.drafted_per_position == std::vector<int64_t>{2, 2, 2, 0, 0, 0});
}

TEST_CASE("spec stats: a draft longer than the counters widens them", "[spec][stats-recorder]") {
    SpecStats st(2);
    st.record_step(3, 1, 0.0, 0.0);
    CHECK(st.drafted_per_position == std::vector<int64_t>{1, 1, 0});
    CHECK(st.accepted_per_position == std::vector<int64_t>{1, 0, 0});
}
