// `trainer sweep`: validate every point, then run them as child `trainer run` processes (sweep_plan.hpp
// names the points, sweep_results.hpp reads what each run recorded).
#include "engine/commands/sweep_command.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "device/device.hpp"
#include "engine/commands/command_common.hpp"
#include "engine/commands/run_guard.hpp"
#include "engine/commands/sweep_plan.hpp"
#include "engine/commands/sweep_results.hpp"
#include "io/run_dir.hpp"
#include "io/run_lock.hpp"

namespace trainer::engine {
namespace sweep_detail {

namespace fs = std::filesystem;
using nlohmann::json;

std::atomic<int> g_signal{0}, g_signals{0};  // the last stop signal, and how many arrived
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP};

void on_stop_signal(int sig) {
  g_signal.store(sig);
  g_signals.fetch_add(1);
}

// A point ready to run: its config checked, its run folder and what that folder already holds.
struct Point {
  SweepPoint plan;
  std::vector<std::string> overrides;  // fixed + axes + its run folder
  fs::path run_dir;
  SweepRow row;
  bool skip = false;  // finished with this very config (its config.sha256): nothing to run
};


// As `trainer run` validates: the world of --nproc ranks laid out as a mesh.
config::ValidateOptions validate_options(const SweepArgs& a) {
  config::ValidateOptions vo;
  vo.world_size = a.nproc;
  vo.cuda_available = device::cuda_available();
  vo.builds_mesh = true;
  return vo;
}

std::vector<SweepRow> rows_of(const std::vector<Point>& points) {
  std::vector<SweepRow> rows;
  for (const auto& p : points) rows.push_back(p.row);
  return rows;
}

// Loads and validates every point's config and checks its run folder: the errors of all of them, or none.
bool prepare_points(const SweepArgs& a, const fs::path& sweep_dir,
                    const std::vector<std::string>& fixed, std::vector<Point>& points,
                    const std::vector<SweepPoint>& plan) {
  const auto vo = validate_options(a);
  bool ok = true;
  for (const auto& p : plan) {
    Point pt{p, fixed, sweep_dir / p.name, {}};
    for (const auto& o : p.overrides()) pt.overrides.push_back(o);
    pt.overrides.push_back("run.out_dir=" + sweep_dir.string());  // string keys take --set values verbatim
    pt.overrides.push_back("run.name=" + p.name);
    try {
      const auto loaded = config::load_and_validate(a.config, pt.overrides, vo);
      check_named_files(loaded, /*data=*/true, /*init=*/true);  // as `trainer run` does before it starts
      const auto guard = check_run_directory(loaded.cfg, pt.run_dir, ResumeOptions{}, false);
      std::ifstream saved_hash(pt.run_dir / "config.sha256");
      std::string hash;
      std::getline(saved_hash, hash);
      pt.skip = hash == config::config_hash(loaded.cfg);
      if (!guard.refusal.empty()) {
        std::cerr << "error: point " << p.name << ": " << guard.refusal
                  << " (for a sweep: another --name or --out-dir gives the new config its own folders)\n";
        ok = false;
      }
    } catch (const config::ConfigError& e) {
      std::cerr << "point " << p.name << ":\n";
      for (const auto& d : e.diagnostics()) std::cerr << "  " << d.str() << "\n";
      ok = false;
    }
    pt.row = {p.name, p.values, "not run", read_point_records(pt.run_dir)};
    // finished under other values of the keys a resume may change (a longer train.max_steps):
    // `trainer run` continues it, or says it is complete
    pt.skip = pt.skip && pt.row.records.finished;
    points.push_back(std::move(pt));
  }
  return ok;
}

// sweep.json: what was asked and each point's state, rewritten atomically as points end.
void write_state(const SweepArgs& a, const SweepSpec& spec, const fs::path& sweep_dir, const std::vector<Point>& pts) {
  json axes = json::array();
  for (const auto& ax : spec.axes) {
    json j = {{"key", ax.key}};
    if (ax.dist == SweepDist::List) j["values"] = ax.values;
    else j["distribution"] = {{"kind", ax.dist == SweepDist::Uniform ? "uniform"
                                       : ax.dist == SweepDist::LogUniform ? "loguniform" : "randint"},
                              {"low", ax.lo}, {"high", ax.hi}};
    axes.push_back(j);
  }
  json j = {{"config", fs::absolute(a.config).string()}, {"fixed", spec.fixed}, {"axes", axes},
            {"random", a.random}, {"seed", a.seed}, {"nproc", a.nproc}, {"points", rows_json(rows_of(pts))}};
  io::write_file_atomic(sweep_dir / "sweep.json", j.dump(2) + "\n");
}

std::string figures(const PointRecords& r) {
  std::string s;
  auto add = [&](const std::string& t) { s += (s.empty() ? "" : ", ") + t; };
  if (r.steps) add(fmt::format("{} steps", *r.steps));
  if (r.train_loss) add(fmt::format("train loss {:.4f}", *r.train_loss));
  if (r.val_loss) add(fmt::format("val loss {:.4f}", *r.val_loss));
  if (r.val_accuracy) add(fmt::format("val acc {:.2f} %", *r.val_accuracy * 100));
  if (r.val_bpb) add(fmt::format("val bpb {:.4f}", *r.val_bpb));
  return s;
}

std::string log_tail(const fs::path& log, size_t lines) {
  std::ifstream in(log);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "    " + all[i] + "\n";
  return out;
}

// One `trainer run` (or `trainer launch -n P -- run`) of a point, its output appended to `log`.
pid_t start_point(const SweepArgs& a, const Point& p, const fs::path& log) {
  std::vector<std::string> args{"/proc/self/exe"};
  if (a.nproc > 1) args.insert(args.end(), {"launch", "-n", std::to_string(a.nproc), "--"});
  args.insert(args.end(), {"run", a.config});
  for (const auto& o : p.overrides) args.insert(args.end(), {"--set", o});
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("sweep: cannot open " + log.string() + ": " + std::strerror(errno));
  const pid_t parent = ::getpid();
  // blocked across fork (as trainer launch does): a signal forwarded before the child set its mask
  // stays pending in it instead of running this process's handler there or killing it
  sigset_t stops, before;
  sigemptyset(&stops);
  for (int s : kStopSignals) sigaddset(&stops, s);
  ::pthread_sigmask(SIG_BLOCK, &stops, &before);
  const pid_t pid = ::fork();
  if (pid > 0 || pid < 0) {
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    if (pid < 0) throw std::runtime_error("sweep: fork(): " + std::string(std::strerror(fork_errno)));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan runs when the sweep is killed
    if (::getppid() != parent) ::_exit(kExitFailure);
    ::setpgid(0, 0);  // a terminal's Ctrl-C reaches the sweep only; it forwards once
    sigset_t mask;    // blocked across exec until `trainer run` installs its handlers
    sigemptyset(&mask);
    for (int s : kStopSignals) {
      ::signal(s, SIG_DFL);
      sigaddset(&mask, s);
    }
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(argv[0], argv.data());
    const char msg[] = "sweep: execv failed\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::close(fd);
  return pid;
}

void install_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : kStopSignals) ::sigaction(s, &sa, nullptr);
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : kStopSignals) sigaddset(&mask, s);
  ::sigprocmask(SIG_UNBLOCK, &mask, nullptr);  // main() kept them blocked (pending) until now
}

// Runs the points not finished yet, `jobs` at once. Returns the exit code.
int run_points(const SweepArgs& a, const SweepSpec& spec, const fs::path& sweep_dir, std::vector<Point>& pts) {
  fs::create_directories(sweep_dir / "logs");
  install_handlers();
  std::map<pid_t, size_t> running;
  std::map<pid_t, std::chrono::steady_clock::time_point> started;
  size_t next = 0;
  int seen_signals = 0, result = kExitOk;
  bool stopping = false;
  const size_t n = pts.size();
  write_state(a, spec, sweep_dir, pts);
  for (;;) {
    if (const int k = g_signals.load(); k != seen_signals) {
      seen_signals = k;
      const int sig = g_signal.load();
      for (const auto& [pid, i] : running) ::kill(pid, sig);
      if (!stopping)
        std::cout << "sweep: " << strsignal(sig) << ": forwarded to the " << running.size()
                  << " running point(s); no new point starts\n" << std::flush;
      stopping = true;
    }
    while (!stopping && running.size() < static_cast<size_t>(a.jobs) && next < n) {
      Point& p = pts[next++];
      const std::string tag = fmt::format("[{}/{}] {}", next, n, p.plan.name);
      if (p.skip) {
        p.row.status = "done before";
        std::cout << tag << ": finished before; skipped (" << figures(p.row.records) << ")\n" << std::flush;
        continue;
      }
      const fs::path log = sweep_dir / "logs" / (p.plan.name + ".log");
      const pid_t pid = start_point(a, p, log);
      running[pid] = static_cast<size_t>(&p - pts.data());
      started[pid] = std::chrono::steady_clock::now();
      p.row.status = "running";
      std::cout << tag << ": " << (p.row.records.started ? "resuming" : "started") << " (log " << log.string() << ")\n"
                << std::flush;
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0 || !running.count(pid)) {
      if (pid <= 0) {
        const timespec t{0, 100'000'000};  // a signal cuts it short
        ::nanosleep(&t, nullptr);
      }
      continue;
    }
    Point& p = pts[running[pid]];
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started[pid]).count();
    running.erase(pid);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    p.row.records = read_point_records(p.run_dir);
    if (code == kExitOk && p.row.records.finished) {
      p.row.status = "done";
      // the point's process, start-up included; the table's `train s` is the summary's training time
      std::cout << p.plan.name << ": done in " << fmt::format("{:.1f} s", secs) << ", start-up included ("
                << figures(p.row.records) << ")\n";
    } else if (code == kExitSavedAfterSignal) {
      p.row.status = "stopped";
      if (result == kExitOk) result = kExitSavedAfterSignal;
      std::cout << p.plan.name << ": stopped after saving a checkpoint (the same sweep command resumes it)\n";
    } else {
      p.row.status = code == kExitOk ? "no summary record" : fmt::format("failed (exit {})", code);
      result = kExitFailure;
      std::cout << p.plan.name << ": " << p.row.status << "; the end of its log ("
                << (sweep_dir / "logs" / (p.plan.name + ".log")).string() << "):\n"
                << log_tail(sweep_dir / "logs" / (p.plan.name + ".log"), 8);
    }
    std::cout << std::flush;
    write_state(a, spec, sweep_dir, pts);
  }
  write_state(a, spec, sweep_dir, pts);
  // stopped between points, or before some started: nothing lost, but the sweep is not complete
  if (stopping && result == kExitOk && next < n) result = kExitSavedAfterSignal;
  return result;
}

// What the command line asks for: the points, the overrides every point gets, the sweep's folder.
// Throws std::invalid_argument and config::ConfigError (exit 2).
struct SweepRequest {
  SweepSpec spec;
  std::vector<SweepPoint> plan;
  std::vector<std::string> fixed;
  fs::path dir;
};

SweepRequest read_request(const SweepArgs& a) {
  SweepRequest r;
  r.spec = parse_sweep_sets(a.sets);
  if (r.spec.axes.empty())
    throw std::invalid_argument("nothing to sweep: give at least one --set KEY=a,b,... (or a distribution with "
                                "--random N)");
  r.plan = a.random > 0 ? random_points(r.spec, a.random, a.seed) : grid_points(r.spec);
  if (a.random > static_cast<int64_t>(r.plan.size()))  // the whole grid: fewer points than asked, said
    std::cerr << "sweep: --random " << a.random << " asks for more points than the grid's " << r.plan.size()
              << ": running every grid point once\n";
  r.fixed = r.spec.fixed;
  auto base_sets = r.fixed;
  if (!a.out_dir.empty()) base_sets.push_back("run.out_dir=" + fs::absolute(a.out_dir).string());
  // read, not validated: a key the file leaves to the sweep's axes (train.max_steps=2,3) is every
  // point's to give; prepare_points validates each point whole
  const auto base = config::load_config(a.config, base_sets);
  const std::string name = a.name.empty() ? base.cfg.run.name + "-sweep" : a.name;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      std::any_of(name.begin(), name.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7F; }))
    throw std::invalid_argument("--name " + config::printable(name) + ": one folder name (not . or .., no '/' and no "
                                "control characters)");
  r.dir = fs::absolute(fs::path(base.cfg.run.out_dir) / name).lexically_normal();
  // points at once share the cores: each gets its part unless the config says how many threads
  if (a.jobs > 1 && base.cfg.train.threads == 0) {
    const int64_t ranks = a.jobs * a.nproc;
    const int64_t per = std::max<int64_t>(1, device::usable_cpus() / ranks);
    std::erase_if(r.fixed, [](const std::string& o) { return o.rfind("train.threads=", 0) == 0; });  // "=0"
    r.fixed.push_back("train.threads=" + std::to_string(per));
    std::cout << "sweep: " << a.jobs << " points at once: train.threads=" << per << " each\n";
  }
  return r;
}

int sweep(const SweepArgs& a) {
  const SweepRequest req = read_request(a);
  std::vector<Point> points;
  if (!prepare_points(a, req.dir, req.fixed, points, req.plan)) {
    std::cerr << "nothing was started\n";
    return kExitUsage;
  }
  size_t done = 0;
  for (const auto& p : points) done += p.skip;
  std::cout << "sweep: " << points.size() << " point" << (points.size() == 1 ? "" : "s") << " of " << a.config
            << " in " << req.dir.string() << " (" << done << " finished before)\n";
  if (a.dry_run) {
    for (auto& p : points) p.row.status = p.skip ? "done before" : p.row.records.started ? "partial" : "new";
    std::cout << rows_table(rows_of(points));
    return kExitOk;
  }
  // one sweep at a time in a folder: a second one's points would meet the first's locks and share
  // their logs/<point>.log (it printed the other sweep's log as its failure)
  fs::create_directories(req.dir);
  std::optional<io::RunLock> lock;
  try {
    lock.emplace(req.dir / "sweep.lock", "sweep folder " + req.dir.string());
  } catch (const io::RunDirBusy& e) {
    std::cerr << "error: " << e.what() << "; nothing was started (give this sweep another --name)\n";
    return kExitUsage;
  }
  const int rc = run_points(a, req.spec, req.dir, points);
  std::cout << "\n" << rows_table(rows_of(points)) << "(also in " << (req.dir / "sweep.json").string()
            << "; trainer report " << req.dir.string() << " draws them together)\n";
  return rc;
}

}  // namespace sweep_detail

// config errors and bad --set values exit 2 before anything starts; a failure while running, 1
int cmd_sweep(const SweepArgs& a) {
  return run_command([&] { return sweep_detail::sweep(a); });
}

}  // namespace trainer::engine
