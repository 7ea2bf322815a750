// Shared by the hardening tests: a run started in the background (by a shell, or by fork and exec to
// signal it at a chosen moment), waiting for files and processes, re-signing a
// checkpoint's manifest after a test edited it (so that only the edit, not a checksum, is wrong).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/sha256.hpp"
#include "test_util.hpp"

namespace trainer::test {

// `trainer ARGS` in the background; its output goes to `log`, and "rc=<exit code>" to `rc_file` when
// it ends.
inline void start_trainer(const std::string& args, const std::filesystem::path& log, const std::filesystem::path& rc_file,
                          const std::string& env = "") {
  const std::string cmd = "( " + env + (env.empty() ? "" : " ") + "\"" + TRAINER_BIN + "\" " + args + " > \"" +
                          log.string() + "\" 2>&1; echo rc=$? > \"" + rc_file.string() + "\" ) < /dev/null > /dev/null 2>&1 &";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

// The exit code written by start_trainer's command, waiting for it (-1 on time-out).
inline int wait_rc(const std::filesystem::path& rc_file, double seconds = 300) {
  if (!wait_for([&] { return read_file(rc_file).find('\n') != std::string::npos; }, seconds)) return -1;
  return std::stoi(read_file(rc_file).substr(3));
}

// `trainer ARGS` by a plain fork and exec, as a shell or a scheduler starts it (nothing blocked,
// default handlers); its output goes to `log`. Returns the pid.
inline pid_t spawn_trainer(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<std::string> store{TRAINER_BIN};
  store.insert(store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : store) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    ::dup2(fileno(f), 1);
    ::dup2(fileno(f), 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) ::signal(sig, SIG_DFL);
    ::execv(TRAINER_BIN, argv.data());
    ::_exit(127);
  }
  return pid;
}

// Whether `pid` has started running the trainer: its front blocked the stop signals (the first
// thing it does), or the real program (libexec/trainer) is running.
inline bool trainer_started(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink(proc + "/exe", ec).string();
  if (exe.size() > 16 && exe.compare(exe.size() - 16, 16, "/libexec/trainer") == 0) return true;
  if (ec || std::filesystem::path(exe).filename() != "trainer") return false;  // not exec'd yet
  std::istringstream status(read_file(proc + "/status"));
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigBlk:", 0) == 0) {
      const unsigned long long blocked = std::stoull(line.substr(7), nullptr, 16);
      const unsigned long long stop = 1ull << (SIGTERM - 1) | 1ull << (SIGINT - 1) | 1ull << (SIGUSR1 - 1) | 1ull << (SIGHUP - 1);
      return (blocked & stop) == stop;
    }
  return false;
}

// Waits for `pid` to end (SIGKILL past `seconds`, scaled); its exit code, 128 + signal if killed.
inline int wait_pid(pid_t pid, double seconds = 300) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(scaled(seconds));
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > end) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The pid a run's lock file names ("pid 123 on host ..."), or 0.
inline pid_t lock_holder(const std::filesystem::path& lock) {
  const std::string s = read_file(lock);
  if (s.rfind("pid ", 0) != 0) return 0;
  return static_cast<pid_t>(std::stol(s.substr(4)));
}

// A TCP port on 127.0.0.1 that takes connections (the kernel completes them into the backlog) and never
// answers: a stopped store host, or another program on the master port.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(fd_, 64) == 0);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Recomputes the checksums of every file a manifest lists and its own checksum, as a save would:
// the checkpoint verifies again after a test changed a file on purpose.
inline void resign_manifest(const std::filesystem::path& step_dir) {
  const auto path = step_dir / "manifest.json";
  auto m = nlohmann::json::parse(read_file(path));
  for (auto& [name, entry] : m["files"].items()) {
    entry["sha256"] = trainer::sha256_hex(read_file(step_dir / name));
    entry["bytes"] = static_cast<int64_t>(std::filesystem::file_size(step_dir / name));
  }
  m.erase("self_sha256");
  m["self_sha256"] = trainer::sha256_hex(m.dump());
  write_file(path, m.dump(1));
}

}  // namespace trainer::test
