// dist.recovery in_process: the commit vote of every step and the regroup after a peer's failure.
// The keys are described with RecoveryState (dist_impl.hpp). The store is the one `trainer launch`
// hosts, so it outlives every rank; the launcher also writes dead/<id> when a rank's process ends.
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <functional>
#include <cstdlib>
#include <sstream>

#include "dist/dist_impl.hpp"

namespace trainer::dist {

namespace {

using SteadyClock = std::chrono::steady_clock;

std::string text_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// A store operation of the recovery that failed: the store lives in node 0's launcher (or torchrun's
// agent), so that process is gone or cut off and no regroup can be agreed. Said so, with what was
// being done, instead of c10d's bare "Broken pipe" (found from outside: node 0's launcher killed).
DistError store_lost(int64_t rank, const std::string& doing, const std::exception& e) {
  return DistError("rank " + std::to_string(rank) + ": " + doing + ": the rendezvous store cannot be reached (" +
                   error_text(e) + "). It lives in node 0's launcher (or torchrun's agent), which is gone or cut off: "
                   "dist.recovery in_process cannot go on without it; start the job again (it resumes from its last "
                   "checkpoint)");
}

bool is_subset(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  for (int64_t x : a)
    if (std::find(b.begin(), b.end(), x) == b.end()) return false;
  return true;
}

std::string join_ids(const std::vector<int64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {  // appends, not "," + string: GCC 12's -Wstringop-overflow false positive
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

// Waits for `key` in slices of `slice`, asking `give_up` between them (a failure notice, the end of
// the run). True once the key is there (also when it came just before the reason to give up), false
// when `give_up` said so first; DistError naming `what` after `limit_s`.
bool wait_key(c10d::Store& store, const std::string& key, std::chrono::milliseconds slice, double limit_s,
              const std::function<bool()>& give_up, const std::string& what) {
  const auto until = SteadyClock::now() + std::chrono::milliseconds(static_cast<int64_t>(limit_s * 1000));
  for (;;) {
    try {
      store.wait({key}, slice);
      return true;
    } catch (const std::exception&) {
      // a slice without the key
    }
    if (give_up()) return store.check({key});
    if (SteadyClock::now() >= until)
      throw DistError(what + " within dist.timeout_s=" + std::to_string(limit_s) + " s");
  }
}

}  // namespace

void DistContext::read_kill_injection() {
  const char* v = std::getenv("TRAINER_INJECT_KILL");
  if (!v || !*v) return;
  // RANK:collective:SEQ | RANK:vote:STEP | RANK:unvoted:STEP | RANK:save:STEP | RANK:eval:STEP | RANK:share:N |
  // RANK:grow:N | RANK:start:N | RANK:setup:ATTEMPT, several separated by commas (one per rank); only the process whose launch
  // rank is RANK acts on its entry (a replacement of RANK does not: TRAINER_JOIN)
  std::stringstream entries(v);
  for (std::string entry; std::getline(entries, entry, ',');) {
    std::stringstream ss(entry);
    std::string who, kind, n;
    std::getline(ss, who, ':');
    std::getline(ss, kind, ':');
    std::getline(ss, n);
    int64_t rank = -1, at = -1;
    try {
      rank = std::stoll(who);
      at = std::stoll(n);
    } catch (const std::exception&) {
    }
    const bool moment = kind == "save" || kind == "eval" || kind == "share" || kind == "grow" || kind == "start" ||
                        kind == "setup";
    if (rank < 0 || at < 0 || (kind != "collective" && kind != "vote" && kind != "unvoted" && !moment))
      throw DistError(std::string("TRAINER_INJECT_KILL='") + v +
                      "': expected RANK:collective:SEQ, RANK:vote:STEP, RANK:unvoted:STEP, RANK:save:STEP, "
                      "RANK:eval:STEP, RANK:share:N, RANK:grow:N, RANK:start:N or RANK:setup:ATTEMPT, several "
                      "separated by commas");
    if (rank != rank_ || join_incarnation_ > 0) continue;
    if (moment) {
      impl_->kill.moment = kind;
      impl_->kill.at = at;
    } else if (kind == "unvoted") {
      impl_->kill.unvoted_step = at;
    } else {
      (kind == "vote" ? impl_->kill.vote_step : impl_->kill.seq) = at;
    }
  }
}

void DistContext::kill_point(const std::string& moment, int64_t n) {
  if (!impl_ || impl_->kill.moment != moment || impl_->kill.at != n) return;
  impl_->kill.moment.clear();  // once
  impl_->die(("the " + moment + " of").c_str(), static_cast<uint64_t>(n));
}

void DistContext::new_process_group(const std::vector<int64_t>& members) {
  auto& rec = impl_->rec;
  rec.members = members;
  ++rec.generation;
  rank_ = std::find(members.begin(), members.end(), rec.id) - members.begin();
  world_size_ = static_cast<int64_t>(members.size());
  impl_->rank = rank_;
  seq_ = 0;
  if (world_size_ <= 1) return;
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>(rec.gen_key("pg/"), impl_->store);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  try {
    impl_->backend = make_gloo_backend(pg_store, rank_, world_size_, impl_->net, timeout);
  } catch (const std::exception& e) {
    impl_->failed = true;
    throw DistError("member " + std::to_string(rec.id) + ": building the process group of generation " +
                    std::to_string(rec.generation) + " (" + std::to_string(world_size_) + " ranks) failed: " +
                    error_text(e));
  }
}

bool DistContext::recovery() const { return impl_ && impl_->rec.on; }
int64_t DistContext::member_id() const { return impl_ ? impl_->rec.id : rank_; }

void DistContext::start_recovery(const LaunchEnv& env, const std::string& prefix) {
  auto& rec = impl_->rec;
  rec.on = true;
  rec.prefix = prefix;
  rec.id = env.rank;
  rec.generation = 0;
  for (int64_t r = 0; r < env.world_size; ++r) rec.members.push_back(r);
  // the launcher reads this when a rank's process ends: mark it dead and let the others go on,
  // instead of stopping the whole group
  impl_->store->set(prefix + "mode", bytes_of("in_process"));
}

void DistContext::arm_recovery() {
  if (!impl_ || !impl_->rec.on) return;
  impl_->store->add(impl_->rec.prefix + "armed", 1);  // counted: the launcher compares it with the world
}

void DistContext::commit_step(int64_t step) try {
  if (!active() || !recovery()) return;
  auto& rec = impl_->rec;
  auto& store = *impl_->store;
  const std::string key = rec.gen_key("step_" + std::to_string(step));
  if (rec.generation == 0 && impl_->kill.unvoted_step == step + 1) impl_->die("the commit vote (unvoted) of step", step + 1);
  if (store.add(key + "/ok", 1) == world_size_) store.set(key + "/go", bytes_of("1"));
  if (rec.generation == 0 && impl_->kill.vote_step == step + 1) impl_->die("the commit vote of step", step + 1);
  // A member that died between the gradient sync and its vote fails no collective: the vote would
  // wait for it until dist.timeout_s (the recovery matrix stalled 30 s this way on a loaded host).
  // Its launcher's death mark ends the wait instead; the first to see it announces it.
  int64_t slices = 0;
  const auto peer_failed = [&] {
    if (rec.abort_seen(store)) return true;
    if (++slices % kDeadScanSlices != 0) return false;
    const int64_t dead = rec.dead_member(store);
    if (dead < 0) return false;
    (void)store.compareSet(rec.gen_key("abort"), std::vector<uint8_t>{},
                           bytes_of("member " + std::to_string(dead) + "'s process ended before it voted on step " +
                                    std::to_string(step + 1) + " (its launcher's mark)"));
    return true;
  };
  const std::string vote = "rank " + std::to_string(rec.id) + ": the commit vote of step " + std::to_string(step + 1);
  bool voted = false;
  {
    const Impl::Watched watched(*impl_, vote);  // as a collective is: a stop signal while it stalls is explained
    voted = wait_key(store, key + "/go", kPollSlice, timeout_s_, peer_failed, vote + " did not finish");
  }
  if (!voted)
    throw DistError("rank " + std::to_string(rank_) + ": step " + std::to_string(step + 1) +
                    " abandoned before its optimizer step: a peer failed (" + rec.abort_reason(store) + ")");
} catch (const DistError&) {
  throw;
} catch (const std::exception& e) {
  throw store_lost(rank_, "the commit vote of step " + std::to_string(step + 1), e);
}

DistContext::Regrouped DistContext::regroup(int64_t committed_steps, const std::string& why) try {
  auto& rec = impl_->rec;
  auto& store = *impl_->store;
  Regrouped out;
  out.old_rank = rank_;
  out.old_world = world_size_;
  // 1. tell everyone still waiting (first writer wins: its reason is what the others report), check in
  (void)store.compareSet(rec.gen_key("abort"), std::vector<uint8_t>{}, bytes_of("member " + std::to_string(rec.id) + ": " + why));
  store.set(rec.gen_key("alive/" + std::to_string(rec.id)), bytes_of(std::to_string(committed_steps)));

  // 2. every member of this generation either checks in or is marked dead by the launcher; one that
  //    does neither within dist.timeout_s (a hung process, a host cut off) counts as lost
  const auto until = SteadyClock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  std::vector<int64_t> alive;
  for (;;) {
    alive.clear();
    size_t resolved = 0;
    for (int64_t m : rec.members) {
      if (store.check({rec.gen_key("alive/" + std::to_string(m))})) {
        alive.push_back(m);
        ++resolved;
      } else if (store.check({rec.prefix + "dead/" + std::to_string(m)})) {
        ++resolved;
      }
    }
    if (resolved == rec.members.size() || SteadyClock::now() >= until) break;
    std::this_thread::sleep_for(kPollSlice);
  }

  // 3. the first complete proposal is the next generation's membership, for everyone
  const std::string checked_in = rec.gen_key("alive/");  // where the survivors' committed steps are
  auto next = parse_ids(
      text_of(store.compareSet(rec.gen_key("next"), std::vector<uint8_t>{}, bytes_of(join_ids(alive)))));
  const auto old_members = rec.members;
  if (!is_subset(next, old_members)) {
    // rank 0 had proposed to admit replacements (propose_growth) and the failure came before the grown
    // group formed: that generation is given up (its joiners, who hold no state yet, see the notice
    // and sign up again) and the survivors regroup in the one after it, without the joiners
    ++rec.generation;
    (void)store.compareSet(rec.gen_key("abort"), std::vector<uint8_t>{},
                           bytes_of("member " + std::to_string(rec.id) + ": a failure while the group grew: " + why));
    next = parse_ids(
        text_of(store.compareSet(rec.gen_key("next"), std::vector<uint8_t>{}, bytes_of(join_ids(alive)))));
  }
  for (int64_t m : old_members)
    if (std::find(next.begin(), next.end(), m) == next.end()) out.lost.push_back(m);
  const auto me = std::find(next.begin(), next.end(), rec.id);
  if (me == next.end())
    throw DistError("member " + std::to_string(rec.id) + " was left out of the regrouped job (its peers saw no sign "
                    "of it within dist.timeout_s); it stops here");
  for (int64_t m : next) {
    const auto steps = text_of(store.get(checked_in + std::to_string(m)));
    if (steps != std::to_string(committed_steps))
      throw DistError("after a peer's failure, member " + std::to_string(m) + " has taken " + steps +
                      " optimizer steps and member " + std::to_string(rec.id) + " " +
                      std::to_string(committed_steps) + ": the survivors cannot go on together");
  }

  // 4. the old process group may have worker threads blocked on the dead peer: leak it (destroying
  //    it could block); the new one meets under the new generation's prefix
  (void)impl_->backend.release();
  impl_->failed = false;
  new_process_group(next);
  out.rank = rank_;
  out.world = world_size_;
  out.generation = rec.generation;
  return out;
} catch (const DistError&) {
  throw;
} catch (const std::exception& e) {
  throw store_lost(rank_, "regrouping after a failure (" + why + ")", e);
}

namespace {
// The join list's entries are "<id>@<incarnation>,": a rank replaced twice joins twice.
std::vector<std::pair<int64_t, std::string>> waiting_joiners(c10d::Store& store, const RecoveryState& rec) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!store.check({rec.prefix + "join_list"})) return out;
  std::stringstream ss(text_of(store.get(rec.prefix + "join_list")));
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty() || store.check({rec.prefix + "join/" + item + "/admitted"})) continue;
    const int64_t id = std::stoll(item.substr(0, item.find('@')));
    // "<id>@<incarnation>[.<try>]": a replacement whose process ended before it was admitted (the
    // launcher marks dead/<id>@<incarnation>) must not be proposed
    const std::string incarnation = item.substr(0, item.find('.'));
    if (store.check({rec.prefix + "dead/" + incarnation})) continue;
    if (std::find(rec.members.begin(), rec.members.end(), id) == rec.members.end()) out.push_back({id, item});
  }
  return out;
}

// The next generation's members, in rank order, when `joiners` are admitted to `members`: the current
// rank 0 stays first (it holds the run's state and files: it sends the state to the joiners and goes
// on writing the records and checkpoints), the others, joiners among them, follow in member-id order.
// Sorting rank 0 in with the rest would make a replacement of member 0 the new rank 0: a fresh
// process would send its untrained state to the group (found as "no optimizer.safetensors" and
// survivors that crashed, issue 28).
std::vector<int64_t> grown_membership(const std::vector<int64_t>& members,
                                      const std::vector<std::pair<int64_t, std::string>>& joiners) {
  std::vector<int64_t> rest(members.begin() + (members.empty() ? 0 : 1), members.end());
  for (const auto& j : joiners) rest.push_back(j.first);
  std::sort(rest.begin(), rest.end());
  rest.erase(std::unique(rest.begin(), rest.end()), rest.end());
  std::vector<int64_t> next;
  if (!members.empty()) next.push_back(members.front());
  for (int64_t m : rest)
    if (next.empty() || m != next.front()) next.push_back(m);
  return next;
}

}  // namespace

void DistContext::mark_finished() {
  if (recovery() && !joining_) impl_->store->set(impl_->rec.prefix + "finished", bytes_of("1"));
}

std::optional<DistContext::Regrouped> DistContext::join(const std::function<bool()>& give_up) {
  auto& rec = impl_->rec;
  auto& store = *impl_->store;
  const auto run_over = [&] { return store.check({rec.prefix + "finished"}) || give_up(); };
  // a growth that a failure called off (meet_grown) leaves this rank without the state: it signs up
  // again, under a new entry, and waits for the next admission
  for (int64_t tries = 0;; ++tries) {
    const std::string entry = std::to_string(rec.id) + "@" + std::to_string(join_incarnation_) +
                              (tries ? "." + std::to_string(tries) : "");
    store.append(rec.prefix + "join_list", bytes_of(entry + ","));
    // the group admits joiners at its stop checks (every few steps); it may be busy evaluating or saving
    const std::string admitted = rec.prefix + "join/" + entry + "/admitted";
    if (!wait_key(store, admitted, std::chrono::milliseconds(500), timeout_s_, run_over,
                  "member " + std::to_string(rec.id) + ": the running group did not admit this replacement"))
      return std::nullopt;
    const int64_t generation = std::stoll(text_of(store.get(admitted)));  // the one it joins
    rec.generation = generation - 1;
    const auto members = parse_ids(text_of(store.get(rec.gen_key("next"))));
    if (!meet_grown(members)) {
      std::fprintf(stderr, "in-process recovery: member %lld: the group failed while it admitted this replacement; "
                   "signing up again\n", static_cast<long long>(rec.id));
      continue;
    }
    Regrouped out;
    out.old_world = 1;
    joining_ = false;
    new_process_group(members);
    out.rank = rank_;
    out.world = world_size_;
    out.generation = rec.generation;
    return out;
  }
}

// Every member of the grown generation (rec.generation + 1: the group's members and the admitted
// joiners) checks in before any builds its process group, so that a member that died after rank 0's
// proposal cannot hold the others in Gloo's rendezvous until dist.timeout_s. The outcome is decided
// once, by compare-and-set: "go" when all checked in, "off" when a failure notice of the current or
// the grown generation, a death mark of a member, or dist.timeout_s came first. Every member acts on
// the same outcome: after "off" the members regroup (regroup() finds the growth and skips it), the
// joiners sign up again.
bool DistContext::meet_grown(const std::vector<int64_t>& next) {
  auto& rec = impl_->rec;
  auto& store = *impl_->store;
  const std::string grown = rec.prefix + "gen_" + std::to_string(rec.generation + 1) + "/";
  store.set(grown + "ready/" + std::to_string(rec.id), bytes_of("1"));
  const auto decide = [&](const char* what) {
    return text_of(store.compareSet(grown + "formed", std::vector<uint8_t>{}, bytes_of(what))) == "go";
  };
  const auto until = SteadyClock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  for (;;) {
    size_t ready = 0;
    bool dead = false;
    for (int64_t m : next) {
      if (store.check({grown + "ready/" + std::to_string(m)})) ++ready;
      else if (store.check({rec.prefix + "dead/" + std::to_string(m)})) dead = true;
    }
    if (ready == next.size()) return decide("go");
    if (store.check({grown + "formed"})) return decide("off");  // decided already: "off" adds nothing
    if (dead || rec.abort_seen(store) || store.check({grown + "abort"}) || SteadyClock::now() >= until)
      return decide("off");
    std::this_thread::sleep_for(kPollSlice);
  }
}

bool DistContext::propose_growth() {
  if (!recovery() || joining_ || rank_ != 0) return false;
  auto& rec = impl_->rec;
  auto& store = *impl_->store;
  const auto joiners = waiting_joiners(store, rec);
  if (joiners.empty()) return false;
  const auto next = grown_membership(rec.members, joiners);
  const std::string proposal = join_ids(next);
  // a regroup after a failure may have claimed the next generation first: then no growth now
  if (text_of(store.compareSet(rec.gen_key("next"), std::vector<uint8_t>{}, bytes_of(proposal))) != proposal)
    return false;
  for (const auto& j : joiners) {
    // the launcher marked the member this joiner replaces dead: that mark is of the process that died,
    // and a later regroup must not read it as this one's (it would count a live member lost)
    (void)store.deleteKey(rec.prefix + "dead/" + std::to_string(j.first));
    store.set(rec.prefix + "join/" + j.second + "/admitted", bytes_of(std::to_string(rec.generation + 1)));
  }
  return true;
}

DistContext::Regrouped DistContext::grow() {
  auto& rec = impl_->rec;
  Regrouped out;
  out.old_rank = rank_;
  out.old_world = world_size_;
  kill_point("grow", ++impl_->kill.grows);  // tests: a member lost after the growth was agreed
  const auto next = parse_ids(text_of(impl_->store->get(rec.gen_key("next"))));
  if (!meet_grown(next))
    throw DistError("member " + std::to_string(rec.id) + ": the group could not grow to " + join_ids(next) +
                    " (a member failed or a peer announced a failure first): regrouping instead");
  impl_->backend.reset();  // healthy: it ends its threads
  new_process_group(next);
  out.rank = rank_;
  out.world = world_size_;
  out.generation = rec.generation;
  return out;
}

}  // namespace trainer::dist
