// The KV manager actor: a thin shell over KvLedger (admission of requests
// to both KV pools, a queue when full), releasing a request's blocks when
// its session ends or, for a remote session, its gateway goes away.
#include <chrono>
#include <unordered_map>
#include <vector>

#include "actors/runtime_shared.h"
#include "config/log.h"
#include "engine/kv_ledger.h"

namespace specd {

namespace {

struct kv_state {
    // Remote sessions (a gateway's) by the request they hold: when their
    // gateway dies or is cut off, the down message releases the blocks.
    std::unordered_map<caf::actor_addr, uint64_t> remote_owners;
    std::unique_ptr<KvLedger> ledger;
    std::unordered_map<uint64_t, caf::typed_response_promise<kv_grant>> waiting;
    std::vector<uint64_t> granted;
    static inline const char* name = "specd.kv_manager";
};

void kv_release(kv_manager_actor::stateful_pointer<kv_state> self, const std::shared_ptr<RuntimeShared>& rt, uint64_t request) {
    // Free the sequences on the compute actors first, then the blocks:
    // the next request admitted must find them free.
    auto finish = [self, request]() {
        auto& s = self->state;
        s.granted.clear();
        s.ledger->release(request, s.granted);
        auto w = s.waiting.find(request);
        if (w != s.waiting.end()) s.waiting.erase(w);  // died while waiting: its promise goes unanswered
        for (uint64_t id : s.granted) {
            auto it = s.waiting.find(id);
            if (it == s.waiting.end()) continue;
            it->second.deliver(kv_grant{true, {}});
            s.waiting.erase(it);
        }
    };
    auto pending = std::make_shared<int>(2);
    auto one_done = [pending, finish]() {
        if (--*pending == 0) finish();
    };
    const auto timeout = std::chrono::seconds(30);
    // A target node has no draft actor (the gateway's session closes the
    // draft node's sequence itself).
    if (auto v = rt->current_verifier())
        self->request(v, timeout, close_atom::value, request).then([one_done](bool) { one_done(); }, [one_done](caf::error&) { one_done(); });
    else one_done();
    if (auto d = rt->current_drafter())
        self->request(d, timeout, close_atom::value, request).then([one_done](bool) { one_done(); }, [one_done](caf::error&) { one_done(); });
    else one_done();
}

kv_manager_actor::behavior_type kv_fun(kv_manager_actor::stateful_pointer<kv_state> self, std::shared_ptr<RuntimeShared> rt) {
    KvPoolSpec t{rt->target_shape.n_blocks, rt->target_shape.block_size, rt->target_shape.max_sequences};
    KvPoolSpec d{rt->draft ? rt->draft_shape.n_blocks : 0, rt->draft_shape.block_size, rt->draft_shape.max_sequences};
    self->state.ledger = std::make_unique<KvLedger>(t, d, rt->config.max_waiting);
    self->set_down_handler([=](caf::down_msg& dm) {
        auto it = self->state.remote_owners.find(dm.source);
        if (it == self->state.remote_owners.end()) return;
        const uint64_t request = it->second;
        self->state.remote_owners.erase(it);
        log::warn("a remote session is gone; releasing its KV blocks", {{"request", request}, {"reason", self->system().render(dm.reason)}});
        kv_release(self, rt, request);
    });
    return {
        [=](kv_acquire& a) -> caf::typed_response_promise<kv_grant> {
            auto& s = self->state;
            // Local sessions release through their exit functor; a remote
            // one may vanish with its gateway, so watch it. (Before
            // make_response_promise, which takes the sender out of the message.)
            if (const caf::strong_actor_ptr sender = self->current_sender(); sender && sender->node() != self->node()) {
                s.remote_owners[caf::actor_cast<caf::actor_addr>(sender)] = a.request;
                self->monitor(sender);
            }
            auto rp = self->make_response_promise<kv_grant>();
            std::string why;
            Admission ad;
            try {
                ad = s.ledger->acquire(a.request, KvDemand{a.target_positions, a.draft_positions}, &why);
            } catch (const Error& e) {
                rp.deliver(kv_grant{false, e.what()});
                return rp;
            }
            if (ad == Admission::Refused) {
                rp.deliver(kv_grant{false, why});
                return rp;
            }
            // From here on the blocks are held until a release_atom: the
            // session sends one when it ends, and Runtime::submit attached
            // one to the session's exit, so a session that dies releases too.
            if (ad == Admission::Granted) rp.deliver(kv_grant{true, {}});
            else s.waiting.emplace(a.request, rp);
            return rp;
        },
        [=](release_atom, uint64_t request) {
            auto& s = self->state;
            for (auto it = s.remote_owners.begin(); it != s.remote_owners.end(); ++it) {
                if (it->second != request) continue;
                self->demonitor(it->first);
                s.remote_owners.erase(it);
                break;
            }
            kv_release(self, rt, request);
        },
        [=](stats_atom) -> runtime_stats {
            const KvLedger& l = *self->state.ledger;
            runtime_stats r;
            r.kv_target_blocks = l.target().n_blocks;
            r.kv_target_free = l.target_free_blocks();
            r.kv_draft_blocks = l.draft().n_blocks;
            r.kv_draft_free = l.draft_free_blocks();
            r.running = l.granted();
            r.waiting = l.waiting();
            r.kv_block_size = l.target().block_size;
            return r;
        },
    };
}

}  // namespace

kv_manager_actor spawn_kv_manager(const std::shared_ptr<RuntimeShared>& rt) { return rt->system->spawn(kv_fun, rt); }

}  // namespace specd
